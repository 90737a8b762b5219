// Emulated cuBLASLt (the subset in include/cublasLt.h): descriptors kept on the host, the GEMM by
// the emulated cublasGemmEx, then the epilogue (bias, ReLU, tanh-GELU with its pre-activation)
// over D. Like the library it checks attribute sizes, the aux matrix's ld rule, that every
// operand lies inside one device allocation, and that each pointer has the alignment the
// preference promised to the heuristic (a real algorithm chosen for 256-byte alignment may fault
// on a less aligned pointer).
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "cublasLt.h"
#include "cuda_runtime_api.h"

namespace {

struct Desc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const float* bias = nullptr;
  float* aux = nullptr;
  int64_t aux_ld = 0;
};
struct Layout {
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
};
struct Pref {
  uint64_t workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
};
static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t));
static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t));
static_assert(sizeof(Pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t));

Desc* desc(cublasLtMatmulDesc_t d) { return reinterpret_cast<Desc*>(d); }
Layout* layout(cublasLtMatrixLayout_t l) { return reinterpret_cast<Layout*>(l); }
Pref* pref(cublasLtMatmulPreference_t p) { return reinterpret_cast<Pref*>(p); }

bool has(cublasLtEpilogue_t e, int bit) { return (static_cast<int>(e) & bit) != 0; }
bool aligned(const void* p, uint32_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <typename T>
cublasStatus_t set(void* field, const void* buf, size_t size) {
  if (buf == nullptr || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

// The problem's m, n, k from the layouts (column-major D [m, n] = op(A) [m, k] op(B) [k, n]);
// false with a message when they disagree or the epilogue lacks what it needs.
bool shape(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dl,
           uint64_t* m, uint64_t* n, uint64_t* k) {
  *m = dl.rows;
  *n = dl.cols;
  *k = d.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t am = d.trans_a == CUBLAS_OP_N ? a.rows : a.cols;
  const uint64_t bk = d.trans_b == CUBLAS_OP_N ? b.rows : b.cols;
  const uint64_t bn = d.trans_b == CUBLAS_OP_N ? b.cols : b.rows;
  if (am != *m || bk != *k || bn != *n || c.rows != *m || c.cols != *n) {
    std::fprintf(stderr, "EMU cuBLASLt: layouts disagree (m=%llu n=%llu k=%llu)\n",
                 (unsigned long long)*m, (unsigned long long)*n, (unsigned long long)*k);
    return false;
  }
  if (has(d.epilogue, 4) && d.bias == nullptr) {
    std::fprintf(stderr,
                 "EMU cuBLASLt: a bias epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER\n");
    return false;
  }
  if (has(d.epilogue, 128) &&
      (d.aux == nullptr || d.aux_ld % 8 != 0 || d.aux_ld < static_cast<int64_t>(*m))) {
    std::fprintf(stderr,
                 "EMU cuBLASLt: GELU_AUX needs an aux pointer and an ld >= %llu, a "
                 "multiple of 8 (got %lld)\n",
                 (unsigned long long)*m, (long long)d.aux_ld);
    return false;
  }
  return true;
}

float gelu(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

}  // namespace

struct cublasLtContext {};

namespace {
std::atomic<long> g_matmul_calls{0};  // for tests: did the backend use cuBLASLt?
}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasLtGetStatusName(cublasStatus_t s) { return cublasGetStatusName(s); }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (scale != CUDA_R_32F) return CUBLAS_STATUS_INVALID_VALUE;
  *d = new cublasLtMatmulDescOpaque_t{};
  desc(*d)->compute = compute;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  Desc* x = desc(d);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return set<int32_t>(&x->trans_a, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return set<int32_t>(&x->trans_b, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return set<uint32_t>(&x->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return set<const void*>(&x->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return set<void*>(&x->aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return set<int64_t>(&x->aux_ld, buf, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (type != CUDA_R_32F || ld < static_cast<int64_t>(rows > 0 ? rows : 1)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *l = new cublasLtMatrixLayoutOpaque_t{};
  *layout(*l) = Layout{rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new cublasLtMatmulPreferenceOpaque_t{};
  *pref(*p) = Pref{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  Pref* x = pref(p);
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
    return set<uint64_t>(&x->workspace, buf, size);
  const int i = static_cast<int>(attr) - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
  if (i < 0 || i > 3) return CUBLAS_STATUS_INVALID_VALUE;
  return set<uint32_t>(&x->align[i], buf, size);
}

// One "algorithm": it remembers the alignments it was chosen for, which matmul then checks.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                              cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* count) {
  if (h == nullptr || requested < 1 || count == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t m, n, k;
  if (!shape(*desc(d), *layout(a), *layout(b), *layout(c), *layout(dl), &m, &n, &k)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  results[0] = cublasLtMatmulHeuristicResult_t{};
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = pref(p)->align[i];
  results[0].algo.data[4] = 0x4c54;  // marks an algorithm this heuristic gave
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

long emu_cublaslt_matmul_calls() { return g_matmul_calls.load(); }

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t* algo, void*, size_t,
                              cudaStream_t stream) {
  emu::before_sync_op(stream);
  if (h == nullptr || algo == nullptr || algo->data[4] != 0x4c54) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const Desc& x = *desc(d);
  uint64_t m, n, k;
  if (!shape(x, *layout(a), *layout(b), *layout(c), *layout(dl), &m, &n, &k)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const void* operands[4] = {A, B, C, D};
  for (int i = 0; i < 4; ++i) {
    if (!aligned(operands[i], static_cast<uint32_t>(algo->data[i]))) {
      std::fprintf(stderr,
                   "EMU cuBLASLt: operand %c at %p is not %llu-byte aligned as the "
                   "algorithm was chosen for\n",
                   "ABCD"[i], operands[i], (unsigned long long)algo -> data[i]);
      return CUBLAS_STATUS_EXECUTION_FAILED;
    }
  }
  if (C != D) return CUBLAS_STATUS_INVALID_VALUE;  // the backend computes in place only
  if (has(x.epilogue, 4) && !emu::check_device_range(x.bias, m * 4, "cuBLASLt bias")) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if (has(x.epilogue, 128) && n > 0 &&
      !emu::check_device_range(x.aux, ((n - 1) * x.aux_ld + m) * 4, "cuBLASLt aux")) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  ++g_matmul_calls;
  const Layout& la = *layout(a);
  const Layout& lb = *layout(b);
  const Layout& ld = *layout(dl);
  cublasStatus_t s = cublasGemmEx(nullptr, x.trans_a, x.trans_b, (int)m, (int)n, (int)k, alpha, A,
                                  CUDA_R_32F, (int)la.ld, B, CUDA_R_32F, (int)lb.ld, beta, D,
                                  CUDA_R_32F, (int)ld.ld, x.compute, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  float* out = static_cast<float*>(D);
  for (uint64_t j = 0; j < n; ++j) {
    for (uint64_t i = 0; i < m; ++i) {
      float& v = out[i + j * ld.ld];
      if (has(x.epilogue, 4)) v += x.bias[i];
      if (has(x.epilogue, 128)) x.aux[i + j * x.aux_ld] = v;
      if (has(x.epilogue, 2)) v = v > 0.0f ? v : 0.0f;
      if (has(x.epilogue, 32)) v = gelu(v);
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
