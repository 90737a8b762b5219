// Folds what exporters write around a product of two activations into the matmul itself: a
// transpose of an operand's last two axes (attention's k.transpose(-2, -1)) becomes
// transpose_a/transpose_b, and a constant scale of an operand or of the product (q * d^-0.5,
// scores / sqrt(d)) becomes alpha. Each fold removes an op that copied or rewrote a whole tensor
// per step, forward and backward, and the memory it held; the GEMM reads the operand in place.
// Only ops read by nothing but that matmul are folded, so no other reader loses its tensor.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

// perm keeps every axis but swaps the last two.
bool swaps_last_two(const std::vector<int64_t>& perm) {
  const size_t r = perm.size();
  if (r < 2) return false;
  for (size_t i = 0; i + 2 < r; ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return perm[r - 2] == static_cast<int64_t>(r - 1) && perm[r - 1] == static_cast<int64_t>(r - 2);
}

class MatmulFolder {
 public:
  explicit MatmulFolder(ModelGraph* model) : model_(model) {
    for (int i = 0; i < model->ops_size(); ++i) index_[model->ops(i).id()] = i;
    for (const auto& op : model->ops()) {
      for (const auto& in : op.inputs()) ++readers_[in.op()];
    }
    for (const auto& loss : model->losses()) ++readers_[loss.op()];
  }

  void run() {
    for (int i = 0; i < model_->ops_size(); ++i) {
      if (model_->ops(i).type() != "matmul" || removed_.count(model_->ops(i).id())) continue;
      fold_operand(i, 0, "transpose_a");
      fold_operand(i, 1, "transpose_b");
      fold_product_scale(i);
    }
    remove_ops(model_, removed_);
  }

 private:
  Operator* producer_of(const TensorRef& ref) {
    auto it = index_.find(ref.op());
    return it == index_.end() ? nullptr : model_->mutable_ops(it->second);
  }
  bool sole_reader(const Operator& op) const {
    auto it = readers_.find(op.id());
    return it != readers_.end() && it->second == 1;
  }
  static double alpha_of(const Operator& op) {
    auto alpha = gp::model::attr_float_or(op, "alpha", 1);
    return alpha.ok() ? *alpha : 1;
  }

  // Transposes and scales feeding input `slot`, outermost first, while the matmul is their only
  // reader.
  void fold_operand(int matmul, int slot, const char* transpose_attr) {
    Operator& mm = *model_->mutable_ops(matmul);
    for (;;) {
      Operator* p = producer_of(mm.inputs(slot));
      if (p == nullptr || p->inputs_size() != 1 || !sole_reader(*p)) return;
      if (p->type() == "transpose") {
        auto perm = gp::model::attr_ints(*p, "perm");
        if (!perm.ok() || !swaps_last_two(*perm) || p->attrs().count("axis")) return;
        auto flag = gp::model::attr_int_or(mm, transpose_attr, 0);
        if (!flag.ok()) return;
        set_attr(mm, transpose_attr, int64_t{*flag == 0 ? 1 : 0});
      } else if (p->type() == "scale") {
        auto factor = gp::model::attr_float(*p, "factor");
        if (!factor.ok()) return;
        set_attr(mm, "alpha", alpha_of(mm) * *factor);
      } else {
        return;
      }
      removed_.insert(p->id());
      *mm.mutable_inputs(slot) = p->inputs(0);
    }
  }

  // Scales whose only input is the product, while each is the only reader of what it scales:
  // their readers read the matmul instead.
  void fold_product_scale(int matmul) {
    Operator& mm = *model_->mutable_ops(matmul);
    for (;;) {
      if (!sole_reader(mm)) return;
      Operator* scale = nullptr;
      for (auto& op : *model_->mutable_ops()) {
        if (op.type() == "scale" && op.inputs_size() == 1 && op.inputs(0).op() == mm.id() &&
            !removed_.count(op.id())) {
          scale = &op;
        }
      }
      if (scale == nullptr) return;
      auto factor = gp::model::attr_float(*scale, "factor");
      if (!factor.ok()) return;
      set_attr(mm, "alpha", alpha_of(mm) * *factor);
      removed_.insert(scale->id());
      const std::string gone = scale->id();
      for (auto& op : *model_->mutable_ops()) {
        for (auto& in : *op.mutable_inputs()) {
          if (in.op() == gone) in.set_op(mm.id());
        }
      }
      for (auto& loss : *model_->mutable_losses()) {
        if (loss.op() == gone) loss.set_op(mm.id());
      }
      readers_[mm.id()] = readers_[gone];
    }
  }

  ModelGraph* model_;
  std::map<std::string, int> index_;
  std::map<std::string, int> readers_;  // references to each op's output, losses included
  std::set<std::string> removed_;
};

}  // namespace

void fold_into_matmuls(ModelGraph* model) { MatmulFolder(model).run(); }

void remove_ops(ModelGraph* model, const std::set<std::string>& ids) {
  if (ids.empty()) return;
  auto* ops = model->mutable_ops();
  std::vector<Operator> kept;
  kept.reserve(static_cast<size_t>(ops->size()) - ids.size());
  for (auto& op : *ops) {
    if (!ids.count(op.id())) kept.push_back(std::move(op));
  }
  ops->Clear();
  for (auto& op : kept) *ops->Add() = std::move(op);
}

}  // namespace gp::model::onnx_detail
