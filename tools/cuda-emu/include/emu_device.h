#pragma once
#include <math.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cuda_runtime_api.h"
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
namespace emu {
struct U3 {
  unsigned x = 0, y = 0, z = 0;
};
struct Block {
  unsigned threads;
  std::unique_ptr<std::barrier<>> bar;
  std::vector<std::unique_ptr<std::barrier<>>> wbar;
  std::vector<std::array<uint64_t, 32>> wbuf;
};
inline thread_local U3 tIdx, bIdx;
inline thread_local dim3 bDim, gDim;
inline thread_local Block* blk = nullptr;
inline thread_local unsigned ltid = 0;
inline void syncthreads() { blk->bar->arrive_and_wait(); }
template <class T>
T shfl(T v, int src_lane_rel, int mode) {
  const unsigned warp = ltid / 32, lane = ltid % 32;
  static_assert(sizeof(T) <= 8);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  blk->wbuf[warp][lane] = bits;
  blk->wbar[warp]->arrive_and_wait();
  unsigned src = mode == 0 ? (lane ^ src_lane_rel) : lane + src_lane_rel;
  T r = v;
  if (src < 32) {
    uint64_t b = blk->wbuf[warp][src];
    std::memcpy(&r, &b, sizeof(T));
  }
  blk->wbar[warp]->arrive_and_wait();
  return r;
}
template <class F>
void launch(dim3 g, dim3 b, F fn) {
  before_sync_op(nullptr);
  // __shared__ arrays are function statics here: one launch at a time, whichever thread (rank)
  // launches it.
  static std::mutex one_at_a_time;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  const unsigned T = b.x * b.y * b.z;
  if (T == 0 || T > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64 || g.x == 0 || g.y == 0 ||
      g.z == 0 || g.y > 65535 || g.z > 65535 || g.x > 2147483647u) {
    std::fprintf(stderr, "EMU invalid launch config grid(%u,%u,%u) block(%u,%u,%u)\n", g.x, g.y,
                 g.z, b.x, b.y, b.z);
    set_error(cudaErrorInvalidConfiguration);
    return;
  }
  Block B;
  B.threads = T;
  B.bar = std::make_unique<std::barrier<>>(T);
  for (unsigned w = 0; w * 32 < T; ++w)
    B.wbar.push_back(std::make_unique<std::barrier<>>(std::min(32u, T - w * 32)));
  B.wbuf.resize((T + 31) / 32);
  std::vector<std::thread> th;
  for (unsigned t = 0; t < T; ++t) {
    th.emplace_back([&, t] {
      blk = &B;
      ltid = t;
      bDim = b;
      gDim = g;
      tIdx = {t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
      for (unsigned z = 0; z < g.z; ++z)
        for (unsigned y = 0; y < g.y; ++y)
          for (unsigned x = 0; x < g.x; ++x) {
            bIdx = {x, y, z};
            fn();
            B.bar->arrive_and_wait();
          }
    });
  }
  for (auto& x : th) x.join();
}
}  // namespace emu
#define threadIdx emu::tIdx
#define blockIdx emu::bIdx
#define blockDim emu::bDim
#define gridDim emu::gDim
#define __syncthreads() emu::syncthreads()
template <class T>
T __shfl_xor_sync(unsigned, T v, int o) {
  return emu::shfl(v, o, 0);
}
template <class T>
T __shfl_down_sync(unsigned, T v, int o) {
  return emu::shfl(v, o, 1);
}
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline void __trap() {
  std::fprintf(stderr, "EMU __trap\n");
  std::abort();
}
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
