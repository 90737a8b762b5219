// A --data directory as a rank opens it: the input is a .npy file (after one selector byte) for
// one graph input of a small model, and after a line "#OFFSETS" the offsets file of a ragged
// input; both are written into a directory of this process in /dev/shm, then NpyDataset::open
// (header, dtype, shape, sample counts, id ranges, ragged offsets) and a few fills run on it.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "gp/exec/dataset.h"
#include "gp/model/builder.h"
#include "gp/model/graph.h"
#include "gp/model/op_attrs.h"

namespace fs = std::filesystem;

namespace {

// x [3] floats and ids [2] into an embedding of 5 rows, an MSE target of [4].
gp::model::Graph dense_model() {
  gp::model::GraphBuilder b("m", "");
  auto x = b.input("x", {3});
  auto ids = b.input("ids", {2}, graphpipe::v1::DATA_TYPE_INT64);
  auto e = b.embedding_bag("bag", ids, 5, 3);
  auto h = b.linear("fc", b.add("sum", {x, e}), 4);
  b.add_loss(b.mse_loss("loss", h, b.input("t", {4})));
  return std::move(gp::model::Graph::build(b.finish())).value();
}

// Up to 3 ids per sample from flat ids and offsets.npy, padded with -1.
gp::model::Graph ragged_model() {
  gp::model::GraphBuilder b("m", "");
  auto ids = b.input("ids", {3}, graphpipe::v1::DATA_TYPE_INT64);
  auto e = b.embedding_bag("bag", ids, 5, 2);
  for (auto& op : *b.model().mutable_ops()) {
    if (op.id() == "ids") gp::model::set_attr(op, "ragged_offsets", std::string_view("offsets"));
    if (op.id() == "bag") gp::model::set_attr(op, "padding_idx", int64_t{-1});
  }
  b.add_loss(b.mse_loss("loss", e, b.input("t", {2})));
  return std::move(gp::model::Graph::build(b.finish())).value();
}

void write(const fs::path& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const gp::model::Graph dense = dense_model();
  static const gp::model::Graph ragged = ragged_model();
  static const fs::path dir = "/dev/shm/gp-fuzz-npy-" + std::to_string(::getpid());
  const uint8_t selector = data[0];
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr std::string_view kSeparator = "\n#OFFSETS\n";
  const size_t cut = input.find(kSeparator);
  const std::string_view file = input.substr(0, cut);
  const std::string_view offsets =
      cut == std::string_view::npos ? std::string_view() : input.substr(cut + kSeparator.size());

  // Bit 0: the ragged model; bits 1-2: which input op gets the file.
  const gp::model::Graph& g = (selector & 1) != 0 ? ragged : dense;
  std::vector<int> inputs;
  for (const auto& op : g.ops()) {
    if (op.info->is_input) inputs.push_back(op.index);
  }
  const int op = inputs[(selector >> 1) % inputs.size()];
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return 0;
  write(dir / (g.op(op).id() + ".npy"), file);
  if ((selector & 1) != 0) write(dir / "offsets.npy", offsets);
  const bool shuffle = (selector & 8) != 0;
  auto d = gp::exec::NpyDataset::open(dir.string(), g, {op}, 2, shuffle, 7);
  if (d.ok()) {
    std::vector<int64_t> out(64);  // 2 samples of at most 4 elements, 8 bytes each
    for (int64_t it = 0; it < 3; ++it) (*d)->fill(g.op(op), it, 0, 2, out.data());
    (void)(*d)->row_of((*d)->samples() + 1);
  }
  fs::remove_all(dir, ec);
  return 0;
}
