// Einsum of two activations that is a batched matrix product: attention written with
// torch.einsum ("bhid,bhjd->bhij", "bhij,bhjd->bhid") and MaxViT's five-label forms.
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {

// The labels shared by both operands and the output lead (the batch first) and become matmul's
// batch axes; each operand holds one of the output's two last labels and the contracted one, in
// either order: a transpose puts each pair in matmul's order.
void Importer::einsum(int i, const std::string& id) {
  const auto& n = g_.node(i);
  std::string eq;
  for (char c : attr_s(n, "equation", "")) {
    if (c != ' ') eq += c;
  }
  const size_t arrow = eq.find("->"), comma = eq.find(',');
  if (n.input_size() != 2 || arrow == std::string::npos || comma == std::string::npos ||
      comma > arrow || eq.find(',', comma + 1) < arrow || eq.find('.') != std::string::npos) {
    return refuse(i, "equation '" + eq +
                         "' (only two operands, no ellipsis, with the output labels given map)");
  }
  std::string la = eq.substr(0, comma), lb = eq.substr(comma + 1, arrow - comma - 1);
  const std::string lo = eq.substr(arrow + 2);
  auto a = activation(n.input(0)), b = activation(n.input(1));
  if (!a || !b || unbatched_.count(n.input(0)) || unbatched_.count(n.input(1))) {
    return refuse(i, "equation '" + eq +
                         "' of a weight or constant (only a product of two "
                         "activations with the batch maps)");
  }
  const size_t r = lo.size();
  const std::string lead = r >= 3 ? lo.substr(0, r - 2) : "";
  const char oi = r >= 3 ? lo[r - 2] : 0, oj = r >= 3 ? lo[r - 1] : 0;
  // The operand that holds the output's row label goes first.
  if (la.size() == r && lb.size() == r && la.substr(r - 2).find(oi) == std::string::npos) {
    std::swap(la, lb);
    std::swap(a, b);
  }
  const std::string pa = la.size() == r ? la.substr(r - 2) : "",
                    pb = lb.size() == r ? lb.substr(r - 2) : "";
  const char k = pa.size() == 2 ? (pa[0] == oi ? pa[1] : pa[0]) : 0;
  const bool product = r >= 3 && la.substr(0, r - 2) == lead && lb.substr(0, r - 2) == lead &&
                       pa.find(oi) != std::string::npos && pb.find(oj) != std::string::npos &&
                       pb.find(k) != std::string::npos && oi != oj && k != oi && k != oj &&
                       lead.find_first_of(std::string{oi, oj, k}) == std::string::npos;
  if (!product) {
    return refuse(i, "equation '" + eq +
                         "' is not a batched matrix product (the same leading labels, then "
                         "one free and one contracted label in each operand)");
  }
  // The per-sample shapes as the labels say, no broadcasting: the same leading dims (the batch
  // label is not an axis) and the same contracted size.
  const auto sa = sample_shape(la == eq.substr(0, comma) ? n.input(0) : n.input(1));
  const auto sb = sample_shape(la == eq.substr(0, comma) ? n.input(1) : n.input(0));
  if (!sa || !sb || sa->size() != r - 1 || sb->size() != r - 1 ||
      !std::equal(sa->begin(), sa->end() - 2, sb->begin()) ||
      (*sa)[r - 3 + (pa[0] == k ? 0 : 1)] != (*sb)[r - 3 + (pb[0] == k ? 0 : 1)]) {
    return refuse(i, "equation '" + eq + "' of per-sample shapes " +
                         (sa && sb ? dims_text(*sa) + " and " + dims_text(*sb) : "unknown") +
                         " (only equal leading dims and contracted sizes map; no broadcasting)");
  }
  std::vector<int64_t> swap_last(r - 1);  // per sample: the batch label is not an axis
  for (size_t d = 0; d < swap_last.size(); ++d) swap_last[d] = static_cast<int64_t>(d);
  std::swap(swap_last[r - 3], swap_last[r - 2]);
  TensorRef x = *a, y = *b;
  if (pa[0] == k) x = b_.transpose(unique_id(id + ".a", id), x, swap_last);
  if (pb[1] == k) y = b_.transpose(unique_id(id + ".b", id), y, swap_last);
  act_[n.output(0)] = b_.matmul(id, x, y);
}

}  // namespace gp::model::onnx_detail
