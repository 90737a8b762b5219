#include "transport/ring_allreduce.h"

#include <algorithm>
#include <string>

namespace gp::exec {
namespace {

std::span<const std::byte> bytes_of(std::span<const float> v) { return std::as_bytes(v); }
std::span<std::byte> bytes_of(std::span<float> v) { return std::as_writable_bytes(v); }

void add_into(float* __restrict dst, const float* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

size_t pieces_of(size_t n, size_t piece) { return (n + piece - 1) / piece; }

// Sends `out` to `next` and receives `in` from `prev`, piece by piece, alternating so that each
// ring holds about one piece: sum adds the received pieces into `in`, otherwise they replace it.
Status exchange(Communicator& comm, int next, int prev, uint64_t tag, std::span<const float> out,
                std::span<float> in, bool sum, std::span<float> scratch) {
  const size_t piece = scratch.size();
  const size_t rounds = std::max(pieces_of(out.size(), piece), pieces_of(in.size(), piece));
  for (size_t i = 0; i < rounds; ++i) {
    const size_t at = i * piece;
    if (at < out.size()) {
      GP_RETURN_IF_ERROR(
          comm.send(next, tag, bytes_of(out.subspan(at, std::min(piece, out.size() - at)))));
    }
    if (at < in.size()) {
      const size_t n = std::min(piece, in.size() - at);
      std::span<float> into = sum ? scratch.first(n) : in.subspan(at, n);
      GP_RETURN_IF_ERROR(comm.recv(prev, tag, bytes_of(into)));
      if (sum) add_into(in.data() + at, scratch.data(), n);
    }
  }
  return ok_status();
}

}  // namespace

uint64_t ring_allreduce_tag(std::span<const int> group) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over the members
  for (int r : group) {
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<uint32_t>(r) >> (8 * b)) & 0xffu;
      h *= 1099511628211ULL;
    }
  }
  // Bit 61 set, bits 63 and 62 clear: the executor's tags are a message id (far below 2^61) with
  // an iteration-parity bit 63 and an evaluation bit 62; the handshake's tag has bit 63 set.
  return (uint64_t{1} << 61) | ((h >> 35) << 32);
}

Status ring_allreduce_sum(Communicator& comm, std::span<const int> group, uint64_t tag,
                          std::span<float> data, std::span<float> scratch) {
  const auto self = std::find(group.begin(), group.end(), comm.rank());
  if (self == group.end()) {
    return invalid_argument("rank " + std::to_string(comm.rank()) + ": all-reduce group {" +
                            rank_list(group) + "} does not contain this rank");
  }
  const size_t n = group.size();
  if (n == 1) return ok_status();
  if (scratch.empty()) return invalid_argument("ring all-reduce: no scratch");
  const size_t me = static_cast<size_t>(self - group.begin());
  const int next = group[(me + 1) % n], prev = group[(me + n - 1) % n];
  const size_t count = data.size();
  // Chunk c is [count*c/n, count*(c+1)/n): sizes differ by at most one element.
  auto chunk = [&](size_t c) {
    const size_t begin = count * c / n, end = count * (c + 1) / n;
    return data.subspan(begin, end - begin);
  };
  auto failed = [&](const Status& st) {
    return st.with_context("rank " + std::to_string(comm.rank()) + ": all-reduce over ranks " +
                           "{" + rank_list(group) + "}");
  };
  // Reduce-scatter: after step s, this rank's chunk (me - s - 1) holds the sum of s + 2 members;
  // after n - 1 steps chunk (me + 1) is complete.
  for (size_t s = 0; s + 1 < n; ++s) {
    Status st = exchange(comm, next, prev, tag, chunk((me + n - s) % n),
                         chunk((me + 2 * n - s - 1) % n), /*sum=*/true, scratch);
    if (!st.ok()) return failed(st);
  }
  // All-gather: each complete chunk travels once around the ring.
  for (size_t s = 0; s + 1 < n; ++s) {
    Status st = exchange(comm, next, prev, tag, chunk((me + 1 + n - s) % n),
                         chunk((me + n - s) % n), /*sum=*/false, scratch);
    if (!st.ok()) return failed(st);
  }
  return ok_status();
}

}  // namespace gp::exec
