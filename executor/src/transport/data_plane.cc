#include "gp/exec/data_plane.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "device_api/nccl.h"
#include "gp/common/file_read.h"
#include "gp/exec/device.h"
#include "transport/shm_communicator.h"

namespace gp::exec {
namespace {

std::string host_identity() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  // Containers (and test "hosts") on one kernel share /dev/shm only within a mount namespace;
  // ranks in different network namespaces are treated as different hosts as well, and a peer's
  // pid (checked to notice its death) means something only in our pid namespace.
  std::string id = std::string(name) + " " + boot_id;
  for (const char* ns : {"/proc/self/ns/mnt", "/proc/self/ns/net", "/proc/self/ns/pid"}) {
    std::error_code ec;
    id += " " + std::filesystem::read_symlink(ns, ec).string();
  }
  return id;
}

std::string identity_path(const GlooOptions& g, int rank) {
  return g.store_dir + "/" + g.prefix + ".host." + std::to_string(rank);
}

// The key of a rank's identity in a rendezvous store (the coordinator's).
std::string identity_key(const GlooOptions& g, int rank) {
  return g.prefix + ".host." + std::to_string(rank);
}

Status write_identity(const GlooOptions& g) {
  if (g.store) return g.store->set(identity_key(g, g.rank), host_identity());
  const std::string path = identity_path(g, g.rank);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << host_identity() << "\n";
    if (!out) return invalid_argument("--store-dir: cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return invalid_argument("--store-dir: cannot write " + path + ": " + ec.message());
  return ok_status();
}

// The identities of every rank; they were written before Gloo connected, so they are there.
Result<std::vector<std::string>> read_identities(const GlooOptions& g) {
  std::vector<std::string> ids;
  const auto deadline = std::chrono::steady_clock::now() + g.timeout;
  for (int r = 0; r < g.world_size; ++r) {
    if (g.store) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      GP_ASSIGN_OR_RETURN(std::string id,
                          g.store->get(identity_key(g, r), std::max(left, decltype(left){0})));
      ids.push_back(std::move(id));
      continue;
    }
    std::string line;
    while (true) {
      // The store directory is shared: a FIFO there is refused (and waited out), never opened.
      FileReadOptions small;
      small.max_bytes = 64 << 10;
      const auto text = read_regular_file(identity_path(g, r), small);
      line = text.ok() ? text->substr(0, text->find('\n')) : std::string();
      if (!line.empty()) break;
      if (std::chrono::steady_clock::now() > deadline) {
        return Status(StatusCode::kDeadlineExceeded,
                      "rank " + std::to_string(r) + " never wrote " + identity_path(g, r));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ids.push_back(line);
  }
  return ids;
}

// Gloo between all ranks, and which of them share this host.
Result<DataPlane> connect_gloo(const DataPlaneOptions& o) {
  DataPlane plane;
  plane.local_ranks = {o.gloo.rank};
  if (o.gloo.world_size > 1) GP_RETURN_IF_ERROR(write_identity(o.gloo));
  GP_ASSIGN_OR_RETURN(plane.comm, make_gloo_communicator(o.gloo));
  plane.description = "gloo";
  if (o.gloo.world_size == 1) return plane;
  GP_ASSIGN_OR_RETURN(auto ids, read_identities(o.gloo));
  plane.local_ranks.clear();
  for (int r = 0; r < o.gloo.world_size; ++r) {
    if (ids[static_cast<size_t>(r)] == ids[static_cast<size_t>(o.gloo.rank)]) {
      plane.local_ranks.push_back(r);
    }
  }
  return plane;
}

// Gloo as above, with shared-memory rings between the ranks of this host layered over it.
Result<DataPlane> connect_shm(const DataPlaneOptions& o) {
  GP_ASSIGN_OR_RETURN(DataPlane plane, connect_gloo(o));
  // Without a shared-memory filesystem every local rank stays on Gloo alike.
  if (plane.local_ranks.size() < 2 || !std::filesystem::is_directory(o.shm_root)) return plane;
  ShmOptions so;
  so.rank = o.gloo.rank;
  so.world_size = o.gloo.world_size;
  so.ring_bytes = o.shm_ring_bytes;
  so.timeout = o.gloo.timeout;
  so.local_ranks = plane.local_ranks;
  // Unique to the job (store directory and prefix) and to the user. With a rendezvous store the
  // store directories are each host's (or each launcher's) own: the prefix alone names the job.
  std::ostringstream dir;
  dir << o.shm_root << "/graphpipe-" << getuid() << "-" << std::hex
      << std::hash<std::string>{}((o.gloo.store ? std::string("store") : o.gloo.store_dir) + "\n" +
                                  o.gloo.prefix);
  so.dir = dir.str();
  // Recorded in the store directory, so that whoever started the ranks can remove the rings
  // after ranks that were killed (and could not remove them) are gone.
  {
    std::ofstream note(o.gloo.store_dir + "/" + o.gloo.prefix + ".shm-dir", std::ios::trunc);
    note << so.dir << "\n";
  }
  std::string unavailable;
  GP_ASSIGN_OR_RETURN(plane.comm, make_shm_communicator(std::move(plane.comm), so, &unavailable));
  plane.description = unavailable.empty() ? "shared memory with ranks " +
                                                rank_list(so.local_ranks) + ", gloo beyond"
                                          : "gloo (shared memory unavailable: " + unavailable + ")";
  return plane;
}

// This rank's NCCL communicators of the plan's layout, met through the ids from rank 0.
Result<DataPlane> connect_nccl(const DataPlaneOptions& o) {
  NcclOptions no;
  no.device = o.device;
  no.rank = o.gloo.rank;
  no.layout = o.nccl_layout;
  no.unique_ids = o.nccl_unique_ids;
  no.timeout = o.gloo.timeout;
  no.abort_reason = o.abort_reason;
  DataPlane plane;
  GP_ASSIGN_OR_RETURN(plane.comm, make_nccl_communicator(no));
  plane.description =
      "nccl (" + std::to_string(o.nccl_layout.communicators()) + " communicators in the job)";
  return plane;
}

Result<std::vector<std::string>> nccl_setup(const NcclLayout& layout) {
  return make_nccl_unique_ids(layout.communicators());
}

bool host_memory(const Device* device) { return device == nullptr || device->host_memory(); }

// A device whose memory the host cannot read exchanges it over the device data plane; whether
// this build has one is the backend table's to say (the NCCL entry points fail naming the build
// that has it), and such a device comes only from a backend that has one. Without a device the
// caller's tensors are host memory and it never asks for NCCL (graphpipe-profile comm).
Result<bool> nccl_can_connect(std::string_view requested, const Device* device) {
  if (device == nullptr) return false;
  if (requested == "nccl" && device->host_memory()) {
    return invalid_argument("--data-plane nccl needs --device cuda:N (this rank runs on " +
                            std::string(device->name()) + ", whose memory is the host's)");
  }
  return (requested == "nccl" || requested == "auto") && !device->host_memory();
}

// Host memory moves through shared memory between the ranks of a host unless Gloo is forced.
Result<bool> shm_can_connect(std::string_view requested, const Device* device) {
  return requested == "auto" && host_memory(device);
}

// Gloo carries any memory (device memory is staged through the host).
Result<bool> gloo_can_connect(std::string_view requested, const Device* /*device*/) {
  return requested == "auto" || requested == "gloo";
}

constexpr Transport kTransports[] = {
    {.name = "nccl", .can_connect = nccl_can_connect, .setup = nccl_setup, .connect = connect_nccl},
    {.name = "shm", .can_connect = shm_can_connect, .setup = nullptr, .connect = connect_shm},
    {.name = "gloo", .can_connect = gloo_can_connect, .setup = nullptr, .connect = connect_gloo},
};

// Rank 0's ids say which kind of transport it chose: a transport with a setup hands them out.
Status check_same_transport(const Transport& transport, const DataPlaneOptions& o) {
  const size_t ids = o.nccl_unique_ids.size();
  if (transport.setup != nullptr && o.nccl_layout.communicators() > 0 && ids == 0) {
    return failed_precondition(
        "rank " + std::to_string(o.gloo.rank) +
        " uses the NCCL data plane, but rank 0 does not (it handed out no NCCL ids): give "
        "every rank the same --device kind and --data-plane");
  }
  if (transport.setup == nullptr && ids > 0) {
    return failed_precondition(
        "rank 0 uses the NCCL data plane (it handed out " + std::to_string(ids) +
        " NCCL ids), but rank " + std::to_string(o.gloo.rank) + " uses " +
        (host_memory(o.device)
             ? "host memory (" + std::string(o.device != nullptr ? o.device->name() : "cpu") + ")"
             : "--data-plane " + o.transport) +
        ": give every rank the same --device kind and --data-plane");
  }
  return ok_status();
}

}  // namespace

std::span<const Transport> transports() { return kTransports; }

Result<const Transport*> choose_transport(std::string_view requested, const Device* device) {
  for (const Transport& t : transports()) {
    GP_ASSIGN_OR_RETURN(const bool can, t.can_connect(requested, device));
    if (can) return &t;
  }
  return invalid_argument("--data-plane = '" + std::string(requested) + "', expected auto or gloo");
}

Result<DataPlane> connect_data_plane(const Transport& transport, const DataPlaneOptions& options) {
  GP_RETURN_IF_ERROR(check_same_transport(transport, options));
  return transport.connect(options);
}

Result<DataPlane> make_data_plane(const DataPlaneOptions& options) {
  GP_ASSIGN_OR_RETURN(const Transport* transport,
                      choose_transport(options.transport, options.device));
  return connect_data_plane(*transport, options);
}

Result<int> pin_to_local_core(int rank, const std::vector<int>& local_ranks) {
  const auto me = std::find(local_ranks.begin(), local_ranks.end(), rank);
  if (me == local_ranks.end())
    return invalid_argument("rank " + std::to_string(rank) + " is not local");
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    return internal_error(std::string("sched_getaffinity: ") + std::strerror(errno));
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  if (cpus.size() < local_ranks.size()) return -1;
  const int cpu = cpus[static_cast<size_t>(me - local_ranks.begin())];
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof(one), &one) != 0) {
    return internal_error("sched_setaffinity(cpu " + std::to_string(cpu) +
                          "): " + std::strerror(errno));
  }
  return cpu;
}

}  // namespace gp::exec
