// The vector basics of the CPU kernels' vectorised loops (private to gp_cpu): 8-float vectors
// of the GCC/Clang vector extension, loads and stores through memcpy (any alignment), and the
// target_clones attribute that compiles a loop for AVX2 + FMA and for the baseline.
//
// Written with the vector extension rather than intrinsics, so the baseline clone compiles the
// same source to pairs of SSE2 operations. Helpers take their vectors by reference: a 32-byte
// vector passed by value would change the calling convention between the clones (GCC and Clang
// refuse that), and forced inlining makes the references free; the helpers that would return a
// vector are macros for the same reason.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GP_VEC_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GP_VEC_CLONES
#endif
#define GP_VEC_INLINE __attribute__((always_inline)) inline

namespace gp::exec::cpu::vec {

constexpr int64_t kW = 8;  // floats per vector
using V = float __attribute__((vector_size(32)));
using VI = int32_t __attribute__((vector_size(32)));

// Splat, load and partial load are macros (statement expressions), not functions: see the top.
#define GP_SPLAT(f) (V{} + (f))
#define GP_LOAD(p)                    \
  ({                                  \
    V v_;                             \
    std::memcpy(&v_, (p), sizeof v_); \
    v_;                               \
  })
// The first k < kW floats at p, the other lanes `pad`.
#define GP_LOAD_PART(p, k, pad)                                    \
  ({                                                               \
    V v_ = GP_SPLAT(pad);                                          \
    std::memcpy(&v_, (p), static_cast<size_t>(k) * sizeof(float)); \
    v_;                                                            \
  })
GP_VEC_INLINE void store(float* p, const V& v) { std::memcpy(p, &v, sizeof v); }
GP_VEC_INLINE void store_part(float* p, const V& v, int64_t k) {
  std::memcpy(p, &v, static_cast<size_t>(k) * sizeof(float));
}
GP_VEC_INLINE float hsum(const V& v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

}  // namespace gp::exec::cpu::vec
