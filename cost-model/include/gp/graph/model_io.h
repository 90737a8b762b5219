// Reading and writing models (and any other schema message) as protobuf text format, JSON or
// binary, chosen by file extension: .pbtxt/.textproto/.txt -> text, .json -> JSON, .pb/.bin ->
// binary. Parse errors carry the file name and, for text and JSON, the position.
#pragma once

#include <google/protobuf/message.h>

#include <string>
#include <string_view>

#include "gp/common/status.h"
#include "graphpipe/v1/model.pb.h"

namespace gp::graph {

enum class FileFormat { kText, kJson, kBinary };

// The format for `path`'s extension, or an error naming the extension.
Result<FileFormat> format_for_path(std::string_view path);

Status parse_message(std::string_view data, FileFormat format, google::protobuf::Message* msg);
Result<std::string> serialize_message(const google::protobuf::Message& msg, FileFormat format);

Status read_message(const std::string& path, google::protobuf::Message* msg);
// Writes atomically: a temporary file next to `path`, then rename.
Status write_message(const std::string& path, const google::protobuf::Message& msg);

Result<std::string> read_file(const std::string& path);
Status write_file_atomic(const std::string& path, std::string_view contents);

// Hex FNV-1a-64 digest of the deterministic binary serialisation; equal messages hash equal.
std::string message_hash(const google::protobuf::Message& msg);

}  // namespace gp::graph
