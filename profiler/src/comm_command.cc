// graphpipe-profile comm: point-to-point and all-reduce sweeps with ranks as local processes.
//
// The process forks ranks 1..N-1 before any communicator (or thread) exists and acts as rank 0;
// the ranks meet through a Gloo FileStore in a fresh temporary directory.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "gp/common/logging.h"
#include "gp/exec/data_plane.h"
#include "gp/exec/device.h"
#include "gp/exec/device_info.h"
#include "gp/profile/comm_profiler.h"
#include "gp/profile_db/profile_db.h"

namespace gp::profile::cli {
namespace {

struct Sweeps {
  bool p2p = false;
  bool allreduce = false;
};

void print_header(const char* what, int ranks) {
  std::printf("# %s, %d ranks\n", what, ranks);
  std::printf("%12s %12s %10s %10s %12s %12s\n", "size_bytes", "count_fp32", "time_us", "spread",
              "algbw_GB/s", "busbw_GB/s");
}

void print_sample(const CommSample& s) {
  std::printf("%12lld %12lld %10.1f %9.1f%% %12.3f %12.3f\n", static_cast<long long>(s.bytes),
              static_cast<long long>(s.bytes / 4), s.time.median_us,
              s.time.median_us > 0 ? 100.0 * s.time.spread_us() / s.time.median_us : 0.0,
              s.algbw_bytes_per_s / 1e9, s.busbw_bytes_per_s / 1e9);
  std::fflush(stdout);
}

// Runs this rank's part of every requested sweep; rank 0 gets the samples.
Status run_rank(int rank, const CommOptions& o, const CommSweepOptions& sweep, const Sweeps& which,
                const std::string& store_dir, std::vector<CommSample>* p2p,
                std::vector<CommSample>* allreduce, std::string* plane_description) {
  exec::DataPlaneOptions dp;
  dp.transport = o.data_plane;
  exec::GlooOptions& go = dp.gloo;
  go.rank = rank;
  go.world_size = o.ranks;
  go.store_dir = store_dir;
  go.prefix = "comm-profile";
  go.timeout = std::chrono::milliseconds(int64_t{o.timeout_s} * 1000);
  GP_ASSIGN_OR_RETURN(auto plane, exec::make_data_plane(dp));
  auto& comm = plane.comm;
  if (rank == 0) log::get("profile")->info("data plane: {}", plane.description);
  *plane_description = plane.description;
  const bool print = rank == 0;
  if (which.p2p) {
    if (print) print_header("point-to-point (half a ping-pong round trip)", 2);
    GP_ASSIGN_OR_RETURN(
        *p2p, sweep_p2p(*comm, o.ranks, sweep, [&](const CommSample& s) { print_sample(s); }));
  }
  if (which.allreduce) {
    if (print) print_header("all-reduce (sum, float32)", o.ranks);
    GP_ASSIGN_OR_RETURN(*allreduce, sweep_allreduce(*comm, o.ranks, sweep,
                                                    [&](const CommSample& s) { print_sample(s); }));
  }
  return ok_status();
}

// Waits for the forked ranks; the first failure (or the deadline) wins.
Status reap(const std::vector<pid_t>& pids, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  Status first;
  size_t left = pids.size();
  std::vector<bool> done(pids.size(), false);
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int wstatus = 0;
      const pid_t r = waitpid(pids[i], &wstatus, WNOHANG);
      if (r == 0) continue;
      done[i] = true;
      --left;
      const bool ok = r == pids[i] && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
      if (!ok && first.ok()) {
        first = internal_error("rank " + std::to_string(i + 1) + " (pid " +
                               std::to_string(pids[i]) + ") failed; see its message above");
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (!done[i]) kill(pids[i], SIGKILL), waitpid(pids[i], nullptr, 0);
      }
      return Status(StatusCode::kDeadlineExceeded,
                    "ranks still running after --timeout-s = " + std::to_string(timeout_s));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return first;
}

Result<graphpipe::v1::CommFit> make_fit(const std::vector<CommSample>& samples,
                                        graphpipe::v1::LinkClass link,
                                        graphpipe::v1::CollectiveKind kind, int ranks,
                                        const graphpipe::v1::Provenance& provenance) {
  graphpipe::v1::CommFit fit;
  fit.set_link_class(link);
  fit.set_kind(kind);
  fit.set_ranks(ranks);
  for (const auto& s : samples) {
    auto* p = fit.add_points();
    p->set_bytes(s.bytes);
    p->set_time_us(s.time.median_us);
  }
  GP_ASSIGN_OR_RETURN(AlphaBeta ab, fit_alpha_beta(fit.points()));
  fit.set_alpha_us(ab.alpha_us);
  fit.set_beta_bytes_per_s(ab.beta_bytes_per_s);
  *fit.mutable_provenance() = provenance;
  return fit;
}

}  // namespace

// Processes one comm run forks on this host.
constexpr int kMaxRanks = 256;

Result<int64_t> parse_size(const std::string& text) {
  if (text.empty()) return invalid_argument("--sizes: empty size");
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    return invalid_argument("--sizes: '" + text + "' is not a size (e.g. 4096, 64K, 16M)");
  }
  int64_t scale = 1;
  const std::string suffix = text.substr(used);
  if (suffix == "K" || suffix == "k") {
    scale = 1024;
  } else if (suffix == "M" || suffix == "m") {
    scale = int64_t{1} << 20;
  } else if (suffix == "G" || suffix == "g") {
    scale = int64_t{1} << 30;
  } else if (!suffix.empty()) {
    return invalid_argument("--sizes: '" + text + "' has unknown suffix '" + suffix +
                            "' (K, M or G)");
  }
  if (value <= 0) return invalid_argument("--sizes: '" + text + "' must be > 0");
  if (value > kMaxSweepBytes / scale) {  // before multiplying, which could overflow
    return invalid_argument("--sizes: '" + text + "' is more than 4G, the largest size measured");
  }
  return static_cast<int64_t>(value) * scale;
}

namespace {

Result<graphpipe::v1::LinkClass> parse_link_class(const std::string& name) {
  if (name == "intra") return graphpipe::v1::LINK_CLASS_INTRA_NODE;
  if (name == "inter") return graphpipe::v1::LINK_CLASS_INTER_NODE;
  return invalid_argument("--link-class = '" + name + "', expected intra or inter");
}

Result<Sweeps> parse_kinds(const std::vector<std::string>& kinds) {
  Sweeps which;
  for (const auto& k : kinds) {
    if (k == "p2p") {
      which.p2p = true;
    } else if (k == "allreduce") {
      which.allreduce = true;
    } else {
      return invalid_argument("--kinds: '" + k + "', expected p2p or allreduce");
    }
  }
  return which;
}

// The sweep --sizes, --warmup and --repetitions ask for, checked against this host's memory
// before any rank or ring exists: every rank holds the largest message twice (its buffer and
// the transport's), and all of them run here.
Result<CommSweepOptions> sweep_options(const CommOptions& o) {
  CommSweepOptions sweep;
  sweep.warmup = o.warmup;
  sweep.repetitions = o.repetitions;
  if (o.sizes.empty()) {
    sweep.sizes_bytes = default_sweep_sizes();
  } else {
    for (const auto& s : o.sizes) {
      GP_ASSIGN_OR_RETURN(int64_t b, parse_size(s));
      sweep.sizes_bytes.push_back(b);
    }
  }
  GP_RETURN_IF_ERROR(validate_sweep(sweep));
  const int64_t host_memory = exec::query_host().memory_bytes;
  const double need = 2.0 * static_cast<double>(sweep.sizes_bytes.back()) * o.ranks;
  if (host_memory > 0 && need > static_cast<double>(host_memory)) {
    return invalid_argument("--sizes: the largest, " + std::to_string(sweep.sizes_bytes.back()) +
                            " bytes, needs about " + std::to_string(static_cast<int64_t>(need)) +
                            " bytes over --ranks = " + std::to_string(o.ranks) +
                            ", more than this host's " + std::to_string(host_memory));
  }
  return sweep;
}

// A fresh temporary directory for the ranks' Gloo FileStore.
Result<std::string> make_rendezvous_dir() {
  std::error_code ec;
  const auto base = std::filesystem::temp_directory_path(ec);
  std::string store = (ec ? std::filesystem::path("/tmp") : base) / "graphpipe-comm.XXXXXX";
  if (mkdtemp(store.data()) == nullptr) {
    return internal_error("cannot create a rendezvous directory under " + store);
  }
  return store;
}

void kill_ranks(const std::vector<pid_t>& children) {
  for (pid_t c : children) kill(c, SIGKILL), waitpid(c, nullptr, 0);
}

// Forks ranks 1..N-1, each running its part of the sweeps and exiting; rank 0 (this process)
// then runs its own part, gets the samples and waits for the others. Removes `store`.
Status run_ranks(const CommOptions& o, const CommSweepOptions& sweep, const Sweeps& which,
                 const std::string& store, std::vector<CommSample>* p2p,
                 std::vector<CommSample>* allreduce, std::string* plane_description) {
  std::error_code ec;
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> children;
  for (int r = 1; r < o.ranks; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      kill_ranks(children);
      std::filesystem::remove_all(store, ec);
      return internal_error("fork failed for rank " + std::to_string(r));
    }
    if (pid == 0) {
      std::vector<CommSample> unused_p2p, unused_ar;
      std::string unused_plane;
      const Status st = run_rank(r, o, sweep, which, store, &unused_p2p, &unused_ar, &unused_plane);
      if (!st.ok())
        std::fprintf(stderr, "graphpipe-profile: rank %d: %s\n", r, st.message().c_str());
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(st.ok() ? 0 : 1);
    }
    children.push_back(pid);
  }
  const Status mine = run_rank(0, o, sweep, which, store, p2p, allreduce, plane_description);
  if (!mine.ok()) {
    kill_ranks(children);
    std::filesystem::remove_all(store, ec);
    return mine.with_context("rank 0");
  }
  const Status others = reap(children, o.timeout_s);
  std::filesystem::remove_all(store, ec);
  return others;
}

// Fits each measured kind, prints the fits and writes them to --out. Each kind is fitted on its
// own: a noisy sweep of one kind must not lose the other's fit.
Status write_fits(const CommOptions& o, graphpipe::v1::LinkClass link, const Sweeps& which,
                  const std::vector<CommSample>& p2p, const std::vector<CommSample>& allreduce,
                  const std::string& plane_description) {
  auto log = log::get("profile");
  const auto host = exec::query_host();
  const auto provenance = make_provenance(
      "cpu", host.cpu_model, "", plane_description + ", " + std::to_string(o.ranks) + " processes");
  graphpipe::v1::ProfileDB db;
  db.set_format_version(kProfileFormatVersion);
  std::string failed;
  auto add_fit = [&](const std::vector<CommSample>& samples, graphpipe::v1::CollectiveKind kind,
                     int ranks, const char* name) {
    auto fit = make_fit(samples, link, kind, ranks, provenance);
    if (fit.ok()) {
      *db.add_comm() = std::move(fit).value();
    } else {
      log->error("{}: {}", name, fit.status().message());
      failed += failed.empty() ? name : std::string(", ") + name;
    }
  };
  if (which.p2p) add_fit(p2p, graphpipe::v1::COLLECTIVE_KIND_P2P, 2, "p2p");
  if (which.allreduce) {
    add_fit(allreduce, graphpipe::v1::COLLECTIVE_KIND_ALL_REDUCE, o.ranks, "all-reduce");
  }
  for (const auto& f : db.comm()) {
    std::printf("fit %-10s %2d ranks: alpha %.2f us, beta %.3f GB/s\n",
                f.kind() == graphpipe::v1::COLLECTIVE_KIND_P2P ? "p2p" : "all-reduce", f.ranks(),
                f.alpha_us(), f.beta_bytes_per_s() / 1e9);
  }
  if (db.comm_size() > 0) {
    GP_RETURN_IF_ERROR(write_profile(o.out, db).with_context("--out " + o.out));
    log->info("wrote {} communication fits to {}", db.comm_size(), o.out);
  }
  if (!failed.empty()) {
    return failed_precondition("no usable fit for " + failed +
                               " (see above; repeat with more --repetitions or larger --sizes)" +
                               (db.comm_size() > 0 ? "; the other fits are in " + o.out : ""));
  }
  return ok_status();
}

}  // namespace

Status run_comm(const CommOptions& o) {
  GP_ASSIGN_OR_RETURN(const exec::Device* device, exec::find_device(o.device));
  (void)device;  // the CPU: host memory over the data plane
  if (o.ranks < 2 || o.ranks > kMaxRanks) {
    return invalid_argument("--ranks = " + std::to_string(o.ranks) + ", must be in [2, " +
                            std::to_string(kMaxRanks) + "] (each is a process of this host)");
  }
  if (o.timeout_s < 1) {
    return invalid_argument("--timeout-s = " + std::to_string(o.timeout_s) + ", must be >= 1");
  }
  GP_ASSIGN_OR_RETURN(const graphpipe::v1::LinkClass link, parse_link_class(o.link_class));
  GP_ASSIGN_OR_RETURN(const Sweeps which, parse_kinds(o.kinds));
  GP_ASSIGN_OR_RETURN(const CommSweepOptions sweep, sweep_options(o));
  GP_ASSIGN_OR_RETURN(const std::string store, make_rendezvous_dir());
  log::get("profile")->info("measuring {} ranks as local processes (rendezvous in {})", o.ranks,
                            store);
  std::vector<CommSample> p2p, allreduce;
  std::string plane;
  GP_RETURN_IF_ERROR(run_ranks(o, sweep, which, store, &p2p, &allreduce, &plane));
  return write_fits(o, link, which, p2p, allreduce, plane);
}

}  // namespace gp::profile::cli
