// The OpenBLAS kernel set the CPU backend runs (executor/src/cpu/blas_kernels.cc): once chosen,
// it is what OpenBLAS reports, it is no pre-AVX2 set on a CPU with AVX2 (unless the user forced
// one), and the variable that forced it is not left for child processes, and its GEMMs compute what
// a plain triple loop does for every transpose and ragged size.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernel_util.h"
#include "gp/exec/device.h"

extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);

namespace {

// OPENBLAS_CORETYPE as the process started (use_best_blas_kernels sets it for our children).
bool coretype_given_at_start() {
  std::ifstream environ("/proc/self/environ", std::ios::binary);
  std::string entry;
  while (std::getline(environ, entry, '\0')) {
    if (entry.rfind("OPENBLAS_CORETYPE=", 0) == 0) return true;
  }
  return false;
}

bool pre_avx2(const std::string& core) {
  for (const char* old : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                          "Sandybridge", "Barcelona", "Nano", "Bobcat", "Unknown"}) {
    if (core == old) return true;
  }
  return false;
}

// 0.5 * op(A) op(B) + 2 * C in doubles, C's row padding kept.
std::vector<float> reference_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                                  const std::vector<float>& a, int64_t lda,
                                  const std::vector<float>& b, int64_t ldb,
                                  const std::vector<float>& c, int64_t ldc) {
  std::vector<float> want = c;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        sum += av * bv;
      }
      want[i * ldc + j] = static_cast<float>(0.5 * sum + 2.0 * c[i * ldc + j]);
    }
  }
  return want;
}

}  // namespace

TEST_CASE(
    "the GEMMs run AVX2 or AVX-512 OpenBLAS kernels where the CPU has them, unless the user "
    "chose") {
  const auto& choice = gp::exec::use_best_blas_kernels();
  CHECK(choice.running == openblas_get_corename());
  CHECK(&choice == &gp::exec::use_best_blas_kernels());  // chosen once
  if (choice.changed) {
    CHECK(pre_avx2(choice.loaded));
    CHECK_FALSE(pre_avx2(choice.running));
    CHECK(std::getenv("OPENBLAS_CORETYPE") == nullptr);  // not passed on to our children
  }
  const bool dynamic = std::string(openblas_get_config()).find("DYNAMIC_ARCH") != std::string::npos;
#if defined(__x86_64__) && defined(__GNUC__)
  if (dynamic && !coretype_given_at_start() && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma")) {
    CHECK_FALSE(pre_avx2(choice.running));
  }
#else
  (void)dynamic;
#endif
}

TEST_CASE("the chosen kernels' GEMMs equal a triple loop for every transpose and ragged size") {
  gp::exec::use_best_blas_kernels();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t m = 37, n = 53, k = 129;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      // Stored A is [m, k] or [k, m]; B is [k, n] or [n, k]; C keeps a ragged row stride.
      const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 5;
      std::vector<float> a((ta ? k : m) * lda), b((tb ? n : k) * ldb), c(m * ldc);
      for (auto& v : a) v = dist(rng);
      for (auto& v : b) v = dist(rng);
      for (auto& v : c) v = dist(rng);
      const std::vector<float> want = reference_gemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
      gp::exec::cpu::gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, c.data(), ldc);
      double worst = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          worst = std::max(worst, std::abs(double(c[i * ldc + j]) - double(want[i * ldc + j])));
        }
      }
      INFO("trans_a " << ta << ", trans_b " << tb << ", kernels " << openblas_get_corename());
      CHECK(worst < 1e-4);
      // The padding between rows is never written.
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = n; j < ldc; ++j) CHECK(c[i * ldc + j] == want[i * ldc + j]);
      }
    }
  }
}
