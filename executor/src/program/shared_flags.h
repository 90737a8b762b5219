// What several subcommands of graphpipe-executor share: flags, and the steps that read them.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "control/tls.h"
#include "gp/common/status.h"
#include "gp/exec/device.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec::daemon {

// --data and --no-shuffle, the same for every training subcommand.
void add_data_options(CLI::App* cmd, std::string& data, bool& no_shuffle);

// --device and --precision of the subcommands that train.
void add_device_options(CLI::App* cmd, std::string& device, std::string& precision,
                        const std::string& note = "");

// --tls-cert, --tls-key and --tls-ca; `how` says what this command does with them.
void add_tls_options(CLI::App* cmd, gp::exec::TlsOptions& tls, const std::string& how);

// --auth-token-file: the token in a file only its owner can read (the token must not travel in
// argv, which every local user sees). Leaves `token` alone when `path` is empty.
gp::Status read_token_file(const std::string& path, std::string* token);

// The control plane's token as a command takes it: --auth-token-file FILE (or
// $GRAPHPIPE_AUTH_TOKEN_FILE), else $GP_AUTH_TOKEN; never from argv, so --auth-token is kept only
// to refuse it. A command that serves (`serves`) also gets --insecure.
struct TokenFlags {
  std::string file;
  std::string argv_token;  // --auth-token's value: refused
  CLI::Option* argv_option = nullptr;
  bool insecure = false;
};
void add_token_options(CLI::App* cmd, TokenFlags& flags, bool serves, const std::string& how);

// The token `flags` name (empty when none); refuses --auth-token.
gp::Result<std::string> resolve_token(const TokenFlags& flags);

// A server (`what`, listening at `where`) requires a token: without one it refuses to start
// unless --insecure, which logs a warning that anyone who reaches `where` controls it.
gp::Status require_token(const std::string& what, const std::string& where,
                         const std::string& token, bool insecure);

// The device named by --device with GEMMs at --precision (which the CPU ignores).
gp::Result<const gp::exec::Device*> device_from_flags(const std::string& device,
                                                      const std::string& precision);

// The model named by exactly one of --model and --plan (then also the plan in `plan`), with its
// weights file resolved.
gp::Result<graphpipe::v1::ModelGraph> model_or_plan(const std::string& command,
                                                    const std::string& model_flag,
                                                    const std::string& plan_flag,
                                                    graphpipe::v1::Plan* plan);

// --checkpoint-every K > 0 writes into --checkpoint-dir: without it, nothing would be written.
gp::Status check_checkpoint_flags(int64_t checkpoint_every, const std::string& checkpoint_dir);

// A NaN or infinite loss stops training with exit 3, as `run` does, unless --allow-nonfinite.
gp::Status nonfinite_loss(double loss, int64_t iteration);

// The exit code of a training subcommand: its error's, or 3 when it stopped on a NaN or inf
// loss.
int training_exit_code(const gp::Status& status, bool nonfinite);

}  // namespace gp::exec::daemon
