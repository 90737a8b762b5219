// A --hostfile as graphpipe-executor launcher place reads it: parse_hostfile (lines of "host
// slots [address]", comments, blanks), then place_ranks on a plan shape taken from the first
// input byte; also the rank 0 verdict file the launcher reads after an attempt.
#include <string>

#include "launch/launch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  (void)gp::exec::launch::parse_verdict(text, 1 + data[0] % 16);
  auto hosts = gp::exec::launch::parse_hostfile(text, "fuzz-hostfile");
  if (!hosts.ok()) return 0;
  gp::exec::launch::PlanShape shape;
  shape.nodes = 1 + data[0] % 4;
  shape.devices_per_node = 1 + (data[0] >> 2) % 8;
  shape.ranks = shape.nodes * shape.devices_per_node;
  gp::exec::launch::PlacementRequest request;
  request.plan_path = "fuzz.pb";
  request.nprocs = (data[0] & 0x80) != 0 ? shape.ranks : 0;
  request.device = (data[0] & 0x40) != 0 ? "cuda" : "cpu";
  request.hosts = *hosts;
  request.hostfile = "fuzz-hostfile";
  (void)gp::exec::launch::place_ranks(shape, request);
  return 0;
}
