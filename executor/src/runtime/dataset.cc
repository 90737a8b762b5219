// NpyDataset: memory-mapped .npy arrays as graph inputs, with a seeded per-epoch permutation.
#include "gp/exec/dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "gp/common/file_read.h"
#include "gp/exec/init.h"

namespace gp::exec {

struct NpyDataset::Array {
  std::string path;
  void* map = nullptr;
  size_t map_bytes = 0;
  const unsigned char* data = nullptr;  // first element
  int64_t rows = 0;
  int64_t per_sample = 0;  // elements
  int item_bytes = 4;      // 4 (float32, int32) or 8 (int64)
  bool is_int = false;
  bool ragged = false;          // ids padded with -1 from ids and offsets files
  std::vector<int64_t> padded;  // their values, [rows, per_sample] (data points here)

  ~Array() {
    if (map != nullptr) munmap(map, map_bytes);
  }
};

namespace {

struct NpyHeader {
  std::string descr;
  bool fortran = false;
  std::vector<int64_t> shape;
  size_t data_offset = 0;
};

// The value after `'key':` in the header dict, up to the next top-level comma (a tuple for the
// shape).
Result<std::string> dict_value(const std::string& dict, const std::string& key) {
  const size_t k = dict.find("'" + key + "'");
  if (k == std::string::npos) return invalid_argument("header has no '" + key + "'");
  size_t v = dict.find(':', k);
  if (v == std::string::npos) return invalid_argument("header: no value for '" + key + "'");
  ++v;
  while (v < dict.size() && dict[v] == ' ') ++v;
  size_t end = v;
  if (v < dict.size() && dict[v] == '(') {
    end = dict.find(')', v);
    if (end == std::string::npos) return invalid_argument("header: unterminated shape");
    return dict.substr(v + 1, end - v - 1);
  }
  while (end < dict.size() && dict[end] != ',' && dict[end] != '}') ++end;
  std::string s = dict.substr(v, end - v);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (s.size() >= 2 && (s.front() == '\'' || s.front() == '"')) s = s.substr(1, s.size() - 2);
  return s;
}

Result<NpyHeader> parse_header(const unsigned char* p, size_t size) {
  if (size < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) {
    return invalid_argument("not a .npy file (no \\x93NUMPY magic)");
  }
  const int major = p[6];
  size_t len = 0, start = 0;
  if (major == 1) {
    len = static_cast<size_t>(p[8]) | (static_cast<size_t>(p[9]) << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return invalid_argument("truncated header");
    len = static_cast<size_t>(p[8]) | (static_cast<size_t>(p[9]) << 8) |
          (static_cast<size_t>(p[10]) << 16) | (static_cast<size_t>(p[11]) << 24);
    start = 12;
  } else {
    return invalid_argument(".npy format version " + std::to_string(major) + " is not supported");
  }
  if (len > size - start || len > (1u << 20)) return invalid_argument("truncated header");
  const std::string dict(reinterpret_cast<const char*>(p + start), len);
  NpyHeader h;
  h.data_offset = start + len;
  GP_ASSIGN_OR_RETURN(h.descr, dict_value(dict, "descr"));
  auto fortran = dict_value(dict, "fortran_order");
  if (!fortran.ok()) return fortran.status();
  h.fortran = fortran->find("True") != std::string::npos;
  GP_ASSIGN_OR_RETURN(std::string shape, dict_value(dict, "shape"));
  for (size_t pos = 0; pos < shape.size();) {
    while (pos < shape.size() && (shape[pos] == ' ' || shape[pos] == ',')) ++pos;
    if (pos >= shape.size()) break;
    size_t used = 0;
    long long d = 0;
    try {
      d = std::stoll(shape.substr(pos), &used);
    } catch (const std::exception&) {
      return invalid_argument("header: shape (" + shape + ") is not a tuple of sizes");
    }
    if (d < 0 || d > (int64_t{1} << 40)) {
      return invalid_argument("header: shape (" + shape + ") has a size out of range");
    }
    h.shape.push_back(d);
    pos += used;
  }
  return h;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

Result<std::unique_ptr<NpyDataset::Array>> map_array(const std::string& path,
                                                     const model::OpNode& input) {
  auto a = std::make_unique<NpyDataset::Array>();
  a->path = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return invalid_argument(path + ": cannot open (" + std::strerror(errno) +
                            "); --data needs one <input op id>.npy per graph input, here for '" +
                            input.id() + "'");
  }
  // A FIFO or a device is refused naming it, never opened to wait for a writer.
  GP_ASSIGN_OR_RETURN(const RegularFile file, RegularFile::open(path));
  if (file.size() == 0) return invalid_argument(path + ": not a regular, non-empty file");
  a->map_bytes = static_cast<size_t>(file.size());
  a->map = mmap(nullptr, a->map_bytes, PROT_READ, MAP_PRIVATE, file.fd(), 0);
  if (a->map == MAP_FAILED) {
    a->map = nullptr;
    return invalid_argument(path + ": cannot map (" + std::strerror(errno) + ")");
  }
  const auto* bytes = static_cast<const unsigned char*>(a->map);
  auto header = parse_header(bytes, a->map_bytes);
  if (!header.ok()) return header.status().with_context(path);
  const auto& spec = input.proto->outputs(0);
  a->is_int = spec.dtype() == graphpipe::v1::DATA_TYPE_INT64 ||
              spec.dtype() == graphpipe::v1::DATA_TYPE_INT32;
  const std::string want = a->is_int ? "<i8 or <i4 (int64 ids or labels)" : "<f4 (float32)";
  if (a->is_int && (header->descr == "<i8" || header->descr == "<i4")) {
    a->item_bytes = header->descr == "<i8" ? 8 : 4;
  } else if (!a->is_int && header->descr == "<f4") {
    a->item_bytes = 4;
  } else {
    return invalid_argument(path + ": dtype '" + header->descr + "', input '" + input.id() +
                            "' needs " + want + " (convert with arr.astype(...))");
  }
  if (header->fortran) {
    return invalid_argument(path +
                            ": fortran_order is True; save a C-order array "
                            "(np.ascontiguousarray)");
  }
  std::vector<int64_t> per_sample(spec.shape().begin(), spec.shape().end());
  const auto& s = header->shape;
  const bool matches = !s.empty() && (std::vector<int64_t>(s.begin() + 1, s.end()) == per_sample ||
                                      (s.size() == 1 && per_sample == std::vector<int64_t>{1}));
  if (!matches) {
    std::vector<int64_t> expected = {-1};
    expected.insert(expected.end(), per_sample.begin(), per_sample.end());
    std::string e = shape_text(expected);
    e.replace(1, 2, "N");
    return invalid_argument(path + ": shape " + shape_text(s) + ", input '" + input.id() +
                            "' needs " + e + " (samples first, then its per-sample shape)");
  }
  a->rows = s[0];
  a->per_sample = model::num_elements(spec);
  const size_t need = header->data_offset + static_cast<size_t>(a->rows) *
                                                static_cast<size_t>(a->per_sample) *
                                                static_cast<size_t>(a->item_bytes);
  if (a->map_bytes < need) {
    return invalid_argument(path + ": " + std::to_string(a->map_bytes) + " bytes, the header's " +
                            shape_text(s) + " needs " + std::to_string(need));
  }
  a->data = bytes + header->data_offset;
  return a;
}

// A 1-D int64 (or int32) array file read whole: the flat ids and the offsets of bags of varying
// length, as torch's nn.EmbeddingBag takes them.
Result<std::vector<int64_t>> read_int_vector(const std::string& path, const std::string& role) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return invalid_argument(path + ": cannot read (" + std::strerror(errno) +
                            "); --data needs it for " + role);
  }
  // A FIFO or a device is refused naming it, never opened to wait for a writer.
  auto read = read_regular_file(path);
  if (!read.ok()) {
    return invalid_argument(read.status().message() + "; --data needs it for " + role);
  }
  const auto* data = reinterpret_cast<const unsigned char*>(read->data());
  const size_t size = read->size();
  auto header = parse_header(data, size);
  if (!header.ok()) return header.status().with_context(path);
  if ((header->descr != "<i8" && header->descr != "<i4") || header->shape.size() != 1 ||
      header->fortran) {
    return invalid_argument(path + ": dtype '" + header->descr + "', shape " +
                            shape_text(header->shape) + "; " + role +
                            " needs a 1-D int64 array (N,)");
  }
  const size_t item = header->descr == "<i8" ? 8 : 4;
  const auto n = static_cast<size_t>(header->shape[0]);
  if (size < header->data_offset + n * item) {
    return invalid_argument(path + ": " + std::to_string(size) + " bytes, the header's " +
                            shape_text(header->shape) + " needs " +
                            std::to_string(header->data_offset + n * item));
  }
  std::vector<int64_t> v(n);
  for (size_t k = 0; k < n; ++k) {
    const unsigned char* p = data + header->data_offset + k * item;
    if (item == 8) {
      std::memcpy(&v[k], p, 8);
    } else {
      int32_t x;
      std::memcpy(&x, p, 4);
      v[k] = x;
    }
  }
  return v;
}

// Ids input `input` whose bags vary in length (attrs.ragged_offsets: an imported
// nn.EmbeddingBag with offsets): `<id>.npy` holds the flat ids, `<offsets>.npy` the offset of each
// sample's bag in them (the last bag runs to the end), as torch takes them. Each sample gets its
// bag padded with -1 to the input's per-sample length.
Result<std::unique_ptr<NpyDataset::Array>> ragged_array(const std::string& dir,
                                                        const model::OpNode& input,
                                                        const std::string& offsets_name,
                                                        int64_t range) {
  namespace fs = std::filesystem;
  const std::string ids_path = (fs::path(dir) / (input.id() + ".npy")).string();
  const std::string off_path = (fs::path(dir) / (offsets_name + ".npy")).string();
  GP_ASSIGN_OR_RETURN(auto ids, read_int_vector(ids_path, "the flat ids of '" + input.id() + "'"));
  GP_ASSIGN_OR_RETURN(auto offsets,
                      read_int_vector(off_path, "the offsets of the bags of '" + input.id() + "'"));
  const int64_t max_bag = model::num_elements(input.proto->outputs(0));
  const auto num_ids = static_cast<int64_t>(ids.size());
  auto a = std::make_unique<NpyDataset::Array>();
  a->path = ids_path;
  a->rows = static_cast<int64_t>(offsets.size());
  a->per_sample = max_bag;
  a->item_bytes = 8;
  a->is_int = a->ragged = true;
  a->padded.assign(offsets.size() * static_cast<size_t>(max_bag), -1);
  for (size_t s = 0; s < offsets.size(); ++s) {
    const int64_t begin = offsets[s];
    const int64_t end = s + 1 < offsets.size() ? offsets[s + 1] : num_ids;
    if ((s == 0 && begin != 0) || begin < 0 || end < begin || end > num_ids) {
      return invalid_argument(
          off_path + ": offset " + std::to_string(s) + " is " + std::to_string(begin) +
          (s + 1 < offsets.size() ? ", the next " : ", the ids end at ") + std::to_string(end) +
          "; offsets start at 0 and rise to at most the " + std::to_string(num_ids) + " ids of " +
          ids_path);
    }
    if (end - begin > max_bag) {
      return invalid_argument(ids_path + ": the bag of sample " + std::to_string(s) + " has " +
                              std::to_string(end - begin) + " ids, more than the " +
                              std::to_string(max_bag) + " per sample '" + input.id() +
                              "' holds (import with a larger --max-bag)");
    }
    for (int64_t k = begin; k < end; ++k) {
      const int64_t v = ids[static_cast<size_t>(k)];
      if (v < 0 || v >= range) {
        return invalid_argument(ids_path + ": element " + std::to_string(k) + " (sample " +
                                std::to_string(s) + ") is " + std::to_string(v) + ", outside [0, " +
                                std::to_string(range) + ") that '" + input.id() + "' accepts");
      }
      a->padded[s * static_cast<size_t>(max_bag) + static_cast<size_t>(k - begin)] = v;
    }
  }
  a->data = reinterpret_cast<const unsigned char*>(a->padded.data());
  return a;
}

// The samples of another stage's input, from its file's header alone (the offsets file's for
// ragged bags): ranks load only their own stage's inputs, yet every input must hold the same
// samples, or ranks would pair rows of different samples. Files that cannot be read are left
// to the rank that loads them, which names the problem.
std::optional<int64_t> header_samples(const std::string& dir, const model::OpNode& input) {
  std::string name = input.id();
  if (const auto r = input.proto->attrs().find("ragged_offsets"); r != input.proto->attrs().end()) {
    name = r->second.s();
  }
  const std::string path = (std::filesystem::path(dir) / (name + ".npy")).string();
  auto file = RegularFile::open(path);  // a FIFO is left to the rank that loads it
  if (!file.ok()) return std::nullopt;
  auto text = file->read_at(0, (1u << 20) + 12);
  if (!text.ok()) return std::nullopt;
  const auto* head = reinterpret_cast<const unsigned char*>(text->data());
  const auto header = parse_header(head, text->size());
  if (!header.ok() || header->shape.empty()) return std::nullopt;
  return header->shape[0];
}

int64_t load_id(const NpyDataset::Array& a, int64_t k) {
  if (a.item_bytes == 8) {
    int64_t v;
    std::memcpy(&v, a.data + k * 8, 8);
    return v;
  }
  int32_t v;
  std::memcpy(&v, a.data + k * 4, 4);
  return v;
}

// A bijection of [0, n) chosen by `key`: a 4-round Feistel network over the smallest even
// power-of-two domain >= n, walking the cycle until the value falls inside [0, n).
int64_t permute(int64_t x, int64_t n, uint64_t key) {
  int bits = 2;
  while ((int64_t{1} << bits) < n) bits += 2;
  const int half = bits / 2;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t v = static_cast<uint64_t>(x);
  do {
    uint64_t l = v >> half, r = v & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = hash_combine(hash_combine(key, round), r) & mask;
      const uint64_t next = l ^ f;
      l = r;
      r = next;
    }
    v = (l << half) | r;
  } while (v >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(v);
}

}  // namespace

NpyDataset::~NpyDataset() = default;

Result<std::unique_ptr<NpyDataset>> NpyDataset::open(const std::string& dir,
                                                     const model::Graph& graph,
                                                     const std::vector<int>& input_ops,
                                                     int64_t mini_batch, bool shuffle,
                                                     uint64_t seed) {
  if (!std::filesystem::is_directory(dir)) {
    return invalid_argument("--data " + dir + ": not a directory");
  }
  std::unique_ptr<NpyDataset> d(new NpyDataset());
  d->arrays_.resize(static_cast<size_t>(graph.num_ops()));
  d->mini_batch_ = mini_batch;
  d->shuffle_ = shuffle;
  d->seed_ = hash_combine(seed, std::string_view("data order"));
  std::string first;
  for (int i : input_ops) {
    const auto& op = graph.op(i);
    if (!op.info->is_input) continue;
    const std::string path = (std::filesystem::path(dir) / (op.id() + ".npy")).string();
    std::unique_ptr<Array> a;
    if (const auto r = op.proto->attrs().find("ragged_offsets"); r != op.proto->attrs().end()) {
      GP_ASSIGN_OR_RETURN(a, ragged_array(dir, op, r->second.s(), id_range(graph, op)));
    } else {
      GP_ASSIGN_OR_RETURN(a, map_array(path, op));
    }
    if (first.empty()) {
      first = path;
      d->samples_ = a->rows;
    } else if (a->rows != d->samples_) {
      return invalid_argument(path + ": " + std::to_string(a->rows) + " samples, but " + first +
                              " has " + std::to_string(d->samples_) +
                              " (every input needs the same samples)");
    }
    // (ragged_array checked its ids; integers only cast reads are numbers, any value.)
    if (a->is_int && !a->ragged && id_range(graph, op) != kAnyInteger) {
      const int64_t range = id_range(graph, op);
      const int64_t n = a->rows * a->per_sample;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t v = load_id(*a, k);
        if (v < 0 || v >= range) {
          return invalid_argument(path + ": element " + std::to_string(k) + " (sample " +
                                  std::to_string(k / a->per_sample) + ") is " + std::to_string(v) +
                                  ", outside [0, " + std::to_string(range) + ") that '" + op.id() +
                                  "' accepts");
        }
      }
    }
    d->arrays_[static_cast<size_t>(i)] = std::move(a);
  }
  if (!first.empty()) {
    for (int i = 0; i < graph.num_ops(); ++i) {
      const auto& op = graph.op(i);
      if (!op.info->is_input || d->arrays_[static_cast<size_t>(i)] != nullptr) continue;
      const std::optional<int64_t> rows = header_samples(dir, op);
      if (rows && *rows != d->samples_) {
        return invalid_argument("--data " + dir + ": '" + op.id() +
                                "' (another stage's input) has " + std::to_string(*rows) +
                                " samples, but " + first + " has " + std::to_string(d->samples_) +
                                " (every input needs the same samples)");
      }
    }
  }
  if (!first.empty() && d->samples_ < mini_batch) {
    return invalid_argument("--data " + dir + ": " + std::to_string(d->samples_) +
                            " samples, fewer than the mini-batch of " + std::to_string(mini_batch));
  }
  return d;
}

Result<std::unique_ptr<NpyDataset>> open_stage_data(const std::string& dir,
                                                    const model::Graph& graph,
                                                    const std::vector<int>& ops, int64_t mini_batch,
                                                    bool shuffle, uint64_t seed) {
  std::vector<int> inputs;
  for (int i : ops) {
    if (graph.op(i).info->is_input) inputs.push_back(i);
  }
  return NpyDataset::open(dir, graph, inputs, mini_batch, shuffle, seed);
}

int64_t NpyDataset::row_of(int64_t g) const {
  const int64_t pos = g % samples_;
  if (!shuffle_) return pos;
  const uint64_t epoch = static_cast<uint64_t>(g / samples_);
  return permute(pos, samples_, hash_combine(seed_, epoch));
}

void NpyDataset::fill(const model::OpNode& input, int64_t iteration, int64_t first_sample,
                      int64_t count, void* out) const {
  const Array& a = *arrays_[static_cast<size_t>(input.index)];
  const int64_t base = iteration * mini_batch_ + first_sample;
  for (int64_t s = 0; s < count; ++s) {
    const int64_t row = row_of(base + s);
    if (!a.is_int) {
      std::memcpy(static_cast<float*>(out) + s * a.per_sample, a.data + row * a.per_sample * 4,
                  static_cast<size_t>(a.per_sample) * 4);
      continue;
    }
    int64_t* dst = static_cast<int64_t*>(out) + s * a.per_sample;
    for (int64_t e = 0; e < a.per_sample; ++e) dst[e] = load_id(a, row * a.per_sample + e);
  }
}

std::optional<int64_t> dataset_samples(const std::string& dir, const model::Graph& graph) {
  for (int i = 0; i < graph.num_ops(); ++i) {
    if (!graph.op(i).info->is_input) continue;
    if (const auto rows = header_samples(dir, graph.op(i))) return rows;
  }
  return std::nullopt;
}

}  // namespace gp::exec
