#include "cuda/lt_linear.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "cuda/dense_launch.h"

namespace gp::exec::cuda {
namespace {

// The largest power of two dividing the address, at most 16: the heuristic must only offer
// algorithms that work at the alignment the call really has (its default assumes 256), and fp32
// kernels need no more than 16, so capping keeps the plans few as buffers move between calls.
uint32_t alignment_bytes(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return 16;
  const uintptr_t low = a & (~a + 1);
  return low >= 16 ? 16 : static_cast<uint32_t>(low);
}

cublasLtEpilogue_t epilogue(bool bias, int act) {
  switch (act) {
    case kDenseActRelu:
      return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case kDenseActGelu:
      return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    default:
      return CUBLASLT_EPILOGUE_BIAS;
  }
}

}  // namespace

struct LtLinear::Plan {
  int64_t m = 0;
  uint32_t align[5] = {};  // x, w, y, bias, pre-activation
  const CublasLtApi* api = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w_layout = nullptr, x_layout = nullptr, y_layout = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;  // the heuristic offered an algorithm

  ~Plan() {
    if (desc != nullptr) api->desc_destroy(desc);
    for (cublasLtMatrixLayout_t l : {w_layout, x_layout, y_layout}) {
      if (l != nullptr) api->layout_destroy(l);
    }
  }
};

std::unique_ptr<LtLinear> LtLinear::create(const CudaContext& ctx, int64_t in, int64_t out,
                                           bool bias, int act) {
  if (ctx.cublaslt == nullptr || (!bias && act == kDenseActNone)) return nullptr;
  if (act == kDenseActGelu && out % 8 != 0) return nullptr;  // the aux matrix's ld rule
  return std::unique_ptr<LtLinear>(new LtLinear(ctx, in, out, bias, act));
}

LtLinear::LtLinear(const CudaContext& ctx, int64_t in, int64_t out, bool bias, int act)
    : ctx_(ctx), in_(in), out_(out), bias_(bias), act_(act) {}

LtLinear::~LtLinear() = default;

const LtLinear::Plan* LtLinear::plan_for(int64_t m, const float* x, const float* w,
                                         const float* bias, const float* y,
                                         const float* pre_activation) const {
  const uint32_t align[5] = {alignment_bytes(x), alignment_bytes(w), alignment_bytes(y),
                             alignment_bytes(bias), alignment_bytes(pre_activation)};
  for (const auto& p : plans_) {
    if (p->m == m && std::equal(align, align + 5, p->align)) return p.get();
  }
  const CublasLtApi& api = *ctx_.cublaslt;
  auto plan = std::make_unique<Plan>();
  plan->m = m;
  std::copy(align, align + 5, plan->align);
  plan->api = &api;
  // Row-major y [m, out] = x W^T is column-major y^T [out, m] = W^T [out, in] x^T [in, m], with W
  // (row-major [out, in]) read as column-major [in, out] transposed and x as [in, m].
  const cublasOperation_t trans = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  const cublasLtEpilogue_t ep = epilogue(bias_, act_);
  const int64_t aux_ld = out_;
  bool ok = api.desc_create(&plan->desc, compute_type(ctx_.precision), CUDA_R_32F) ==
            CUBLAS_STATUS_SUCCESS;
  ok = ok && api.desc_set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof(trans)) ==
                 CUBLAS_STATUS_SUCCESS;
  ok = ok && api.desc_set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)) ==
                 CUBLAS_STATUS_SUCCESS;
  ok = ok && api.desc_set(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)) ==
                 CUBLAS_STATUS_SUCCESS;
  // The heuristic reads the epilogue pointers' alignment, so they are set before it runs.
  ok = ok && point_epilogue(plan->desc, bias, pre_activation);
  ok = ok &&
       (act_ != kDenseActGelu || api.desc_set(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                              &aux_ld, sizeof(aux_ld)) == CUBLAS_STATUS_SUCCESS);
  ok = ok && api.layout_create(&plan->w_layout, CUDA_R_32F, static_cast<uint64_t>(in_),
                               static_cast<uint64_t>(out_), in_) == CUBLAS_STATUS_SUCCESS;
  ok = ok && api.layout_create(&plan->x_layout, CUDA_R_32F, static_cast<uint64_t>(in_),
                               static_cast<uint64_t>(m), in_) == CUBLAS_STATUS_SUCCESS;
  ok = ok && api.layout_create(&plan->y_layout, CUDA_R_32F, static_cast<uint64_t>(out_),
                               static_cast<uint64_t>(m), out_) == CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulPreference_t pref = nullptr;
  ok = ok && api.preference_create(&pref) == CUBLAS_STATUS_SUCCESS;
  // No workspace: a fixed one would be device memory outside the plan's memory model.
  const uint64_t workspace = 0;
  ok = ok && api.preference_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                sizeof(workspace)) == CUBLAS_STATUS_SUCCESS;
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[1]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[0]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2]},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[2]}};
  for (const auto& [attribute, bytes] : alignments) {
    ok = ok && api.preference_set(pref, attribute, &bytes, sizeof(bytes)) == CUBLAS_STATUS_SUCCESS;
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  ok = ok && api.heuristic(ctx_.lt, plan->desc, plan->w_layout, plan->x_layout, plan->y_layout,
                           plan->y_layout, pref, 1, &result, &found) == CUBLAS_STATUS_SUCCESS;
  if (pref != nullptr) api.preference_destroy(pref);
  plan->usable = ok && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  plan->algo = result.algo;
  plans_.push_back(std::move(plan));
  return plans_.back().get();
}

bool LtLinear::point_epilogue(cublasLtMatmulDesc_t desc, const float* bias,
                              const float* pre_activation) const {
  const CublasLtApi& api = *ctx_.cublaslt;
  return (!bias_ || api.desc_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)) ==
                        CUBLAS_STATUS_SUCCESS) &&
         (act_ != kDenseActGelu ||
          api.desc_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre_activation,
                       sizeof(pre_activation)) == CUBLAS_STATUS_SUCCESS);
}

bool LtLinear::forward(int64_t m, const float* x, const float* w, const float* bias, float* y,
                       float* pre_activation) const {
  if (m <= 0) return true;
  std::lock_guard<std::mutex> lock(ctx_.library_mutex());
  const Plan* plan = plan_for(m, x, w, bias, y, pre_activation);
  if (!plan->usable) return false;
  const CublasLtApi& api = *ctx_.cublaslt;
  // The epilogue pointers change between calls (same alignment as planned). Should setting one
  // fail, the GEMM must not run with the last call's pointers: the hand path runs instead.
  if (!point_epilogue(plan->desc, bias, pre_activation)) return false;
  const float one = 1.0f, zero = 0.0f;
  ctx_.check(api.matmul(ctx_.lt, plan->desc, &one, w, plan->w_layout, x, plan->x_layout, &zero, y,
                        plan->y_layout, y, plan->y_layout, &plan->algo, nullptr, 0, ctx_.stream),
             "linear forward (cuBLASLt)");
  return true;
}

}  // namespace gp::exec::cuda
