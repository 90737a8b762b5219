// Reading and writing models (and any other schema message) as protobuf text format, JSON or
// binary, chosen by file extension: .pbtxt/.textproto/.txt -> text, .json -> JSON, .pb/.bin ->
// binary. Parse errors carry the file name and, for text and JSON, the position.
#pragma once

#include <google/protobuf/message.h>

#include <string>
#include <string_view>

#include "gp/common/status.h"
#include "graphpipe/v1/model.pb.h"

namespace gp::model {

enum class FileFormat { kText, kJson, kBinary };

// The format for `path`'s extension, or an error naming the extension.
Result<FileFormat> format_for_path(std::string_view path);

Status parse_message(std::string_view data, FileFormat format, google::protobuf::Message* msg);
Result<std::string> serialize_message(const google::protobuf::Message& msg, FileFormat format);

Status read_message(const std::string& path, google::protobuf::Message* msg);
// Writes atomically: a temporary file next to `path`, then rename.
Status write_message(const std::string& path, const google::protobuf::Message& msg);

// A whole regular file (gp::read_regular_file): a directory, FIFO, device or socket is refused at
// once naming it, never opened to block (a FIFO without a writer) or to read forever (/dev/zero).
Result<std::string> read_file(const std::string& path);
// A regular file (or none yet) is replaced atomically: a temporary file beside it, flushed, then
// renamed over it; a symbolic link's target is replaced and the link kept. A device, FIFO or
// socket (/dev/stdout) is written through. A directory is refused.
Status write_file_atomic(const std::string& path, std::string_view contents);
// Before long work whose result goes to `path` (given by `flag`): its directory exists and it is
// not itself a directory, so that a typo fails at once rather than after the work.
Status check_output_path(std::string_view flag, const std::string& path);

// Hex FNV-1a-64 digest of the deterministic binary serialisation; equal messages hash equal.
std::string message_hash(const google::protobuf::Message& msg);
// Hex FNV-1a-64 digest of bytes.
std::string bytes_hash(std::string_view bytes);

// Weights by reference. externalize_weights moves the model's parameter values into a
// WeightsFile at `path` (written atomically; nothing happens for a model without values; on an
// error the model keeps its values) and records it as `recorded` (the name the model refers to
// it by: relative to the model file's directory, or absolute) with its hash. resolve_weights loads
// a model's weights file back into param_values: InvalidArgument naming the file when it is
// missing, its hash differs (another or a changed file), or an entry names an op or parameter the
// model lacks or has the wrong size. A model without a weights file is left as it is.
Status externalize_weights(graphpipe::v1::ModelGraph& model, const std::string& path,
                           const std::string& recorded);
Status resolve_weights(graphpipe::v1::ModelGraph& model);
// The identity of a model for plans and checkpoints: message_hash of the model, where a model
// that references a weights file counts by that file's hash whether it is resolved or not.
std::string model_hash(const graphpipe::v1::ModelGraph& model);

}  // namespace gp::model
