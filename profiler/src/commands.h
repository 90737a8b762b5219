// The graphpipe-profile subcommands; main.cc parses flags into these options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gp/common/status.h"

namespace gp::profile::cli {

struct OpsOptions {
  std::string model;
  std::string device = "cpu";
  std::string cluster;      // default: cpu-local for the CPU
  std::string device_kind;  // overrides the cluster's device kind name
  std::vector<int64_t> micro_batches{1, 2, 4, 8};
  std::string out;
  int warmup = 2;
  int repetitions = 5;
  double min_time_ms = 20;
  int cpu_threads = 1;
  double flush_cache_mib = -1;     // < 0: default_cache_flush_bytes()
  std::string precision = "fp32";  // GEMM inputs on CUDA: fp32, tf32 or bf16
  double tolerance = 0;            // used when tolerance_given, else default_tolerance(precision)
  bool tolerance_given = false;
  uint64_t seed = 1;
  int passes = 2;
};

struct CommOptions {
  std::string device = "cpu";
  int ranks = 2;
  std::vector<std::string> sizes;  // "1K", "4M", "65536"
  std::string out;
  std::string link_class = "intra";
  std::vector<std::string> kinds{"p2p", "allreduce"};
  int warmup = 2;
  int repetitions = 20;
  int timeout_s = 60;
  std::string data_plane = "auto";  // as graphpipe-executor run --data-plane
};

struct MergeOptions {
  std::vector<std::string> inputs;
  std::string out;
};

Status run_ops(const OpsOptions& o);
Status run_comm(const CommOptions& o);
Status run_merge(const MergeOptions& o);
Status run_show(const std::string& path);
Status run_devices(bool json);

// "64", "4K", "16M", "1G" (powers of 1024) -> bytes; InvalidArgument naming --sizes otherwise.
Result<int64_t> parse_size(const std::string& text);

}  // namespace gp::profile::cli
