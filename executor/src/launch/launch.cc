#include "launch/launch.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
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

constexpr char kHostLineForms[] = "(HOST SLOTS [ADDRESS], or HOST slots=N [max_slots=M])";

// The words after HOST of a DeepSpeed/MPI line: slots=N, and max_slots=M >= N (MPI's bound on
// oversubscribing the host; it places no rank).
Status parse_slot_keys(const std::vector<std::string>& words, const std::string& where, Host* h) {
  int max_slots = 0;
  for (size_t i = 1; i < words.size(); ++i) {
    const size_t eq = words[i].find('=');
    const std::string key = words[i].substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : words[i].substr(eq + 1);
    if (eq == std::string::npos || (key != "slots" && key != "max_slots")) {
      return invalid_argument(where + "'" + words[i] + "' is neither slots=N nor max_slots=M " +
                              kHostLineForms);
    }
    int& field = key == "slots" ? h->slots : max_slots;
    if (field != 0) return invalid_argument(where + key + "= is given twice");
    const auto n = parse_count(value);
    if (!n || *n == 0) {
      return invalid_argument(where + key + " '" + value + "' must be a positive integer " +
                              kHostLineForms);
    }
    field = *n;
  }
  if (h->slots == 0) {
    return invalid_argument(where + "host " + h->name + " has no slots=N " + kHostLineForms);
  }
  if (max_slots != 0 && max_slots < h->slots) {
    return invalid_argument(where + "max_slots=" + std::to_string(max_slots) +
                            " is below slots=" + std::to_string(h->slots));
  }
  return ok_status();
}

// One hostfile line's words (comment removed, not empty); `where` starts its errors.
Result<Host> parse_host_line(const std::vector<std::string>& words, const std::string& where) {
  Host h;
  h.name = words[0];
  if (words.size() > 1 && words[1].find('=') != std::string::npos) {
    GP_RETURN_IF_ERROR(parse_slot_keys(words, where, &h));
    return h;
  }
  const std::string slots = words.size() > 1 ? words[1] : "";
  const auto n = parse_count(slots);
  if (!n || *n == 0) {
    return invalid_argument(where + "slots '" + slots + "' must be a positive integer " +
                            kHostLineForms);
  }
  h.slots = *n;
  if (words.size() > 2) h.address = words[2];
  if (words.size() > 3) {
    return invalid_argument(where + "unexpected '" + words[3] + "' after the address " +
                            kHostLineForms);
  }
  return h;
}

// Killed by a signal that neither the launcher nor a node daemon sent.
bool killed_by_own_signal(const RankExit& exit) {
  return exit.status > 128 && !exit.stopped_by_launcher;
}

// The plan's node of each of its ranks: rank R is the R-th device it does not exclude.
std::vector<int> nodes_of_ranks(const PlanShape& plan) {
  std::vector<int> nodes;
  const std::set<int> excluded(plan.excluded_devices.begin(), plan.excluded_devices.end());
  for (int device = 0; static_cast<int>(nodes.size()) < plan.ranks; ++device) {
    if (excluded.count(device) != 0) continue;
    nodes.push_back(plan.devices_per_node > 0 ? device / plan.devices_per_node : 0);
  }
  return nodes;
}

// Ranks fill the hosts in order; no plan node may end up on two hosts (the plan put its devices
// on intra-node links). Several whole nodes on one host are fine.
Status check_whole_nodes(const PlanShape& plan, const PlacementRequest& request) {
  const std::vector<int> node = nodes_of_ranks(plan);
  int rank = 0;
  for (size_t h = 0; h < request.hosts.size(); ++h) {
    rank += request.hosts[h].slots;
    if (rank <= 0 || rank >= plan.ranks || node[rank - 1] != node[rank]) continue;
    const std::string dpn = std::to_string(plan.devices_per_node);
    return invalid_argument(
        "--hostfile " + request.hostfile + ": ranks " + std::to_string(rank - 1) + " and " +
        std::to_string(rank) + " would run on hosts " + request.hosts[h].name + " and " +
        request.hosts[h + 1].name + ", but the plan puts both on its node " +
        std::to_string(node[rank]) + " (of " + std::to_string(plan.nodes) + " nodes of " + dpn +
        " devices), linked within the node; ranks fill the hosts in order, so each host's "
        "slots must hold whole plan nodes (e.g. " +
        dpn +
        " per host), or search a plan for these hosts (graphpipe-plan search --nodes H "
        "--devices-per-node S)");
  }
  return ok_status();
}

}  // namespace

Result<std::vector<Host>> parse_hostfile(const std::string& text, const std::string& file) {
  std::vector<Host> hosts;
  std::map<std::string, int> line_of;  // each host's line, to refuse a second one
  std::istringstream lines(text);
  std::string line;
  int line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    std::istringstream split(line.substr(0, line.find('#')));
    std::vector<std::string> words;
    for (std::string w; split >> w;) words.push_back(std::move(w));
    if (words.empty()) continue;
    const std::string where = "--hostfile " + file + " line " + std::to_string(line_no) + ": ";
    GP_ASSIGN_OR_RETURN(Host h, parse_host_line(words, where));
    const auto [seen, fresh] = line_of.emplace(h.name, line_no);
    if (!fresh) {
      // Its ranks would share local ranks (and GPUs) with those of the first line.
      return invalid_argument(where + "host '" + h.name + "' is listed on line " +
                              std::to_string(seen->second) +
                              " already (give each host one line with all its slots)");
    }
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
  int64_t total = 0;  // each host may have up to 999999999 slots
  for (const auto& h : request.hosts) total += h.slots;
  if (total != n) {
    return invalid_argument("--hostfile " + f + " has " + std::to_string(total) +
                            " slots, the plan has " + std::to_string(n) + " ranks");
  }
  GP_RETURN_IF_ERROR(check_whole_nodes(plan, request));
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

namespace {

// The first rank that could not be started, which the others failed for want of.
std::optional<Attribution> not_started_blame(const std::vector<RankExit>& ranks) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].not_started) continue;
    Attribution a;
    a.failed_rank = static_cast<int>(r);
    a.exit_status = ranks[r].status;
    a.message = "rank " + std::to_string(r) + " could not be started (exit status " +
                std::to_string(a.exit_status) + ")";
    return a;
  }
  return std::nullopt;
}

}  // namespace

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
  if (auto first = not_started_blame(ranks)) return *first;
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
