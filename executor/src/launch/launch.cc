#include "launch/launch.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "gp/common/file_read.h"

namespace gp::exec::launch {
namespace {

// A decimal integer and nothing else (no sign, no spaces); nullopt otherwise or on overflow.
std::optional<int> parse_count(const std::string& s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return std::atoi(s.c_str());
}

// Killed by a signal that neither the launcher nor a node daemon sent.
bool killed_by_own_signal(const RankExit& exit) {
  return exit.status > 128 && !exit.stopped_by_launcher;
}

}  // namespace

Result<std::vector<Host>> parse_hostfile(const std::string& text, const std::string& file) {
  std::vector<Host> hosts;
  std::istringstream lines(text);
  std::string line;
  int line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    std::istringstream words(line);
    Host h;
    std::string slots;
    if (!(words >> h.name) || h.name[0] == '#') continue;
    words >> slots >> h.address;
    const auto n = parse_count(slots);
    if (!n || *n == 0) {
      return invalid_argument("--hostfile " + file + " line " + std::to_string(line_no) +
                              ": slots '" + slots +
                              "' must be a positive integer (HOST SLOTS [ADDRESS])");
    }
    h.slots = *n;
    hosts.push_back(std::move(h));
  }
  if (hosts.empty()) return invalid_argument("--hostfile " + file + " lists no host");
  return hosts;
}

Result<std::vector<RankPlacement>> place_ranks(const PlanShape& plan,
                                               const PlacementRequest& request) {
  const int n = request.nprocs > 0 ? request.nprocs : plan.ranks;
  if (request.nprocs < 0) {
    return invalid_argument("--nprocs must be a positive integer, got '" +
                            std::to_string(request.nprocs) + "'");
  }
  if (n != plan.ranks) {
    return invalid_argument("--nprocs " + std::to_string(n) + ", but the plan " +
                            request.plan_path + " has " + std::to_string(plan.ranks) +
                            " ranks (leave --nprocs out)");
  }
  if (request.device != "cpu" && request.device != "cuda") {
    return invalid_argument(
        "--device must be cpu or cuda (each rank then takes its local GPU), "
        "got '" +
        request.device + "'");
  }
  std::vector<RankPlacement> out;
  if (request.hosts.empty()) {
    if (request.device == "cuda" && request.visible_gpus >= 0 && request.visible_gpus < n) {
      return invalid_argument("--device cuda: " + std::to_string(n) +
                              " local ranks, but CUDA_VISIBLE_DEVICES lists " +
                              std::to_string(request.visible_gpus) + " GPUs");
    }
    for (int r = 0; r < n; ++r) {
      out.push_back({r, 0, r, request.device == "cuda" ? "cuda:" + std::to_string(r) : "cpu"});
    }
    return out;
  }
  const std::string& f = request.hostfile;
  int total = 0;
  for (const auto& h : request.hosts) total += h.slots;
  if (total != n) {
    return invalid_argument("--hostfile " + f + " has " + std::to_string(total) +
                            " slots, the plan has " + std::to_string(n) + " ranks");
  }
  if (static_cast<int>(request.hosts.size()) != plan.nodes) {
    return invalid_argument("--hostfile " + f + " lists " + std::to_string(request.hosts.size()) +
                            " hosts, the plan's cluster has " + std::to_string(plan.nodes) +
                            " nodes of " + std::to_string(plan.devices_per_node) + " devices");
  }
  for (const auto& h : request.hosts) {
    if (h.slots > plan.devices_per_node) {
      return invalid_argument("--hostfile " + f + ": host " + h.name + " has " +
                              std::to_string(h.slots) + " slots, the plan's nodes have " +
                              std::to_string(plan.devices_per_node) + " devices");
    }
  }
  int rank = 0;
  for (int h = 0; h < static_cast<int>(request.hosts.size()); ++h) {
    for (int local = 0; local < request.hosts[h].slots; ++local, ++rank) {
      out.push_back(
          {rank, h, local, request.device == "cuda" ? "cuda:" + std::to_string(local) : "cpu"});
    }
  }
  return out;
}

Verdict parse_verdict(const std::string& text, int nprocs) {
  Verdict v;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("failed_rank=", 0) == 0) {
      const auto r = parse_count(line.substr(12));
      v.failed_rank = r && *r < nprocs ? *r : -1;
    } else if (line.rfind("reason=", 0) == 0) {
      v.reason = line.substr(7);
    }
  }
  return v;
}

void FailureRanking::add(int rank, const RankExit& exit, int64_t exited_at) {
  const bool signal = killed_by_own_signal(exit);
  const bool outranks =
      cause_ < 0 || (signal != killed_by_own_signal(cause_exit_) ? signal : exited_at < cause_at_);
  if (!outranks) {
    others_.push_back({rank, exit});
    return;
  }
  if (cause_ >= 0) others_.push_back({cause_, cause_exit_});
  cause_ = rank;
  cause_exit_ = exit;
  cause_at_ = exited_at;
}

bool FailureRanking::own_signal() const { return cause_ >= 0 && killed_by_own_signal(cause_exit_); }

Attribution attribute_failure(const std::vector<RankExit>& ranks,
                              const std::optional<Verdict>& verdict, int stop_signal) {
  const int n = static_cast<int>(ranks.size());
  auto failed = [&](int r) {
    const int rc = ranks[r].status;
    return rc != 0 && (stop_signal == 0 || rc != 128 + stop_signal);
  };
  // In rank order without exit times: the first rank killed by a signal of its own, else the
  // first rank that failed.
  FailureRanking ranking;
  int stopped = -1;
  for (int r = 0; r < n; ++r) {
    if (!failed(r)) continue;
    ranking.add(r, ranks[r], 0);
    if (ranks[r].stopped_by_launcher && stopped < 0) stopped = r;
  }
  // The verdict's rank counts only when it did fail (a rank that exited 0 is not to blame).
  int blamed = verdict && verdict->failed_rank >= 0 && verdict->failed_rank < n &&
                       failed(verdict->failed_rank)
                   ? verdict->failed_rank
                   : -1;
  Attribution a;
  if (ranking.own_signal()) {
    a.failed_rank = ranking.cause();
  } else {
    for (int candidate : {blamed, stopped, ranking.cause()}) {
      if (candidate >= 0) {
        a.failed_rank = candidate;
        break;
      }
    }
  }
  if (a.failed_rank < 0) {
    a.exit_status = stop_signal != 0 ? 128 + stop_signal : 0;
    return a;
  }
  const RankExit& own = ranks[a.failed_rank];
  a.exit_status = own.status;
  if (own.stopped_by_launcher) {
    a.exit_status = 1;
    for (const auto& r : ranks) {
      if (r.status != 0 && !r.stopped_by_launcher) {
        a.exit_status = r.status;
        break;
      }
    }
  }
  a.message = "rank " + std::to_string(a.failed_rank) + " failed (exit status " +
              std::to_string(own.status) +
              (own.stopped_by_launcher ? ", stopped by the launcher" : "") + ")";
  if (verdict && !verdict->reason.empty()) a.message += ": " + verdict->reason;
  return a;
}

NextAttempt next_attempt(const RestartPolicy& policy, const AttemptResult& result) {
  NextAttempt next;
  if (result.exit_status == 0 || result.stop_signal != 0 || !policy.replan) return next;
  if (result.exit_status == 3) return next;  // a non-finite loss: the launcher said so already
  if (policy.slurm) {
    next.message =
        "--on-failure replan does not run under --slurm yet (the allocation would have to shrink)";
    return next;
  }
  if (result.attempt >= policy.max_restarts) {
    next.message = "giving up after " + std::to_string(result.attempt) + " restarts";
    return next;
  }
  if (!result.has_checkpoint) {
    next.message = "no checkpoint in " + policy.checkpoint_dir + " to resume from; not restarting";
    return next;
  }
  if (result.nprocs <= 1 || result.failed_rank < 0 || result.failed_rank >= result.nprocs) {
    next.message = "no device left to re-plan for";
    return next;
  }
  next.hosts = result.hosts;
  if (!next.hosts.empty()) {
    size_t h = 0;
    int first = 0;
    while (h < next.hosts.size() && first + next.hosts[h].slots <= result.failed_rank) {
      first += next.hosts[h].slots;
      ++h;
    }
    if (h == next.hosts.size()) {
      next.message = "rank " + std::to_string(result.failed_rank) + " is on none of the " +
                     std::to_string(next.hosts.size()) + " hosts; not restarting";
      next.hosts.clear();
      return next;
    }
    if (--next.hosts[h].slots == 0) next.hosts.erase(next.hosts.begin() + static_cast<long>(h));
  }
  next.restart = true;
  next.exclude_rank = result.failed_rank;
  next.attempt = result.attempt + 1;
  next.nprocs = result.nprocs - 1;
  next.plan = policy.checkpoint_dir + "/plan-after-failure-" + std::to_string(next.attempt) + ".pb";
  next.message = "re-planning without rank " + std::to_string(result.failed_rank) + " (" +
                 std::to_string(next.nprocs) + " devices left)";
  return next;
}

Result<std::vector<std::string>> remove_noted_rings(const std::string& store_dir,
                                                    const std::string& shm_root) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(store_dir, ec)) return removed;  // no rank got that far
  const std::string own = (fs::path(shm_root) / ("graphpipe-" + std::to_string(getuid()) + "-"))
                              .lexically_normal()
                              .string();
  for (const auto& entry : fs::directory_iterator(store_dir, ec)) {
    if (entry.path().extension() != ".shm-dir") continue;
    // Ranks write these notes in a shared directory: a FIFO among them is skipped, not waited on.
    FileReadOptions small;
    small.max_bytes = 4096;
    auto note = read_regular_file(entry.path().string(), small);
    if (!note.ok()) continue;
    const std::string dir = note->substr(0, note->find('\n'));
    const std::string normal = fs::path(dir).lexically_normal().string();
    // Directly under shm_root and ours: a note cannot point anywhere else ("../", subdirs).
    if (normal.compare(0, own.size(), own) != 0 || normal.size() == own.size() ||
        normal.find('/', own.size()) != std::string::npos) {
      continue;
    }
    if (!fs::exists(normal, ec)) continue;
    fs::remove_all(normal, ec);
    if (ec) {
      return internal_error("cannot remove the shared-memory rings " + normal + ": " +
                            ec.message());
    }
    removed.push_back(normal);
  }
  if (ec)
    return internal_error("cannot list the store directory " + store_dir + ": " + ec.message());
  return removed;
}

}  // namespace gp::exec::launch
