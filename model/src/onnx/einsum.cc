// Einsum of two activations that is a batched matrix product: attention written with
// torch.einsum ("bhid,bhjd->bhij", "bhij,bhjd->bhid") and MaxViT's five-label forms.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

// An equation of two operands read as a batched matrix product.
struct Product {
  size_t rank = 0;           // labels of each operand and of the output (the batch among them)
  bool swapped = false;      // the second operand holds the output's row label: it goes first
  bool transpose_a = false;  // the first operand's pair is (contracted, row)
  bool transpose_b = false;  // the second operand's pair is (column, contracted)
};

// Which of `pair`'s two labels is not `label`; 0 when `label` is not in it.
char other_label(const std::string& pair, char label) {
  return pair[0] == label ? pair[1] : pair[1] == label ? pair[0] : 0;
}

// "A,B->O" (no spaces) as a Product, or nullopt: O is the labels both operands lead with (the
// batch first), then a row and a column label; one operand ends with the row label and a
// contracted one, the other with the column label and the same contracted one, each pair in
// either order; no label repeats.
std::optional<Product> batched_product(const std::string& eq) {
  const size_t arrow = eq.find("->"), comma = eq.find(',');
  if (arrow == std::string::npos || comma > arrow || eq.find(',', comma + 1) < arrow ||
      eq.find('.') != std::string::npos) {
    return std::nullopt;
  }
  std::string la = eq.substr(0, comma), lb = eq.substr(comma + 1, arrow - comma - 1);
  const std::string lo = eq.substr(arrow + 2);
  const size_t r = lo.size();
  if (r < 3 || la.size() != r || lb.size() != r) return std::nullopt;
  const char row = lo[r - 2], col = lo[r - 1];
  Product p{r, la.find(row, r - 2) == std::string::npos, false, false};
  if (p.swapped) std::swap(la, lb);
  const std::string pa = la.substr(r - 2), pb = lb.substr(r - 2), lead = lo.substr(0, r - 2);
  const char k = other_label(pa, row);
  const bool leads = la.compare(0, r - 2, lead) == 0 && lb.compare(0, r - 2, lead) == 0;
  const std::string own{row, col, k};
  if (!leads || k == 0 || other_label(pb, col) != k || row == col || k == row || k == col ||
      lead.find_first_of(own) != std::string::npos) {
    return std::nullopt;
  }
  p.transpose_a = pa[0] == k;
  p.transpose_b = pb[1] == k;
  return p;
}

}  // namespace

// The leading labels become matmul's batch axes; a transpose puts each operand's pair in
// matmul's order (that of the second operand folds into the product's transpose_b).
void Importer::einsum(int i, const std::string& id) {
  const auto& n = g_.node(i);
  std::string eq;
  for (char c : attr_s(n, "equation", "")) {
    if (c != ' ') eq += c;
  }
  const auto p = n.input_size() == 2 ? batched_product(eq) : std::nullopt;
  if (!p) {
    return refuse(i, "equation '" + eq +
                         "' is not a batched matrix product of two operands (the same leading "
                         "labels, then one free and one contracted label in each; no ellipsis)");
  }
  const std::string& first = n.input(p->swapped ? 1 : 0);
  const std::string& second = n.input(p->swapped ? 0 : 1);
  const auto a = activation(first), b = activation(second);
  if (!a || !b || unbatched_.count(first) || unbatched_.count(second)) {
    return refuse(i, "equation '" + eq +
                         "' of a weight or constant (only a product of two activations with the "
                         "batch maps)");
  }
  // The per-sample shapes as the labels say, no broadcasting: the same leading dims (the batch
  // label is not an axis) and the same contracted size.
  const size_t r = p->rank;
  const auto sa = sample_shape(first), sb = sample_shape(second);
  const bool fits = sa && sb && sa->size() == r - 1 && sb->size() == r - 1 &&
                    std::equal(sa->begin(), sa->end() - 2, sb->begin()) &&
                    (*sa)[r - (p->transpose_a ? 3 : 2)] == (*sb)[r - (p->transpose_b ? 2 : 3)];
  if (!fits) {
    return refuse(i, "equation '" + eq + "' of per-sample shapes " +
                         (sa && sb ? dims_text(*sa) + " and " + dims_text(*sb) : "unknown") +
                         " (only equal leading dims and contracted sizes map; no broadcasting)");
  }
  std::vector<int64_t> swap_last(r - 1);  // per sample: the batch label is not an axis
  for (size_t d = 0; d < swap_last.size(); ++d) swap_last[d] = static_cast<int64_t>(d);
  std::swap(swap_last[r - 3], swap_last[r - 2]);
  const TensorRef x = p->transpose_a ? b_.transpose(unique_id(id + ".a", id), *a, swap_last) : *a;
  const TensorRef y = p->transpose_b ? b_.transpose(unique_id(id + ".b", id), *b, swap_last) : *b;
  act_[n.output(0)] = b_.matmul(id, x, y);
}

}  // namespace gp::model::onnx_detail
