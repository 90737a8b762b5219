#include "shared_flags.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "gp/common/cli.h"
#include "gp/common/file_read.h"
#include "gp/common/logging.h"
#include "gp/model/model_io.h"
#include "gp/model/zoo.h"
#include "gp/plan/plan_util.h"
#include "job/run.h"

namespace gp::exec::daemon {

void add_data_options(CLI::App* cmd, std::string& data, bool& no_shuffle) {
  cmd->add_option("--data", data,
                  "train on real data: a directory with one <input op id>.npy per graph input "
                  "(C order, samples first; e.g. x.npy and y.target.npy for an imported model); "
                  "default: seeded synthetic data");
  cmd->add_flag("--no-shuffle", no_shuffle,
                "with --data: read the samples in file order every epoch (default: a seeded "
                "permutation per epoch)");
}

void add_device_options(CLI::App* cmd, std::string& device, std::string& precision,
                        const std::string& note) {
  cmd->add_option("--device", device,
                  "cpu, or cuda:N (GPU N of this machine; exits 1 naming the reason when it "
                  "cannot be opened)" +
                      note)
      ->capture_default_str();
  cmd->add_option("--precision", precision,
                  "input precision of the GEMMs on CUDA (linear, attention, matmul, conv; fp32 "
                  "accumulation always): fp32, tf32 or bf16. The CPU ignores it and computes fp32")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}))
      ->capture_default_str();
}

void add_tls_options(CLI::App* cmd, gp::exec::TlsOptions& tls, const std::string& how) {
  cmd->add_option(
         "--tls-cert", tls.cert,
         "PEM certificate (chain) this process presents; TLS for the control plane. " + how)
      ->group("TLS");
  cmd->add_option("--tls-key", tls.key, "PEM private key of --tls-cert (unencrypted, mode 0600)")
      ->group("TLS");
  cmd->add_option("--tls-ca", tls.ca,
                  "PEM CA certificate(s): a server requires clients to present a certificate "
                  "of it (mutual TLS); a client accepts only a server certificate of it, naming "
                  "the address dialled (IP or DNS subjectAltName)")
      ->group("TLS");
}

gp::Status read_token_file(const std::string& path, std::string* token) {
  if (path.empty()) return gp::ok_status();
  const std::string where = "--auth-token-file " + path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return gp::invalid_argument(where + ": " + std::strerror(errno));
  // Before its mode: a directory or a FIFO is no token file, whoever may read it.
  if (!S_ISREG(st.st_mode)) {
    return gp::invalid_argument(where + ": is " + std::string(gp::file_kind(st.st_mode)) +
                                ", not a regular file");
  }
  if ((st.st_mode & 077) != 0) {
    return gp::invalid_argument(where + ": readable by others (chmod 600 it)");
  }
  gp::FileReadOptions small;  // a token, not a file to fill memory with
  small.max_bytes = 64 << 10;
  auto read = gp::read_regular_file(path, small);
  if (!read.ok()) return gp::invalid_argument(where + ": " + read.status().message());
  std::string text = std::move(*read);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  if (text.empty()) return gp::invalid_argument("--auth-token-file " + path + ": empty");
  *token = text;
  return gp::ok_status();
}

void add_token_options(CLI::App* cmd, TokenFlags& flags, bool serves, const std::string& how) {
  cmd->add_option("--auth-token-file", flags.file,
                  "the control plane's shared secret, read from this file (mode 0600; e.g. "
                  "RUN_DIR/auth-token as the launcher writes it; default: "
                  "$GRAPHPIPE_AUTH_TOKEN_FILE, else the token in $GP_AUTH_TOKEN). " +
                      how)
      ->envname("GRAPHPIPE_AUTH_TOKEN_FILE");
  // Hidden: only there to say why a token in argv (which `ps` shows everyone) is refused.
  flags.argv_option = cmd->add_option("--auth-token", flags.argv_token)->group("");
  if (serves) {
    cmd->add_flag("--insecure", flags.insecure,
                  "serve without a token: anyone who can reach the port may read the job's "
                  "status, abort or stop it (and, for serve, start ranks as this user); "
                  "refused otherwise");
  }
}

gp::Result<std::string> resolve_token(const TokenFlags& flags) {
  if (flags.argv_option != nullptr && flags.argv_option->count() > 0) {
    return gp::invalid_argument(
        "--auth-token: a token on the command line is visible to every local user (ps, "
        "/proc/PID/cmdline); write it to a file of mode 0600 and give --auth-token-file FILE "
        "(or $GRAPHPIPE_AUTH_TOKEN_FILE)");
  }
  std::string token;
  if (!flags.file.empty()) {
    GP_RETURN_IF_ERROR(read_token_file(flags.file, &token));
  } else if (const char* env = std::getenv("GP_AUTH_TOKEN"); env != nullptr) {
    token = env;
  }
  return token;
}

gp::Status require_token(const std::string& what, const std::string& where,
                         const std::string& token, bool insecure) {
  if (!token.empty()) return gp::ok_status();
  if (!insecure) {
    return gp::invalid_argument(
        what + ": no token: without one anyone who can reach " + where +
        " controls it; give --auth-token-file FILE (mode 0600; or $GRAPHPIPE_AUTH_TOKEN_FILE), "
        "or --insecure on a network only you can reach");
  }
  gp::log::get("security")
      ->warn("INSECURE: {} runs without a token (--insecure): anyone who can reach {} controls it",
             what, where);
  return gp::ok_status();
}

gp::Result<const gp::exec::Device*> device_from_flags(const std::string& device,
                                                      const std::string& precision) {
  GP_ASSIGN_OR_RETURN(const auto p, gp::exec::parse_precision(precision));
  return gp::exec::find_device(device, p);
}

gp::Result<graphpipe::v1::ModelGraph> model_or_plan(const std::string& command,
                                                    const std::string& model_flag,
                                                    const std::string& plan_flag,
                                                    graphpipe::v1::Plan* plan) {
  if (model_flag.empty() == plan_flag.empty()) {
    return gp::invalid_argument(command + " needs exactly one of --model and --plan");
  }
  graphpipe::v1::ModelGraph model;
  if (!plan_flag.empty()) {
    GP_RETURN_IF_ERROR(gp::model::read_message(plan_flag, plan).with_context("--plan"));
    GP_RETURN_IF_ERROR(gp::plan::check_plan_hashes(*plan).with_context("--plan " + plan_flag));
    model = plan->model();
  } else {
    GP_ASSIGN_OR_RETURN(model, gp::model::load_model(model_flag));
  }
  GP_RETURN_IF_ERROR(gp::model::resolve_weights(model));
  return model;
}

gp::Status check_checkpoint_flags(int64_t checkpoint_every, const std::string& checkpoint_dir) {
  if (checkpoint_every < 0) {
    return gp::invalid_argument("--checkpoint-every = " + std::to_string(checkpoint_every) +
                                ", must be >= 0");
  }
  if (checkpoint_every > 0 && checkpoint_dir.empty()) {
    return gp::invalid_argument("--checkpoint-every " + std::to_string(checkpoint_every) +
                                " needs --checkpoint-dir (where the checkpoints go); without it "
                                "none would be written");
  }
  return gp::ok_status();
}

gp::Status nonfinite_loss(double loss, int64_t iteration) {
  return gp::Status(gp::StatusCode::kOutOfRange,
                    fmt::format("the loss is {} at iteration {}; --allow-nonfinite trains on",
                                std::isnan(loss) ? "NaN" : (loss > 0 ? "inf" : "-inf"), iteration));
}

int training_exit_code(const gp::Status& status, bool nonfinite) {
  const int code = gp::cli::report("graphpipe-executor", status);
  return nonfinite ? kExitNonFiniteLoss : code;
}

}  // namespace gp::exec::daemon
