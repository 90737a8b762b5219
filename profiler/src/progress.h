// A one-line progress bar on stderr when it is a terminal; otherwise an info log line at every
// tenth of the work, so CI logs show progress without carriage returns.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

#include "gp/common/logging.h"

namespace gp::profile::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string what) : what_(std::move(what)), tty_(isatty(2) != 0) {}
  ~ProgressBar() { finish(); }

  void update(int done, int total, const std::string& item) {
    if (total <= 0) return;
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = done * kWidth / total;
      std::fprintf(stderr, "\r%s [%.*s%*s] %d/%d %-50.50s", what_.c_str(), filled,
                   "##############################", kWidth - filled, "", done, total,
                   item.c_str());
      std::fflush(stderr);
      open_ = true;
    } else if (done * 10 / total != last_tenth_ || done == total) {
      last_tenth_ = done * 10 / total;
      log::get("profile")->info("{} {}/{}: {}", what_, done, total, item);
    }
  }
  void finish() {
    if (open_) std::fprintf(stderr, "\n");
    open_ = false;
  }

 private:
  std::string what_;
  bool tty_;
  bool open_ = false;
  int last_tenth_ = -1;
};

}  // namespace gp::profile::cli
