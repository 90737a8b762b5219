#include "launch_options.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <regex>

#include "gp/common/cli.h"
#include "gp/common/cli_hints.h"
#include "gp/common/version.h"
#include "launch_help.h"
#include "shared_flags.h"

namespace gp::exec::daemon {
namespace {

// The flags' text, checked and converted after parsing (so each message names the value typed).
struct RawFlags {
  std::string nprocs, iterations = "5", timeout = "30", checkpoint_every = "0";
  std::string on_failure = "stop", max_restarts = "3", kill_grace = "2", orphan_timeout = "30";
  std::string port = "29500", nnodes, node_rank, nproc_per_node, master_port, token_file;
  std::string log_every = "1", argv_token;
  bool argv_token_given = false;
  std::string adapt_warmup = "10", adapt_max_switches = "3", adapt_confirm = "2";
  std::vector<std::string> slowdown;
};

bool matches(const std::string& text, const char* pattern) {
  return std::regex_match(text, std::regex(pattern));
}

// A decimal integer of at most 9 digits (larger values are refused by the caller's bound).
Status to_int(const std::string& text, bool positive, const std::string& what, int* out) {
  if (!matches(text, positive ? "[1-9][0-9]{0,8}" : "[0-9]{1,9}")) return invalid_argument(what);
  *out = std::stoi(text);
  return ok_status();
}

Status check_numbers(const RawFlags& raw, LaunchOptions& o) {
  const auto got = [](const std::string& v) { return ", got '" + v + "'"; };
  GP_RETURN_IF_ERROR(to_int(raw.max_restarts, false,
                            "--max-restarts must be a number" + got(raw.max_restarts),
                            &o.max_restarts));
  GP_RETURN_IF_ERROR(to_int(raw.checkpoint_every, false,
                            "--checkpoint-every must be a number" + got(raw.checkpoint_every),
                            &o.checkpoint_every));
  GP_RETURN_IF_ERROR(to_int(
      raw.kill_grace, true,
      "--kill-grace must be a positive number of seconds" + got(raw.kill_grace), &o.kill_grace_s));
  GP_RETURN_IF_ERROR(
      to_int(raw.orphan_timeout, true,
             "--orphan-timeout must be a positive number of seconds" + got(raw.orphan_timeout),
             &o.orphan_timeout_s));
  GP_RETURN_IF_ERROR(to_int(raw.timeout, true,
                            "--timeout must be a positive number of seconds" + got(raw.timeout),
                            &o.timeout_s));
  GP_RETURN_IF_ERROR(to_int(raw.iterations, true,
                            "--iterations must be a positive integer" + got(raw.iterations),
                            &o.iterations));
  GP_RETURN_IF_ERROR(to_int(raw.log_every, true,
                            "--log-every must be a positive integer" + got(raw.log_every),
                            &o.log_every));
  if (!to_int(raw.port, true, "", &o.port).ok() || o.port >= 65536) {
    return invalid_argument("--port must be 1..65535" + got(raw.port));
  }
  if (!raw.nprocs.empty()) {
    GP_RETURN_IF_ERROR(to_int(raw.nprocs, true,
                              "--nprocs must be a positive integer" + got(raw.nprocs), &o.nprocs));
  }
  return ok_status();
}

Status check_choices(const RawFlags& raw, LaunchOptions& o) {
  if (raw.on_failure != "stop" && raw.on_failure != "replan") {
    return invalid_argument("--on-failure must be stop or replan, got '" + raw.on_failure + "'");
  }
  o.replan_on_failure = raw.on_failure == "replan";
  if (o.device != "cpu" && o.device != "cuda") {
    return invalid_argument(
        "--device must be cpu or cuda (each rank then takes its local GPU), got '" + o.device +
        "'");
  }
  if (!matches(o.log_level, "|trace|debug|info|warn|error|off")) {
    return invalid_argument("--log-level must be trace, debug, info, warn, error or off, got '" +
                            o.log_level + "'");
  }
  for (const std::string& s : raw.slowdown) {
    std::smatch m;
    if (!std::regex_match(s, m, std::regex("([0-9]{1,6}):([0-9]{1,6}(\\.[0-9]+)?)")) ||
        std::stod(m[2].str()) < 1) {
      return invalid_argument("--slowdown must be RANK:FACTOR with FACTOR >= 1 (e.g. 1:3), got '" +
                              s + "'");
    }
    o.slowdown[std::stoi(m[1].str())] = m[2].str();
  }
  if (raw.argv_token_given) {
    return invalid_argument(
        "--auth-token: a token in argv is visible to every local user (ps); the launcher writes "
        "a fresh one to RUN_DIR/auth-token (or takes $GP_AUTH_TOKEN), and --auth-token-file FILE "
        "is for the executor's clients");
  }
  return ok_status();
}

Status check_restarts(LaunchOptions& o) {
  const bool has_dir = !o.checkpoint_dir.empty();
  if (o.replan_on_failure && (!has_dir || o.checkpoint_every == 0)) {
    return invalid_argument(
        "--on-failure replan needs --checkpoint-dir and --checkpoint-every to resume from");
  }
  if (o.checkpoint_every != 0 && !has_dir) {
    return invalid_argument("--checkpoint-every " + std::to_string(o.checkpoint_every) +
                            " needs --checkpoint-dir (where the checkpoints go); without it none "
                            "would be written");
  }
  if (o.resume && !has_dir) return invalid_argument("--resume needs --checkpoint-dir");
  if (o.resume_if_present && !has_dir) {
    return invalid_argument("--resume-if-present needs --checkpoint-dir");
  }
  if (o.resume && o.resume_if_present) {
    return invalid_argument("--resume and --resume-if-present exclude each other");
  }
  return ok_status();
}

Status check_exclusions(const LaunchOptions& o) {
  if (!o.hostfile.empty() && o.slurm) {
    return invalid_argument("--hostfile and --slurm exclude each other");
  }
  if (o.no_tls && !(o.tls_cert + o.tls_key + o.tls_ca).empty()) {
    return invalid_argument("--no-tls and --tls-cert/--tls-key/--tls-ca exclude each other");
  }
  return ok_status();
}

Status check_adapt(const RawFlags& raw, LaunchOptions& o) {
  if (!o.adapt) return ok_status();
  if (o.checkpoint_dir.empty()) {
    return invalid_argument(
        "--adapt needs --checkpoint-dir (a switch stops the job with a checkpoint and resumes "
        "from it)");
  }
  if (o.slurm) {
    return invalid_argument(
        "--adapt is not available with --slurm (the allocation cannot change yet)");
  }
  if (!raw.nnodes.empty() || !raw.node_rank.empty() || !o.master_addr.empty()) {
    return invalid_argument(
        "--adapt is not available per node (--nnodes): each node's launcher sees only its own "
        "ranks");
  }
  GP_RETURN_IF_ERROR(to_int(
      raw.adapt_warmup, true,
      "--adapt-warmup must be a positive number of iterations, got '" + raw.adapt_warmup + "'",
      &o.adapt_warmup));
  GP_RETURN_IF_ERROR(
      to_int(raw.adapt_max_switches, false,
             "--adapt-max-switches must be a number, got '" + raw.adapt_max_switches + "'",
             &o.adapt_max_switches));
  GP_RETURN_IF_ERROR(
      to_int(raw.adapt_confirm, true,
             "--adapt-confirm must be a positive number of checks, got '" + raw.adapt_confirm + "'",
             &o.adapt_confirm));
  if (!matches(o.adapt_drop, "0?\\.[0-9]+")) {
    return invalid_argument("--adapt-drop must be a fraction in [0, 1), e.g. 0.1, got '" +
                            o.adapt_drop + "'");
  }
  if (!matches(o.adapt_min_gain, "[0-9]*\\.?[0-9]+")) {
    return invalid_argument("--adapt-min-gain must be a fraction >= 0, e.g. 0.1, got '" +
                            o.adapt_min_gain + "'");
  }
  std::error_code ec;
  if (!o.adapt_profile.empty() && !std::filesystem::is_regular_file(o.adapt_profile, ec)) {
    return invalid_argument("--adapt-profile '" + o.adapt_profile + "': no such file");
  }
  if (!o.metrics.empty() && !matches(o.metrics, ".*\\.jsonl")) {
    return invalid_argument(
        "--adapt reads the metrics as they are written: give --metrics-out a .jsonl path, or "
        "leave it out (RUN_DIR/metrics.jsonl), got '" +
        o.metrics + "'");
  }
  return ok_status();
}

Status check_per_node_fits(const LaunchOptions& o);

Status check_per_node(const RawFlags& raw, LaunchOptions& o) {
  if ((raw.nnodes + raw.node_rank + raw.nproc_per_node + o.master_addr + raw.master_port).empty()) {
    return ok_status();
  }
  if (raw.nnodes.empty() || raw.node_rank.empty() || o.master_addr.empty()) {
    const auto flag = [](const char* name, const std::string& v) {
      return v.empty() ? std::string() : std::string(" ") + name + " " + v;
    };
    return invalid_argument(
        "per-node mode needs --nnodes, --node-rank and --master-addr together (got" +
        flag("--nnodes", raw.nnodes) + flag("--node-rank", raw.node_rank) +
        flag("--master-addr", o.master_addr) + ")");
  }
  GP_RETURN_IF_ERROR(to_int(raw.nnodes, true,
                            "--nnodes must be a positive integer, got '" + raw.nnodes + "'",
                            &o.nnodes));
  if (!to_int(raw.node_rank, false, "", &o.node_rank).ok() || o.node_rank >= o.nnodes) {
    return invalid_argument("--node-rank must be 0.." + std::to_string(o.nnodes - 1) +
                            " (--nnodes " + raw.nnodes + "), got '" + raw.node_rank + "'");
  }
  if (!raw.nproc_per_node.empty()) {
    GP_RETURN_IF_ERROR(
        to_int(raw.nproc_per_node, true,
               "--nproc-per-node must be a positive integer, got '" + raw.nproc_per_node + "'",
               &o.nproc_per_node));
  }
  const std::string port = raw.master_port.empty() ? std::to_string(o.port) : raw.master_port;
  if (!to_int(port, true, "", &o.master_port).ok() || o.master_port >= 65536) {
    return invalid_argument("--master-port must be 1..65535, got '" + port + "'");
  }
  return check_per_node_fits(o);
}

Status check_per_node_fits(const LaunchOptions& o) {
  if (!o.hostfile.empty() || o.slurm) {
    return invalid_argument("--nnodes (per-node mode) excludes --hostfile and --slurm");
  }
  if (o.replan_on_failure) {
    return invalid_argument(
        "--on-failure replan is not available per node (--nnodes): each node's launcher sees "
        "only its own ranks");
  }
  if (o.token.empty() && token_from_environment().empty()) {
    return invalid_argument(
        "--nnodes: every node's launcher needs the same token: --auth-token-file F (the same "
        "contents on every node) or $GP_AUTH_TOKEN");
  }
  return ok_status();
}

Status read_launch_token(const std::string& path, std::string* token) {
  if (path.empty()) return ok_status();
  GP_RETURN_IF_ERROR(read_token_file(path, token));
  if (token->empty()) return invalid_argument("--auth-token-file '" + path + "': empty");
  return ok_status();
}

Status check(const RawFlags& raw, LaunchOptions& o) {
  if (o.plan.empty()) return invalid_argument("--plan is required");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(o.plan, ec)) {
    return invalid_argument("--plan '" + o.plan + "': no such file");
  }
  GP_RETURN_IF_ERROR(check_numbers(raw, o));
  GP_RETURN_IF_ERROR(check_choices(raw, o));
  GP_RETURN_IF_ERROR(check_restarts(o));
  GP_RETURN_IF_ERROR(check_exclusions(o));
  GP_RETURN_IF_ERROR(check_adapt(raw, o));
  GP_RETURN_IF_ERROR(read_launch_token(raw.token_file, &o.token));
  if (!o.job_id.empty() && !matches(o.job_id, "[A-Za-z0-9._-]{1,64}")) {
    return invalid_argument("--job-id must be 1-64 letters, digits, '.', '_' or '-', got '" +
                            o.job_id + "'");
  }
  return check_per_node(raw, o);
}

// A flag with a value; `type` names the value in --help.
template <typename T>
CLI::Option* add(CLI::App& app, const char* name, const char* type, T& to, const char* what) {
  return app.add_option(name, to, what)->type_name(type);
}

void add_job_options(CLI::App& app, RawFlags& raw, LaunchOptions& o) {
  add(app, "--plan", "FILE", o.plan, "the plan to run (graphpipe-plan search --out)");
  add(app, "--nprocs", "N", raw.nprocs, "ranks to start (default and only value: the plan's)");
  add(app, "--iterations", "N", raw.iterations, "training iterations (default 5)");
  add(app, "--metrics-out", "FILE", o.metrics, "rank 0's metrics (.json, or .jsonl line by line)");
  add(app, "--tensorboard", "DIR", o.tensorboard, "rank 0's TensorBoard event files");
  add(app, "--trace", "FILE", o.trace, "rank 0's measured trace (chrome://tracing JSON)");
  add(app, "--measured-profile-out", "FILE", o.measured_profile,
      "rank 0's profile database of the measured op times");
  add(app, "--timeout", "SECONDS", raw.timeout, "the ranks' heartbeat timeout in seconds (30)");
  add(app, "--device", "cpu|cuda", o.device, "cpu, or cuda: each rank takes its local GPU");
  add(app, "--log-level", "LEVEL", o.log_level, "the ranks' log level");
  add(app, "--log-every", "K", raw.log_every, "rank 0 logs progress every K iterations");
  add(app, "--checkpoint-dir", "DIR", o.checkpoint_dir, "where checkpoints go");
  add(app, "--checkpoint-every", "K", raw.checkpoint_every, "a checkpoint every K iterations");
  app.add_flag("--resume", o.resume, "continue from the newest checkpoint");
  app.add_flag("--resume-if-present", o.resume_if_present,
               "resume when there is a checkpoint, else start fresh");
  add(app, "--on-failure", "stop|replan", raw.on_failure,
      "stop, or replan without the failed device");
  add(app, "--max-restarts", "N", raw.max_restarts, "re-plans at most (3)");
  add(app, "--kill-grace", "SECONDS", raw.kill_grace, "seconds from SIGTERM to SIGKILL (2)");
  add(app, "--orphan-timeout", "SECONDS", raw.orphan_timeout,
      "ranks stop when the launcher is gone this long (30 s)");
  add(app, "--slowdown", "RANK:FACTOR", raw.slowdown, "RANK:FACTOR, that rank's compute slower")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void add_cluster_options(CLI::App& app, RawFlags& raw, LaunchOptions& o) {
  add(app, "--log-dir,--run-dir", "DIR", o.run_dir, "the job's logs (./graphpipe-runs/JOB-ID)");
  add(app, "--auth-token", "TOKEN", raw.argv_token, "refused: use $GP_AUTH_TOKEN");
  add(app, "--auth-token-file", "FILE", raw.token_file, "the job's token (the same on every node)");
  add(app, "--job-id", "ID", o.job_id, "the job's id");
  add(app, "--tls-cert", "FILE", o.tls_cert, "the coordinator's certificate (PEM)");
  add(app, "--tls-key", "FILE", o.tls_key, "its key (PEM)");
  add(app, "--tls-ca", "FILE", o.tls_ca, "the CA every rank's certificate chains to (PEM)");
  app.add_flag("--no-tls", o.no_tls, "a multi-host control plane in plaintext");
  add(app, "--hostfile", "FILE", o.hostfile, "HOST SLOTS [ADDRESS] or HOST slots=N per line");
  add(app, "--remote-shell", "CMD", o.remote_shell, "how ranks start on hosts (ssh)");
  add(app, "--port", "PORT", raw.port, "the coordinator's port (29500)");
  add(app, "--iface", "NAME", o.iface, "the interface whose address ranks bind to");
  app.add_flag("--slurm", o.slurm, "one srun task per rank inside an allocation");
  add(app, "--nnodes", "N", raw.nnodes, "per node: the number of nodes");
  add(app, "--node-rank", "K", raw.node_rank, "per node: this node's index");
  add(app, "--nproc-per-node", "P", raw.nproc_per_node, "per node: ranks on each node");
  add(app, "--master-addr", "HOST", o.master_addr, "per node: rank 0's host");
  add(app, "--master-port", "PORT", raw.master_port, "per node: its coordinator's port");
  app.add_flag("--adapt", o.adapt, "re-plan the running job from what it measures");
  add(app, "--adapt-warmup", "K", raw.adapt_warmup, "iterations before each check (10)");
  add(app, "--adapt-drop", "FRACTION", o.adapt_drop,
      "re-check when the rate falls this much (0.1)");
  add(app, "--adapt-min-gain", "FRACTION", o.adapt_min_gain, "switch when this much faster (0.1)");
  add(app, "--adapt-max-switches", "N", raw.adapt_max_switches, "switches at most (3)");
  add(app, "--adapt-confirm", "N", raw.adapt_confirm,
      "checks in a row that must find a switch worth it before it is made (2)");
  add(app, "--adapt-profile", "DB", o.adapt_profile, "the profile the plan was searched with");
}

// Splits off what follows `--` (and the wrapper's --invoked-as).
void split_arguments(const std::vector<std::string>& args, LaunchOptions& o,
                     std::vector<std::string>& flags) {
  size_t i = 0;
  for (; i + 1 < args.size(); i += 2) {  // the wrapper's, first
    if (args[i] == "--invoked-as") {
      o.invoked_as = {args[i + 1]};
    } else if (args[i] == "--executor") {
      o.executor = args[i + 1];
    } else {
      break;
    }
  }
  for (; i < args.size(); ++i) {
    if (args[i] == "--") {
      o.dashdash = true;
      o.extra.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    o.given.push_back(args[i]);
  }
  flags = o.given;
}

}  // namespace

LaunchCommandLine parse_launch_command_line(const std::vector<std::string>& args) {
  LaunchCommandLine out;
  LaunchOptions& o = out.options;
  std::vector<std::string> flags;
  split_arguments(args, o, flags);
  CLI::App app{launch_description()};
  app.name(o.invoked_as.size() == 1 ? o.invoked_as[0] : "graphpipe-executor launch");
  app.footer(launch_help_text());
  app.set_version_flag("--version", std::string("graphpipe-launch ") + GP_VERSION_STRING);
  app.allow_extras();
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // as shells do
  RawFlags raw;
  add_job_options(app, raw, o);
  add_cluster_options(app, raw, o);
  try {
    std::vector<std::string> reversed(flags.rbegin(), flags.rend());
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    out.exit_code = app.exit(e) == 0 ? gp::cli::kExitOk : gp::cli::kExitBadInput;
    return out;
  }
  raw.argv_token_given = app.count("--auth-token") > 0;
  if (!app.remaining().empty()) {
    std::fprintf(stderr, "graphpipe-launch: error: unknown argument '%s' (see --help)\n",
                 app.remaining().front().c_str());
    gp::cli::print_hints("graphpipe-launch", app, app.remaining(true));
    out.exit_code = gp::cli::kExitBadInput;
    return out;
  }
  if (const Status st = check(raw, o); !st.ok()) {
    out.exit_code = gp::cli::report("graphpipe-launch", st);
    return out;
  }
  out.run = true;
  return out;
}

std::string token_from_environment() {
  const char* env = std::getenv("GP_AUTH_TOKEN");
  return env != nullptr ? env : "";
}

}  // namespace gp::exec::daemon
