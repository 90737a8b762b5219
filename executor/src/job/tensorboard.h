// TensorBoard event files (--tensorboard DIR): rank 0's logged iterations as scalar summaries,
// in TensorBoard's own format, so that `tensorboard --logdir DIR` draws them without any
// TensorFlow or TensorBoard code in the executor. A file is a sequence of TFRecord records:
//   uint64 length (little-endian), uint32 masked CRC32C of those 8 bytes,
//   the serialized event (graphpipe.v1.TensorBoardEvent, tensorboard.Event's field numbers),
//   uint32 masked CRC32C of the event bytes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "gp/common/status.h"
#include "graphpipe/v1/tensorboard.pb.h"

namespace gp::exec::daemon {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`, continuing from `crc` (the
// CRC of the bytes before it); crc32c("123456789") = 0xE3069283.
uint32_t crc32c(std::string_view data, uint32_t crc = 0);
// The CRC as TFRecord stores it: rotated right by 15 bits plus 0xa282ead8 (a CRC of data that
// holds CRCs would otherwise be weak).
uint32_t masked_crc32c(std::string_view data);
// One record: length, its masked CRC, `payload`, its masked CRC.
std::string tfrecord(std::string_view payload);

// TensorBoard's version of the format: the first record of every file says it.
inline constexpr const char* kTensorBoardFileVersion = "brain.Event:2";

// One scalar of an event: its tag (e.g. "train/loss") and value.
struct TensorBoardScalar {
  const char* tag;
  double value;  // stored as a float, as TensorBoard's simple_value is
};

// A new event file in a directory, written record by record and flushed after each, so that a
// running TensorBoard shows the job as it goes. Each run writes its own file: a resumed run adds
// one beside the earlier ones (TensorBoard merges the files of a directory).
class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) and events.out.tfevents.<unix seconds>.<host>.<pid>.graphpipe
  // in it, starting with the file-version event and a SessionLog START at `first_step` (the
  // first iteration of this run), so that for a resumed run TensorBoard drops what an earlier
  // run logged from there on (the checkpoint did not keep it). A directory or file that cannot
  // be created or written is refused naming `flag` and it.
  static Result<std::unique_ptr<TensorBoardWriter>> open(const std::string& flag,
                                                         const std::string& dir,
                                                         int64_t first_step);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event at `step` holding `scalars`, stamped with the current wall time; flushed.
  Status write_scalars(int64_t step, std::span<const TensorBoardScalar> scalars);
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string flag, std::string path, std::FILE* file)
      : flag_(std::move(flag)), path_(std::move(path)), file_(file) {}
  Status write_event(const graphpipe::v1::TensorBoardEvent& event);

  std::string flag_;  // named in errors
  std::string path_;
  std::FILE* file_;
};

}  // namespace gp::exec::daemon
