// A Catch2 listener that records every test case a process runs, so the suite can check that
// CTest ran every case the binaries list (test/support/check_catch_cases.py). Include it in the
// one translation unit of a binary that defines main.
//
// Off unless GP_CATCH_LEDGER names a directory: each process then appends to a file of its own
// there, one line per finished case, flushed at once so a crash keeps what ran before it.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace gp::test {

class CaseLedger : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;
  CaseLedger(const CaseLedger&) = delete;
  CaseLedger& operator=(const CaseLedger&) = delete;
  ~CaseLedger() override {
    if (file_ != nullptr) std::fclose(file_);
  }

  void testRunStarting(const Catch::TestRunInfo& info) override {
    TestEventListenerBase::testRunStarting(info);
    const char* dir = std::getenv("GP_CATCH_LEDGER");
    if (dir == nullptr || *dir == '\0') return;
    const std::string process = executable_path();
    const std::string base = process.substr(process.find_last_of('/') + 1);
    const std::string path = std::string(dir) + "/" + base + "." + std::to_string(getpid());
    file_ = std::fopen(path.c_str(), "a");
    if (file_ == nullptr) {
      // Failing loudly beats a ledger that silently misses this process.
      std::fprintf(stderr, "case ledger: cannot open %s\n", path.c_str());
      std::exit(3);
    }
    std::fprintf(file_, "binary\t%s\n", process.c_str());
    for (const auto& filter : m_config->getTestsOrTags()) {
      std::fprintf(file_, "filter\t%s\n", filter.c_str());
    }
    std::fflush(file_);
  }

  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    TestEventListenerBase::testCaseEnded(stats);
    if (file_ == nullptr) return;
    std::fprintf(file_, "case\t%zu\t%s\t%s\n", stats.totals.assertions.total(),
                 stats.totals.assertions.allOk() ? "ok" : "failed", stats.testInfo.name.c_str());
    std::fflush(file_);
  }

  void testRunEnded(const Catch::TestRunStats& stats) override {
    TestEventListenerBase::testRunEnded(stats);
    if (file_ == nullptr) return;
    std::fprintf(file_, "end\t%zu\n", stats.totals.testCases.total());
    std::fflush(file_);
  }

 private:
  // Catch2 keeps only argv[0]'s base name; the checker matches binaries by full path.
  static std::string executable_path() {
    char path[4096];
    const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string("unknown");
  }

  std::FILE* file_ = nullptr;
};

CATCH_REGISTER_LISTENER(CaseLedger)

}  // namespace gp::test
