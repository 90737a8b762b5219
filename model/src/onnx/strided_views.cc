// torch.export's as_strided, as the dynamo exporter lowers it: a Gather from the whole
// activation flattened (the batch folded in) at indices computed from the batch size (Range,
// Mul, Unsqueeze, Add). AdaptiveAvgPool2d(1) of a permuted tensor (torchvision's ConvNeXt and
// Swin heads) leaves one that only restores the row-major order: a reshape.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {

bool Importer::strided_view(int i, const std::string& id, const TensorRef& x) {
  const auto& n = g_.node(i);
  if (attr_i(n, "axis", 0) != 0 || rank_of(n.input(0)) != 1) return false;
  // The batch outermost in the flat axis: element e of sample b is at b * per + e.
  const BatchLayout layout = layout_of(n.input(0));
  const auto sample = sample_shape(n.input(0));
  if (layout.pos != 0 || layout.outer != 1 || !sample) return false;
  int64_t per = 1;
  for (int64_t d : *sample) per *= d;
  // Two small batch sizes for a dynamic export (the indices are materialised), so that indices
  // reading a fixed count of elements are not taken for a view; a static export's own.
  const std::vector<int64_t> batches =
      static_batch_ > 0 ? std::vector<int64_t>{static_batch_} : std::vector<int64_t>{7, 11};
  std::vector<int64_t> view;
  for (const int64_t batch : batches) {
    std::map<std::string, EvalTensor> cache;
    const auto t = tensor_at_batch(n.input(1), batch, &cache);
    if (!t || t->dims.empty() || t->dims[0] != batch ||
        static_cast<int64_t>(t->values.size()) != batch * per) {
      return false;
    }
    for (size_t e = 0; e < t->values.size(); ++e) {
      if (t->values[e] != static_cast<double>(e)) return false;
    }
    const std::vector<int64_t> dims(t->dims.begin() + 1, t->dims.end());
    if (dims.empty() || (!view.empty() && dims != view)) return false;
    view = dims;
  }
  act_[n.output(0)] = view == *sample ? x : b_.reshape(id, x, view);
  layouts_[n.output(0)] = BatchLayout{};
  return true;
}

}  // namespace gp::model::onnx_detail
