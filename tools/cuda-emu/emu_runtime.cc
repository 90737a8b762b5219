#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cublas_v2.h"
#include "emu_streams.h"
static thread_local cudaError_t g_last = cudaSuccess;
static thread_local int g_current = 0;
namespace emu {
int current_device() { return g_current; }
}  // namespace emu
namespace emu {
void set_error(cudaError_t e) {
  if (g_last == cudaSuccess) g_last = e;
}
}  // namespace emu
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
  }
  return "unknown error";
}
static cudaError_t ret(cudaError_t e) {
  emu::set_error(e);
  return e;
}
cudaError_t cudaGetLastError() {
  cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return g_last; }
static const int kDevices = 4;  // ranks of the NCCL tests each take one
cudaError_t cudaGetDeviceCount(int* n) {
  *n = kDevices;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d < 0 || d >= kDevices) return ret(cudaErrorInvalidDevice);
  std::snprintf(p->name, sizeof(p->name), "emulated GPU %d", d);
  p->totalGlobalMem = size_t{16} << 30;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= kDevices) return ret(cudaErrorInvalidDevice);
  g_current = d;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = g_current;
  return cudaSuccess;
}
struct CUmemPoolHandle_st {
  int device;
  uint64_t release_threshold = 0;
};
static CUmemPoolHandle_st g_pools[kDevices];
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* p, int d) {
  if (d < 0 || d >= kDevices) return ret(cudaErrorInvalidDevice);
  g_pools[d].device = d;
  *p = &g_pools[d];
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t p, cudaMemPoolAttr a, void* v) {
  if (p == nullptr || v == nullptr) return ret(cudaErrorInvalidValue);
  if (a == cudaMemPoolAttrReleaseThreshold) p->release_threshold = *(uint64_t*)v;
  return cudaSuccess;
}
// Device memory: host memory with a guard zone after each block (checked at free) and NaN fill
// (0xFF bytes) at allocation, so that reads of never-written memory show up.
static const size_t kTotal = size_t{141} << 30;  // like an H200
static const size_t kGuard = 4096;
static std::mutex g_mem_mu;
static std::map<uintptr_t, size_t> g_allocs;
static size_t g_used = 0;
static void check_guard(uintptr_t p, size_t n) {
  const unsigned char* g = (const unsigned char*)p + n;
  for (size_t i = 0; i < kGuard; ++i)
    if (g[i] != 0xA5) {
      std::fprintf(stderr, "EMU guard overwritten: block %p of %zu bytes, byte +%zu\n", (void*)p, n,
                   i);
      std::abort();
    }
}
cudaError_t cudaMallocAsync(void** out, size_t bytes, cudaStream_t stream) {
  emu::before_sync_op(stream);
  if (out == nullptr) return ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> l(g_mem_mu);
  if (bytes > kTotal - g_used) {
    *out = nullptr;
    return ret(cudaErrorMemoryAllocation);
  }
  const size_t n = bytes == 0 ? 1 : bytes;
  void* p = std::aligned_alloc(256, (n + kGuard + 255) / 256 * 256);
  if (p == nullptr) {
    return ret(cudaErrorMemoryAllocation);
  }
  std::memset(p, 0xFF, n);
  std::memset((char*)p + n, 0xA5, kGuard);
  g_allocs[(uintptr_t)p] = n;
  g_used += n;
  *out = p;
  return cudaSuccess;
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  emu::before_sync_op(stream);
  if (p == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> l(g_mem_mu);
  auto it = g_allocs.find((uintptr_t)p);
  if (it == g_allocs.end()) {
    std::fprintf(stderr, "EMU cudaFreeAsync of unknown pointer %p\n", p);
    return ret(cudaErrorInvalidValue);
  }
  check_guard(it->first, it->second);
  g_used -= it->second;
  g_allocs.erase(it);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* f, size_t* t) {
  std::lock_guard<std::mutex> l(g_mem_mu);
  *f = kTotal - g_used;
  *t = kTotal;
  return cudaSuccess;
}
namespace emu {
bool check_device_range(const void* ptr, size_t bytes, const char* what) {
  std::lock_guard<std::mutex> l(g_mem_mu);
  const uintptr_t p = (uintptr_t)ptr;
  auto it = g_allocs.upper_bound(p);
  if (it != g_allocs.begin()) {
    --it;
    if (p >= it->first && p + bytes <= it->first + it->second) return true;
  }
  std::fprintf(stderr, "EMU %s: [%p, +%zu) is not inside one device allocation\n", what, ptr,
               bytes);
  return false;
}
}  // namespace emu
cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k,
                            cudaStream_t stream) {
  emu::before_sync_op(stream);
  if (n == 0) return cudaSuccess;
  if ((k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice) &&
      !emu::check_device_range(d, n, "cudaMemcpyAsync dst"))
    return ret(cudaErrorInvalidValue);
  if ((k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice) &&
      !emu::check_device_range(s, n, "cudaMemcpyAsync src"))
    return ret(cudaErrorInvalidValue);
  std::memmove(d, s, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t stream) {
  emu::before_sync_op(stream);
  if (n == 0) return cudaSuccess;
  if (!emu::check_device_range(d, n, "cudaMemsetAsync")) return ret(cudaErrorInvalidValue);
  std::memset(d, v, n);
  return cudaSuccess;
}
struct cublasContext {
  cudaStream_t stream = nullptr;
};
cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  emu::before_sync_op(s);  // cuBLAS work runs on the calling thread
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
  }
  return "unknown error";
}
int g_precision_mode = 0;                     // rounding of inputs per compute type
static float round_bits(float v, int keep) {  // keep mantissa bits, RNE
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const int drop = 23 - keep;
  uint32_t lsb = (u >> drop) & 1u, bias = (1u << (drop - 1)) - 1 + lsb;
  u = (u + bias) & ~((1u << drop) - 1);
  std::memcpy(&v, &u, 4);
  return v;
}
static float rnd(float v, cublasComputeType_t c) {
  if (c == CUBLAS_COMPUTE_32F_FAST_TF32) return round_bits(v, 10);
  if (c == CUBLAS_COMPUTE_32F_FAST_16BF) return round_bits(v, 7);
  return v;
}
static cublasStatus_t gemm1(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            float alpha, const float* A, int lda, const float* B, int ldb,
                            float beta, float* C, int ldc, cublasComputeType_t ct) {
  // column-major: C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double acc = 0;
      for (int p = 0; p < k; ++p) {
        float a = ta == CUBLAS_OP_N ? A[i + (long)p * lda] : A[p + (long)i * lda];
        float b = tb == CUBLAS_OP_N ? B[p + (long)j * ldb] : B[j + (long)p * ldb];
        acc += (double)rnd(a, ct) * rnd(b, ct);
      }
      float& c = C[i + (long)j * ldc];
      c = beta == 0.0f ? (float)(alpha * acc) : (float)(alpha * acc + beta * c);
    }
  return CUBLAS_STATUS_SUCCESS;
}
static bool span_ok(const void* p, long long rows, long long cols, long long ld, const char* what) {
  if (rows == 0 || cols == 0) return true;
  return emu::check_device_range(p, (size_t)(((cols - 1) * ld + rows) * 4), what);
}
static bool bad_ptrs(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* A,
                     int lda, const void* B, int ldb, const void* C, int ldc) {
  const long long ra = ta == CUBLAS_OP_N ? m : k, ca = ta == CUBLAS_OP_N ? k : m;
  const long long rb = tb == CUBLAS_OP_N ? k : n, cb = tb == CUBLAS_OP_N ? n : k;
  return !span_ok(A, ra, ca, lda, "cuBLAS A") || !span_ok(B, rb, cb, ldb, "cuBLAS B") ||
         !span_ok(C, m, n, ldc, "cuBLAS C");
}
static bool bad(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb,
                int ldc) {
  const int ra = ta == CUBLAS_OP_N ? m : k, rb = tb == CUBLAS_OP_N ? k : n;
  if (m < 0 || n < 0 || k < 0) return true;
  if (lda < (ra > 1 ? ra : 1) || ldb < (rb > 1 ? rb : 1) || ldc < (m > 1 ? m : 1)) {
    std::fprintf(stderr, "EMU cuBLAS invalid ld: m=%d n=%d k=%d lda=%d ldb=%d ldc=%d\n", m, n, k,
                 lda, ldb, ldc);
    return true;
  }
  return false;
}
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void* alpha, const void* A, cudaDataType, int lda,
                            const void* B, cudaDataType, int ldb, const void* beta, void* C,
                            cudaDataType, int ldc, cublasComputeType_t ct, cublasGemmAlgo_t) {
  emu::before_sync_op(nullptr);
  if (bad(ta, tb, m, n, k, lda, ldb, ldc)) return CUBLAS_STATUS_INVALID_VALUE;
  if (bad_ptrs(ta, tb, m, n, k, A, lda, B, ldb, C, ldc)) return CUBLAS_STATUS_EXECUTION_FAILED;
  return gemm1(ta, tb, m, n, k, *(const float*)alpha, (const float*)A, lda, (const float*)B, ldb,
               *(const float*)beta, (float*)C, ldc, ct);
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType, int lda,
                                          long long sA, const void* B, cudaDataType, int ldb,
                                          long long sB, const void* beta, void* C, cudaDataType,
                                          int ldc, long long sC, int count, cublasComputeType_t ct,
                                          cublasGemmAlgo_t) {
  emu::before_sync_op(nullptr);
  if (bad(ta, tb, m, n, k, lda, ldb, ldc) || count < 0) return CUBLAS_STATUS_INVALID_VALUE;
  for (int i = 0; i < count; ++i)
    if (bad_ptrs(ta, tb, m, n, k, (const float*)A + i * sA, lda, (const float*)B + i * sB, ldb,
                 (const float*)C + i * sC, ldc))
      return CUBLAS_STATUS_EXECUTION_FAILED;
  for (int i = 0; i < count; ++i)
    gemm1(ta, tb, m, n, k, *(const float*)alpha, (const float*)A + i * sA, lda,
          (const float*)B + i * sB, ldb, *(const float*)beta, (float*)C + i * sC, ldc, ct);
  return CUBLAS_STATUS_SUCCESS;
}
