// The NCCL data plane on one GPU: what one device can exercise. Two ranks of a communicator may
// not share a GPU, so transfers between ranks need two GPUs; here: a one-rank all-reduce through
// the communicator's streams and events, set-up that times out when the peer never comes, and
// abort.
#include "device_api/nccl.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "gp/exec/device.h"

using namespace gp;

namespace {

const exec::Device& gpu() {
  auto d = exec::find_device("cuda:0");
  REQUIRE(d.ok());
  return **d;
}

exec::NcclOptions one_rank_group(std::chrono::milliseconds timeout) {
  exec::NcclOptions o;
  o.device = &gpu();
  o.rank = 0;
  o.layout.groups = {{0}};
  auto ids = exec::make_nccl_unique_ids(1);
  REQUIRE(ids.ok());
  o.unique_ids = *ids;
  o.timeout = timeout;
  return o;
}

}  // namespace

TEST_CASE("NCCL reports its version and makes 128-byte unique ids") {
  auto version = exec::nccl_version();
  REQUIRE(version.ok());
  CHECK(version->rfind("2.", 0) == 0);
  auto ids = exec::make_nccl_unique_ids(3);
  REQUIRE(ids.ok());
  REQUIRE(ids->size() == 3);
  for (const auto& id : *ids) CHECK(id.size() == 128);
  CHECK((*ids)[0] != (*ids)[1]);
}

TEST_CASE("a one-rank NCCL all-reduce is ordered after compute and completes at wait_all") {
  auto comm = exec::make_nccl_communicator(one_rank_group(std::chrono::seconds(30)));
  INFO(comm.status().to_string());
  REQUIRE(comm.ok());
  CHECK((*comm)->device_memory());
  const exec::Device& dev = gpu();
  const size_t n = size_t{1} << 20;
  auto buffer = exec::DeviceBuffer::create(dev, n * sizeof(float));
  REQUIRE(buffer.ok());
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000) * 0.5f;
  REQUIRE(dev.copy_from_host(buffer->data(), host.data(), n * sizeof(float)).ok());
  const int group[] = {0};
  for (int round = 0; round < 20; ++round) {  // more than the event ring holds
    REQUIRE((*comm)->allreduce_sum(group, {buffer->f(), n}).ok());
  }
  REQUIRE((*comm)->wait_all().ok());
  std::vector<float> back(n);
  REQUIRE(dev.copy_to_host(back.data(), buffer->data(), n * sizeof(float)).ok());
  CHECK(back == host);  // a sum over one rank
  const int other[] = {0, 1};
  auto unknown = (*comm)->allreduce_sum(other, {buffer->f(), n});
  CHECK(unknown.code() == StatusCode::kInvalidArgument);
  CHECK(unknown.message().find("{0,1}") != std::string::npos);
}

TEST_CASE("NCCL set-up with a peer that never comes fails within the timeout, naming the channel") {
  exec::NcclOptions o;
  o.device = &gpu();
  o.rank = 0;
  o.layout.channels = {{0, 1, 2}};
  auto ids = exec::make_nccl_unique_ids(1);
  REQUIRE(ids.ok());
  o.unique_ids = *ids;
  o.timeout = std::chrono::milliseconds(3000);
  const auto start = std::chrono::steady_clock::now();
  auto comm = exec::make_nccl_communicator(o);
  const double waited_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE_FALSE(comm.ok());
  INFO(comm.status().to_string());
  CHECK(comm.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(comm.status().message().find("channel 0->1") != std::string::npos);
  CHECK(waited_s < 15);
}

TEST_CASE("NCCL set-up stops when the job is aborted, with the job's reason") {
  exec::NcclOptions o;
  o.device = &gpu();
  o.rank = 0;
  o.layout.channels = {{0, 1, 2}};  // the peer never comes
  auto ids = exec::make_nccl_unique_ids(1);
  REQUIRE(ids.ok());
  o.unique_ids = *ids;
  o.timeout = std::chrono::seconds(60);
  const auto start = std::chrono::steady_clock::now();
  o.abort_reason = [start]() -> std::string {
    return std::chrono::steady_clock::now() - start > std::chrono::milliseconds(500)
               ? "job aborted: rank 1 failed"
               : "";
  };
  auto comm = exec::make_nccl_communicator(o);
  const double waited_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE_FALSE(comm.ok());
  CHECK(comm.status().code() == StatusCode::kAborted);
  CHECK(comm.status().message() == "job aborted: rank 1 failed");
  CHECK(waited_s < 15);  // not the 60 s timeout
}

TEST_CASE("NCCL ids are refused while NCCL_COMM_ID would make them all one") {
  setenv("NCCL_COMM_ID", "10.0.0.1:12345", 1);
  auto ids = exec::make_nccl_unique_ids(2);
  unsetenv("NCCL_COMM_ID");
  CHECK(ids.status().code() == StatusCode::kFailedPrecondition);
  CHECK(ids.status().message().find("NCCL_COMM_ID") != std::string::npos);
}

TEST_CASE("after abort every NCCL call fails with the reason, and the wrong-size id is refused") {
  auto comm = exec::make_nccl_communicator(one_rank_group(std::chrono::seconds(30)));
  REQUIRE(comm.ok());
  (*comm)->abort("the coordinator aborted the job");
  auto buffer = exec::DeviceBuffer::create(gpu(), 1024);
  REQUIRE(buffer.ok());
  const int group[] = {0};
  const Status st = (*comm)->allreduce_sum(group, {buffer->f(), 256});
  CHECK(st.code() == StatusCode::kAborted);
  CHECK(st.message() == "the coordinator aborted the job");
  CHECK((*comm)->wait_all().code() == StatusCode::kAborted);

  auto bad = one_rank_group(std::chrono::seconds(5));
  bad.unique_ids[0].resize(16);
  auto refused = exec::make_nccl_communicator(bad);
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("nccl_unique_ids[0] has 16 bytes") != std::string::npos);
}

TEST_CASE("the NCCL data plane refuses a device that is not a GPU") {
  exec::NcclOptions o;
  o.device = &exec::cpu_device();
  auto refused = exec::make_nccl_communicator(o);
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("needs a CUDA device") != std::string::npos);
}
