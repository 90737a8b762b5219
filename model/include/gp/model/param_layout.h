// The layouts of model.proto's ParamSource: how an imported parameter's values P (GraphPipe's
// layout) sit in the ONNX tensor S they came from (flat values, dims `dims`). The importer
// gathers P from S; export scatters trained values back, with the same arithmetic.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "gp/common/status.h"
#include "graphpipe/v1/model.pb.h"

namespace gp::model {

using ParamLayout = graphpipe::v1::ParamSource::Layout;

struct PlacedLayout {
  ParamLayout layout = graphpipe::v1::ParamSource::LAYOUT_COPY;
  int64_t offset = 0;
};

// P from S; `count` is P's size for the block layouts (COLUMNS_TRANSPOSED, RANGE) and ignored
// otherwise. InvalidArgument when the block does not fit S.
Result<std::vector<float>> gather_param(const std::vector<float>& s,
                                        const std::vector<int64_t>& dims, PlacedLayout at,
                                        int64_t count);
// Writes P into its place in S. InvalidArgument when P does not fit.
Status scatter_param(std::span<const float> p, const std::vector<int64_t>& dims, PlacedLayout at,
                     std::vector<float>& s);
// The same placement relative to the tensor under a 2-D Transpose view of dims `view_dims`
// (the tensor is [view_dims[1], view_dims[0]]); nullopt where no layout expresses it.
std::optional<PlacedLayout> through_transpose(PlacedLayout at,
                                              const std::vector<int64_t>& view_dims);

}  // namespace gp::model
