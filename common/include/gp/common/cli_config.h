// --config FILE for every CLI: flags from a TOML file (CLI11's config reader), so that a long
// search or training command can live in a file next to the job.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "gp/common/file_read.h"
#include "gp/common/status.h"

namespace gp::cli {

// A config file is flags: a megabyte is far beyond any.
inline constexpr uint64_t kMaxConfigBytes = 1 << 20;

// Adds --config to the top-level app. Keys at the top of the file are global flags
// (log-level = "warn"); a subcommand's flags go under its [section] ([search] batch = 256,
// micro-batches = [4, 8], uniform-microbatch = true). Flags on the command line win; a key that
// names no flag is an error naming it, as a misspelled flag on the command line is.
inline void add_config_option(CLI::App& app) {
  app.set_config("--config", "",
                 "read flags from this TOML file: global flags at the top, a subcommand's "
                 "under [SUBCOMMAND] (e.g. [search] then batch = 256); flags on the command line "
                 "win; a key that is no flag is an error")
      ->type_name("FILE");
  app.allow_config_extras(CLI::config_extras_mode::error);
}

// CLI11 reads --config only before the subcommand, while users write it anywhere
// (`graphpipe-plan search --config job.toml`): the first --config (before any `--`) is moved to
// the front. Returns the arguments without the program name, in the reversed order
// CLI::App::parse(std::vector<std::string>&) takes; an error naming --config when its file is not
// a regular file of at most kMaxConfigBytes (CLI11 would block on a FIFO).
inline Result<std::vector<std::string>> config_first_reversed(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> config;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") break;
    if (args[i] == "--config" && i + 1 < args.size()) {
      config = {args[i], args[i + 1]};
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i),
                 args.begin() + static_cast<std::ptrdiff_t>(i + 2));
      break;
    }
    if (args[i].rfind("--config=", 0) == 0) {
      config = {args[i]};
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  if (!config.empty()) {
    const std::string path =
        config.size() == 2 ? config[1] : config[0].substr(std::string("--config=").size());
    FileReadOptions options;
    options.max_bytes = kMaxConfigBytes;
    if (auto file = RegularFile::open(path, options); !file.ok()) {
      return invalid_argument("--config: " + file.status().message());
    }
  }
  args.insert(args.begin(), config.begin(), config.end());
  std::reverse(args.begin(), args.end());
  return args;
}

}  // namespace gp::cli
