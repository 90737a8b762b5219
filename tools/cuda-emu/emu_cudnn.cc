// Emulated cuDNN (the subset in include/cudnn.h), computed on the host in double: direct
// convolution (groups, padding, stride), max and average pooling, batch norm with batch
// statistics. Like the library it checks descriptor shapes against each other, that operands lie
// inside one device allocation, that a call gets the workspace its algorithm asked for, and that
// beta = 0 never reads the destination (the tests fill it with NaN). Math types other than FMA
// round the inputs to TF32, as tensor cores would.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cudnn.h"

struct cudnnContext {};
struct cudnnTensorStruct {
  int n = 0, c = 0, h = 0, w = 0;
  long size() const { return (long)n * c * h * w; }
};
struct cudnnFilterStruct {
  int k = 0, c = 0, h = 0, w = 0;
};
struct cudnnConvolutionStruct {
  int ph = 0, pw = 0, sh = 1, sw = 1, groups = 1;
  bool dilated = false;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};
struct cudnnPoolingStruct {
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  int kh = 0, kw = 0, ph = 0, pw = 0, sh = 1, sw = 1;
};

namespace {

std::atomic<long> g_calls{0};

float tf32(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&v, &u, 4);
  return v;
}

bool in_device(const void* p, long floats, const char* what) {
  return floats <= 0 || emu::check_device_range(p, (size_t)floats * 4, what);
}

// dst = alpha * v + beta * dst, never reading dst when beta is 0.
void blend(float* dst, double v, float alpha, float beta) {
  *dst = beta == 0.0f ? (float)(alpha * v) : (float)(alpha * v + beta * *dst);
}

// The geometry shared by the three convolution directions; false when the descriptors disagree.
struct ConvShape {
  int n, c, h, w, k, cg, kh, kw, ho, wo, groups, ph, pw, sh, sw;
  bool round;
};
bool conv_shape(cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t f,
                cudnnConvolutionDescriptor_t cv, cudnnTensorDescriptor_t y, ConvShape* s) {
  if (cv->dilated || f->c * cv->groups != x->c || f->k % cv->groups != 0) return false;
  const int ho = (x->h + 2 * cv->ph - f->h) / cv->sh + 1;
  const int wo = (x->w + 2 * cv->pw - f->w) / cv->sw + 1;
  if (y != nullptr && (y->n != x->n || y->c != f->k || y->h != ho || y->w != wo)) {
    std::fprintf(stderr,
                 "EMU cuDNN: output descriptor [%d,%d,%d,%d] is not the convolution's "
                 "[%d,%d,%d,%d]\n",
                 y->n, y->c, y->h, y->w, x->n, f->k, ho, wo);
    return false;
  }
  *s = {x->n, x->c, x->h,       x->w,   f->k,   f->c,   f->h,   f->w,
        ho,   wo,   cv->groups, cv->ph, cv->pw, cv->sh, cv->sw, cv->math != CUDNN_FMA_MATH};
  return true;
}

// Algorithms the heuristics offer, fastest first: one that needs more workspace than any budget,
// one that is not deterministic, and the usable one (id 1). The backend must pass over the first
// two.
constexpr size_t kHugeWorkspace = size_t{1} << 50;
template <typename Perf>
cudnnStatus_t offer(cudnnConvolutionDescriptor_t cv, int requested, int* count, Perf* out) {
  if (requested < 1 || count == nullptr) return CUDNN_STATUS_BAD_PARAM;
  const Perf all[3] = {
      {(decltype(Perf::algo))2,
       CUDNN_STATUS_SUCCESS,
       0.1f,
       kHugeWorkspace,
       CUDNN_DETERMINISTIC,
       cv->math,
       {}},
      {(decltype(Perf::algo))0,
       CUDNN_STATUS_SUCCESS,
       0.2f,
       0,
       CUDNN_NON_DETERMINISTIC,
       cv->math,
       {}},
      {(decltype(Perf::algo))1, CUDNN_STATUS_SUCCESS, 0.3f, 0, CUDNN_DETERMINISTIC, cv->math, {}}};
  *count = requested < 3 ? requested : 3;
  for (int i = 0; i < *count; ++i) out[i] = all[i];
  return CUDNN_STATUS_SUCCESS;
}
// Runs only the algorithm the backend should have chosen; others would be nondeterministic or
// need more workspace than the kernel has.
bool usable_algorithm(int algo) {
  if (algo == 1) return true;
  std::fprintf(stderr, "EMU cuDNN: algorithm %d is not the deterministic one that fits\n", algo);
  return false;
}

template <typename F>
void for_each_tap(const ConvShape& s, int n, int oc, int oy, int ox, F f) {
  const int g = oc / (s.k / s.groups);
  for (int ci = 0; ci < s.cg; ++ci) {
    const int ic = g * s.cg + ci;
    for (int ky = 0; ky < s.kh; ++ky) {
      const int iy = oy * s.sh - s.ph + ky;
      if (iy < 0 || iy >= s.h) continue;
      for (int kx = 0; kx < s.kw; ++kx) {
        const int ix = ox * s.sw - s.pw + kx;
        if (ix < 0 || ix >= s.w) continue;
        f((((long)n * s.c + ic) * s.h + iy) * s.w + ix,
          (((long)oc * s.cg + ci) * s.kh + ky) * s.kw + kx);
      }
    }
  }
}

int pooled(int in, int k, int p, int s) { return (in + 2 * p - k) / s + 1; }

}  // namespace

namespace {
// Visits output cell (n, c, oy, ox)'s window: f(index into x) for each cell inside the image;
// returns the window's count of cells with padding and without.
template <typename F>
void window(cudnnPoolingDescriptor_t p, cudnnTensorDescriptor_t x, int n, int c, int oy, int ox,
            int* with_pad, int* inside, F f) {
  *with_pad = 0, *inside = 0;
  for (int ky = 0; ky < p->kh; ++ky) {
    const int iy = oy * p->sh - p->ph + ky;
    for (int kx = 0; kx < p->kw; ++kx) {
      const int ix = ox * p->sw - p->pw + kx;
      if (iy >= x->h + p->ph || ix >= x->w + p->pw) continue;
      ++*with_pad;
      if (iy < 0 || iy >= x->h || ix < 0 || ix >= x->w) continue;
      ++*inside;
      f((((long)n * x->c + c) * x->h + iy) * x->w + ix);
    }
  }
}
bool pool_shapes(cudnnPoolingDescriptor_t p, cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t y) {
  return y->n == x->n && y->c == x->c && y->h == pooled(x->h, p->kh, p->ph, p->sh) &&
         y->w == pooled(x->w, p->kw, p->pw, p->sw);
}
bool is_max(cudnnPoolingDescriptor_t p) {
  return p->mode == CUDNN_POOLING_MAX || p->mode == CUDNN_POOLING_MAX_DETERMINISTIC;
}
}  // namespace

namespace {
// Per channel: the mean and biased variance over n, h and w.
void channel_stats(cudnnTensorDescriptor_t d, const float* x, int c, double* mean, double* var) {
  const long inner = (long)d->h * d->w, count = d->n * inner;
  double s = 0, s2 = 0;
  for (int n = 0; n < d->n; ++n)
    for (long i = 0; i < inner; ++i) s += x[((long)n * d->c + c) * inner + i];
  *mean = s / count;
  for (int n = 0; n < d->n; ++n)
    for (long i = 0; i < inner; ++i) {
      const double v = x[((long)n * d->c + c) * inner + i] - *mean;
      s2 += v * v;
    }
  *var = s2 / count;
}
bool bn_params(cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t p) {
  return p->n == 1 && p->c == x->c && p->h == 1 && p->w == 1;
}
}  // namespace

extern "C" {

long emu_cudnn_calls() { return g_calls.load(); }
size_t cudnnGetVersion() { return 91900; }
const char* cudnnGetErrorString(cudnnStatus_t s) {
  switch (s) {
    case CUDNN_STATUS_SUCCESS:
      return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM:
      return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED:
      return "CUDNN_STATUS_NOT_SUPPORTED";
    default:
      return "CUDNN_STATUS_EXECUTION_FAILED";
  }
}
cudnnStatus_t cudnnCreate(cudnnHandle_t* h) {
  *h = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t, cudaStream_t s) {
  emu::before_sync_op(s);  // cuDNN work runs on the calling thread
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* t) {
  *t = new cudnnTensorStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t t, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW || type != CUDNN_DATA_FLOAT || n <= 0 || c <= 0 || h <= 0 ||
      w <= 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *t = {n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t t) {
  delete t;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* f) {
  *f = new cudnnFilterStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t f, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  if (format != CUDNN_TENSOR_NCHW || type != CUDNN_DATA_FLOAT || k <= 0 || c <= 0 || h <= 0 ||
      w <= 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *f = {k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t f) {
  delete f;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* c) {
  *c = new cudnnConvolutionStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t c, int ph, int pw, int u,
                                              int v, int dh, int dw, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t type) {
  if (ph < 0 || pw < 0 || u <= 0 || v <= 0 || dh <= 0 || dw <= 0 || type != CUDNN_DATA_FLOAT) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  // The CPU reference (and torch) correlate; CUDNN_CONVOLUTION would flip the filter.
  if (mode != CUDNN_CROSS_CORRELATION) return CUDNN_STATUS_NOT_SUPPORTED;
  c->ph = ph, c->pw = pw, c->sh = u, c->sw = v, c->dilated = dh != 1 || dw != 1;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t c, int groups) {
  if (groups <= 0) return CUDNN_STATUS_BAD_PARAM;
  c->groups = groups;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t c, cudnnMathType_t m) {
  c->math = m;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t c) {
  delete c;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(cudnnConvolutionDescriptor_t c,
                                                    cudnnTensorDescriptor_t x,
                                                    cudnnFilterDescriptor_t f, int* n, int* k,
                                                    int* h, int* w) {
  ConvShape s;
  if (!conv_shape(x, f, c, nullptr, &s)) return CUDNN_STATUS_BAD_PARAM;
  *n = s.n, *k = s.k, *h = s.ho, *w = s.wo;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, cudnnTensorDescriptor_t x,
                                                     cudnnFilterDescriptor_t f,
                                                     cudnnConvolutionDescriptor_t c,
                                                     cudnnTensorDescriptor_t y, int requested,
                                                     int* count,
                                                     cudnnConvolutionFwdAlgoPerf_t* out) {
  ConvShape s;
  if (!conv_shape(x, f, c, y, &s)) return CUDNN_STATUS_BAD_PARAM;
  return offer(c, requested, count, out);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t, cudnnFilterDescriptor_t f,
                                                          cudnnTensorDescriptor_t dy,
                                                          cudnnConvolutionDescriptor_t c,
                                                          cudnnTensorDescriptor_t dx, int requested,
                                                          int* count,
                                                          cudnnConvolutionBwdDataAlgoPerf_t* out) {
  ConvShape s;
  if (!conv_shape(dx, f, c, dy, &s)) return CUDNN_STATUS_BAD_PARAM;
  return offer(c, requested, count, out);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t, cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
    cudnnConvolutionDescriptor_t c, cudnnFilterDescriptor_t f, int requested, int* count,
    cudnnConvolutionBwdFilterAlgoPerf_t* out) {
  ConvShape s;
  if (!conv_shape(x, f, c, dy, &s)) return CUDNN_STATUS_BAD_PARAM;
  return offer(c, requested, count, out);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t, const void* alpha, cudnnTensorDescriptor_t xd,
                                      const void* xv, cudnnFilterDescriptor_t f, const void* wv,
                                      cudnnConvolutionDescriptor_t c,
                                      cudnnConvolutionFwdAlgo_t algo, void*, size_t,
                                      const void* beta, cudnnTensorDescriptor_t yd, void* yv) {
  emu::before_sync_op(nullptr);
  ConvShape s;
  if (!conv_shape(xd, f, c, yd, &s) || !usable_algorithm(algo)) return CUDNN_STATUS_BAD_PARAM;
  const long wn = (long)s.k * s.cg * s.kh * s.kw;
  if (!in_device(xv, xd->size(), "cuDNN x") || !in_device(wv, wn, "cuDNN w") ||
      !in_device(yv, yd->size(), "cuDNN y")) {
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  ++g_calls;
  const float* x = (const float*)xv;
  const float* w = (const float*)wv;
  float* y = (float*)yv;
  for (int n = 0; n < s.n; ++n)
    for (int oc = 0; oc < s.k; ++oc)
      for (int oy = 0; oy < s.ho; ++oy)
        for (int ox = 0; ox < s.wo; ++ox) {
          double acc = 0;
          for_each_tap(s, n, oc, oy, ox, [&](long xi, long wi) {
            acc += s.round ? (double)tf32(x[xi]) * tf32(w[wi]) : (double)x[xi] * w[wi];
          });
          blend(&y[(((long)n * s.k + oc) * s.ho + oy) * s.wo + ox], acc, *(const float*)alpha,
                *(const float*)beta);
        }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t, const void* alpha,
                                           cudnnFilterDescriptor_t f, const void* wv,
                                           cudnnTensorDescriptor_t dyd, const void* dyv,
                                           cudnnConvolutionDescriptor_t c,
                                           cudnnConvolutionBwdDataAlgo_t algo, void*, size_t,
                                           const void* beta, cudnnTensorDescriptor_t dxd,
                                           void* dxv) {
  emu::before_sync_op(nullptr);
  ConvShape s;
  if (!conv_shape(dxd, f, c, dyd, &s) || !usable_algorithm(algo)) return CUDNN_STATUS_BAD_PARAM;
  if (!in_device(dyv, dyd->size(), "cuDNN dy") || !in_device(dxv, dxd->size(), "cuDNN dx")) {
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  ++g_calls;
  const float* w = (const float*)wv;
  const float* dy = (const float*)dyv;
  std::vector<double> dx(dxd->size(), 0.0);
  for (int n = 0; n < s.n; ++n)
    for (int oc = 0; oc < s.k; ++oc)
      for (int oy = 0; oy < s.ho; ++oy)
        for (int ox = 0; ox < s.wo; ++ox) {
          const float g = dy[(((long)n * s.k + oc) * s.ho + oy) * s.wo + ox];
          for_each_tap(s, n, oc, oy, ox, [&](long xi, long wi) {
            dx[xi] += s.round ? (double)tf32(g) * tf32(w[wi]) : (double)g * w[wi];
          });
        }
  float* out = (float*)dxv;
  for (long i = 0; i < (long)dx.size(); ++i) {
    blend(&out[i], dx[i], *(const float*)alpha, *(const float*)beta);
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t, const void* alpha,
                                             cudnnTensorDescriptor_t xd, const void* xv,
                                             cudnnTensorDescriptor_t dyd, const void* dyv,
                                             cudnnConvolutionDescriptor_t c,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void*, size_t,
                                             const void* beta, cudnnFilterDescriptor_t f,
                                             void* dwv) {
  emu::before_sync_op(nullptr);
  ConvShape s;
  if (!conv_shape(xd, f, c, dyd, &s) || !usable_algorithm(algo)) return CUDNN_STATUS_BAD_PARAM;
  const long wn = (long)s.k * s.cg * s.kh * s.kw;
  if (!in_device(xv, xd->size(), "cuDNN x") || !in_device(dyv, dyd->size(), "cuDNN dy") ||
      !in_device(dwv, wn, "cuDNN dw")) {
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  ++g_calls;
  const float* x = (const float*)xv;
  const float* dy = (const float*)dyv;
  std::vector<double> dw(wn, 0.0);
  for (int n = 0; n < s.n; ++n)
    for (int oc = 0; oc < s.k; ++oc)
      for (int oy = 0; oy < s.ho; ++oy)
        for (int ox = 0; ox < s.wo; ++ox) {
          const float g = dy[(((long)n * s.k + oc) * s.ho + oy) * s.wo + ox];
          for_each_tap(s, n, oc, oy, ox, [&](long xi, long wi) {
            dw[wi] += s.round ? (double)tf32(g) * tf32(x[xi]) : (double)g * x[xi];
          });
        }
  float* out = (float*)dwv;
  for (long i = 0; i < wn; ++i) blend(&out[i], dw[i], *(const float*)alpha, *(const float*)beta);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t* p) {
  *p = new cudnnPoolingStruct;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t p, cudnnPoolingMode_t mode,
                                          cudnnNanPropagation_t, int kh, int kw, int ph, int pw,
                                          int sh, int sw) {
  if (kh <= 0 || kw <= 0 || ph < 0 || pw < 0 || sh <= 0 || sw <= 0 || ph >= kh || pw >= kw) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  *p = {mode, kh, kw, ph, pw, sh, sw};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetPooling2dForwardOutputDim(cudnnPoolingDescriptor_t p,
                                                cudnnTensorDescriptor_t x, int* n, int* c, int* h,
                                                int* w) {
  *n = x->n, *c = x->c;
  *h = pooled(x->h, p->kh, p->ph, p->sh);
  *w = pooled(x->w, p->kw, p->pw, p->sw);
  return *h > 0 && *w > 0 ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}
cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t p) {
  delete p;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnPoolingForward(cudnnHandle_t, cudnnPoolingDescriptor_t p, const void* alpha,
                                  cudnnTensorDescriptor_t xd, const void* xv, const void* beta,
                                  cudnnTensorDescriptor_t yd, void* yv) {
  emu::before_sync_op(nullptr);
  if (!pool_shapes(p, xd, yd)) return CUDNN_STATUS_BAD_PARAM;
  if (!in_device(xv, xd->size(), "cuDNN x") || !in_device(yv, yd->size(), "cuDNN y")) {
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  ++g_calls;
  const float* x = (const float*)xv;
  float* y = (float*)yv;
  for (int n = 0; n < yd->n; ++n)
    for (int c = 0; c < yd->c; ++c)
      for (int oy = 0; oy < yd->h; ++oy)
        for (int ox = 0; ox < yd->w; ++ox) {
          double acc = is_max(p) ? -INFINITY : 0.0;
          int with_pad, inside;
          window(p, xd, n, c, oy, ox, &with_pad, &inside,
                 [&](long i) { acc = is_max(p) ? (x[i] > acc ? x[i] : acc) : acc + x[i]; });
          if (!is_max(p)) {
            acc /= p->mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING ? with_pad : inside;
          }
          blend(&y[(((long)n * yd->c + c) * yd->h + oy) * yd->w + ox], acc, *(const float*)alpha,
                *(const float*)beta);
        }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t, cudnnPoolingDescriptor_t p, const void* alpha,
                                   cudnnTensorDescriptor_t yd, const void* yv,
                                   cudnnTensorDescriptor_t dyd, const void* dyv,
                                   cudnnTensorDescriptor_t xd, const void* xv, const void* beta,
                                   cudnnTensorDescriptor_t dxd, void* dxv) {
  emu::before_sync_op(nullptr);
  if (!pool_shapes(p, xd, yd) || !pool_shapes(p, dxd, dyd)) return CUDNN_STATUS_BAD_PARAM;
  if (!in_device(xv, xd->size(), "cuDNN x") || !in_device(yv, yd->size(), "cuDNN y") ||
      !in_device(dyv, dyd->size(), "cuDNN dy") || !in_device(dxv, dxd->size(), "cuDNN dx")) {
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  ++g_calls;
  const float* x = (const float*)xv;
  const float* y = (const float*)yv;
  const float* dy = (const float*)dyv;
  std::vector<double> dx(dxd->size(), 0.0);
  for (int n = 0; n < yd->n; ++n)
    for (int c = 0; c < yd->c; ++c)
      for (int oy = 0; oy < yd->h; ++oy)
        for (int ox = 0; ox < yd->w; ++ox) {
          const long o = (((long)n * yd->c + c) * yd->h + oy) * yd->w + ox;
          int with_pad, inside;
          long winner = -1;
          std::vector<long> cells;
          window(p, xd, n, c, oy, ox, &with_pad, &inside, [&](long i) {
            cells.push_back(i);
            if (winner < 0 && x[i] == y[o]) winner = i;  // the first cell equal to the maximum
          });
          if (is_max(p)) {
            if (winner >= 0) dx[winner] += dy[o];
            continue;
          }
          const int count =
              p->mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING ? with_pad : inside;
          for (long i : cells) dx[i] += (double)dy[o] / count;
        }
  float* out = (float*)dxv;
  for (long i = 0; i < (long)dx.size(); ++i) {
    blend(&out[i], dx[i], *(const float*)alpha, *(const float*)beta);
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    cudnnHandle_t, cudnnBatchNormMode_t mode, const void* alpha, const void* beta,
    cudnnTensorDescriptor_t xd, const void* xv, cudnnTensorDescriptor_t yd, void* yv,
    cudnnTensorDescriptor_t pd, const void* scale, const void* bias, double, void* running_mean,
    void* running_var, double eps, void* save_mean, void* save_inv_var) {
  emu::before_sync_op(nullptr);
  if (mode != CUDNN_BATCHNORM_SPATIAL || !bn_params(xd, pd) || xd->size() != yd->size() ||
      (running_mean == nullptr) != (running_var == nullptr) || save_mean != nullptr ||
      save_inv_var != nullptr || eps < CUDNN_BN_MIN_EPSILON) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!in_device(xv, xd->size(), "cuDNN x") || !in_device(yv, yd->size(), "cuDNN y") ||
      !in_device(scale, pd->c, "cuDNN scale") || !in_device(bias, pd->c, "cuDNN bias")) {
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  ++g_calls;
  const float* x = (const float*)xv;
  float* y = (float*)yv;
  const long inner = (long)xd->h * xd->w;
  for (int c = 0; c < xd->c; ++c) {
    double mean, var;
    channel_stats(xd, x, c, &mean, &var);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int n = 0; n < xd->n; ++n)
      for (long i = 0; i < inner; ++i) {
        const long at = ((long)n * xd->c + c) * inner + i;
        blend(&y[at], (x[at] - mean) * inv * ((const float*)scale)[c] + ((const float*)bias)[c],
              *(const float*)alpha, *(const float*)beta);
      }
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBatchNormalizationBackward(
    cudnnHandle_t, cudnnBatchNormMode_t mode, const void* alpha_data, const void* beta_data,
    const void* alpha_param, const void* beta_param, cudnnTensorDescriptor_t xd, const void* xv,
    cudnnTensorDescriptor_t dyd, const void* dyv, cudnnTensorDescriptor_t dxd, void* dxv,
    cudnnTensorDescriptor_t pd, const void* scale, void* dscale, void* dbias, double eps,
    const void* saved_mean, const void* saved_inv_var) {
  emu::before_sync_op(nullptr);
  if (mode != CUDNN_BATCHNORM_SPATIAL || !bn_params(xd, pd) || xd->size() != dyd->size() ||
      xd->size() != dxd->size() || saved_mean != nullptr || saved_inv_var != nullptr) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (!in_device(xv, xd->size(), "cuDNN x") || !in_device(dyv, dyd->size(), "cuDNN dy") ||
      !in_device(dxv, dxd->size(), "cuDNN dx") || !in_device(scale, pd->c, "cuDNN scale") ||
      !in_device(dscale, pd->c, "cuDNN dscale") || !in_device(dbias, pd->c, "cuDNN dbias")) {
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  ++g_calls;
  const float* x = (const float*)xv;
  const float* dy = (const float*)dyv;
  float* dx = (float*)dxv;
  const float ad = *(const float*)alpha_data, bd = *(const float*)beta_data;
  const float ap = *(const float*)alpha_param, bp = *(const float*)beta_param;
  const long inner = (long)xd->h * xd->w, count = xd->n * inner;
  for (int c = 0; c < xd->c; ++c) {
    double mean, var;
    channel_stats(xd, x, c, &mean, &var);
    const double inv = 1.0 / std::sqrt(var + eps);
    double sum_dy = 0, sum_dy_xh = 0;
    for (int n = 0; n < xd->n; ++n)
      for (long i = 0; i < inner; ++i) {
        const long at = ((long)n * xd->c + c) * inner + i;
        sum_dy += dy[at];
        sum_dy_xh += dy[at] * (x[at] - mean) * inv;
      }
    const double gamma = ((const float*)scale)[c];
    for (int n = 0; n < xd->n; ++n)
      for (long i = 0; i < inner; ++i) {
        const long at = ((long)n * xd->c + c) * inner + i;
        const double xh = (x[at] - mean) * inv;
        blend(&dx[at], gamma * inv * (dy[at] - sum_dy / count - xh * sum_dy_xh / count), ad, bd);
      }
    blend(&((float*)dscale)[c], sum_dy_xh, ap, bp);
    blend(&((float*)dbias)[c], sum_dy, ap, bp);
  }
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
