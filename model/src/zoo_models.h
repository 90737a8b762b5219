// Builders behind the zoo entries; each reads its parameters from ZooParams.
#pragma once

#include "gp/model/zoo.h"

namespace gp::model::zoo {

Result<graphpipe::v1::ModelGraph> build_mmt(const ZooParams& params);
Result<graphpipe::v1::ModelGraph> build_dlrm(const ZooParams& params);
Result<graphpipe::v1::ModelGraph> build_candle_uno(const ZooParams& params);
Result<graphpipe::v1::ModelGraph> build_transformer(const ZooParams& params);
Result<graphpipe::v1::ModelGraph> build_nbranch(const ZooParams& params);

}  // namespace gp::model::zoo
