#include "gp/model/param_layout.h"

#include <algorithm>
#include <string>

namespace gp::model {
namespace {

using PS = graphpipe::v1::ParamSource;

int64_t rows_of(const std::vector<int64_t>& dims) { return dims.size() == 2 ? dims[0] : 1; }
int64_t cols_of(const std::vector<int64_t>& dims) { return dims.size() == 2 ? dims[1] : 1; }

// Whether a parameter of `n` values at `at` fits S (dims, `size` values); the block's width for
// COLUMNS_TRANSPOSED in `width`.
bool fits(const std::vector<int64_t>& dims, int64_t size, PlacedLayout at, int64_t n,
          int64_t* width) {
  const int64_t rows = rows_of(dims), cols = cols_of(dims);
  switch (at.layout) {
    case PS::LAYOUT_COPY:
      return n == size;
    case PS::LAYOUT_TRANSPOSE:
      return dims.size() == 2 && n == size;
    case PS::LAYOUT_COLUMNS_TRANSPOSED:
      *width = rows > 0 ? n / rows : 0;
      return dims.size() == 2 && n > 0 && n % rows == 0 && at.offset >= 0 &&
             at.offset + *width <= cols;
    case PS::LAYOUT_RANGE:
      return at.offset >= 0 && at.offset + n <= size;
    default:
      return false;
  }
}

Status misfit(PlacedLayout at, int64_t n, const std::vector<int64_t>& dims) {
  std::string d;
  for (int64_t v : dims) d += (d.empty() ? "" : ", ") + std::to_string(v);
  return invalid_argument(std::to_string(n) + " values at layout " + std::to_string(at.layout) +
                          ", offset " + std::to_string(at.offset) + " do not fit a tensor [" + d +
                          "]");
}

}  // namespace

Result<std::vector<float>> gather_param(const std::vector<float>& s,
                                        const std::vector<int64_t>& dims, PlacedLayout at,
                                        int64_t count) {
  const int64_t size = static_cast<int64_t>(s.size());
  const bool block = at.layout == PS::LAYOUT_COLUMNS_TRANSPOSED || at.layout == PS::LAYOUT_RANGE;
  const int64_t n = block ? count : size;
  int64_t width = 0;
  if (!fits(dims, size, at, n, &width)) return misfit(at, n, dims);
  const int64_t rows = rows_of(dims), cols = cols_of(dims);
  std::vector<float> p(static_cast<size_t>(n));
  switch (at.layout) {
    case PS::LAYOUT_TRANSPOSE:  // S [r, c] -> P [c, r]
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          p[static_cast<size_t>(c * rows + r)] = s[static_cast<size_t>(r * cols + c)];
        }
      }
      break;
    case PS::LAYOUT_COLUMNS_TRANSPOSED:  // P[o][k] = S[k][offset + o]
      for (int64_t o = 0; o < width; ++o) {
        for (int64_t k = 0; k < rows; ++k) {
          p[static_cast<size_t>(o * rows + k)] = s[static_cast<size_t>(k * cols + at.offset + o)];
        }
      }
      break;
    case PS::LAYOUT_RANGE:
      std::copy(s.begin() + at.offset, s.begin() + at.offset + n, p.begin());
      break;
    default:
      p = s;
  }
  return p;
}

Status scatter_param(std::span<const float> p, const std::vector<int64_t>& dims, PlacedLayout at,
                     std::vector<float>& s) {
  const int64_t n = static_cast<int64_t>(p.size());
  int64_t width = 0;
  if (!fits(dims, static_cast<int64_t>(s.size()), at, n, &width)) return misfit(at, n, dims);
  const int64_t rows = rows_of(dims), cols = cols_of(dims);
  switch (at.layout) {
    case PS::LAYOUT_TRANSPOSE:
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          s[static_cast<size_t>(r * cols + c)] = p[static_cast<size_t>(c * rows + r)];
        }
      }
      break;
    case PS::LAYOUT_COLUMNS_TRANSPOSED:
      for (int64_t o = 0; o < width; ++o) {
        for (int64_t k = 0; k < rows; ++k) {
          s[static_cast<size_t>(k * cols + at.offset + o)] = p[static_cast<size_t>(o * rows + k)];
        }
      }
      break;
    case PS::LAYOUT_RANGE:
      std::copy(p.begin(), p.end(), s.begin() + at.offset);
      break;
    default:
      std::copy(p.begin(), p.end(), s.begin());
  }
  return ok_status();
}

std::optional<PlacedLayout> through_transpose(PlacedLayout at,
                                              const std::vector<int64_t>& view_dims) {
  switch (at.layout) {
    case PS::LAYOUT_COPY:
      return PlacedLayout{PS::LAYOUT_TRANSPOSE, 0};
    case PS::LAYOUT_TRANSPOSE:
      return PlacedLayout{PS::LAYOUT_COPY, 0};
    case PS::LAYOUT_COLUMNS_TRANSPOSED:  // columns of the view are rows of the tensor: contiguous
      if (view_dims.size() != 2) return std::nullopt;
      return PlacedLayout{PS::LAYOUT_RANGE, at.offset * view_dims[0]};
    default:
      return std::nullopt;
  }
}

}  // namespace gp::model
