// Safetensors and .npz writers for named float32 tensors.
#include "runtime/weights_out.h"

#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include "gp/common/json_writer.h"

namespace gp::exec {
namespace {

// Both formats store little-endian floats; the tensors are written from memory as they are.
static_assert(std::endian::native == std::endian::little,
              "the writers assume a little-endian host");

Status check_values(const NamedTensor& t) {
  uint64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 0) return invalid_argument("tensor '" + t.name + "': negative dimension");
    n *= static_cast<uint64_t>(d);
  }
  if (n != t.values.size()) {
    return invalid_argument("tensor '" + t.name + "': " + std::to_string(t.values.size()) +
                            " values for " + std::to_string(n) + " elements");
  }
  return ok_status();
}

std::vector<const NamedTensor*> by_name(const std::vector<NamedTensor>& tensors) {
  std::vector<const NamedTensor*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const NamedTensor* a, const NamedTensor* b) { return a->name < b->name; });
  return order;
}

Status io_error(const std::string& what, const std::string& path) {
  return Status(StatusCode::kPermissionDenied,
                "cannot " + what + " '" + path + "': " + std::strerror(errno));
}

// ---- .npz ------------------------------------------------------------------------------------

std::string npy_header(const std::vector<int64_t>& shape) {
  std::string dims;
  for (size_t k = 0; k < shape.size(); ++k) dims += (k ? ", " : "") + std::to_string(shape[k]);
  if (shape.size() == 1) dims += ",";  // a Python 1-tuple
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';  // data aligned to 64 bytes
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>((dict.size() >> 8) & 0xff);
  return out + dict;
}

// One .npy entry, read by libzip at zip_close: the header, then the tensor's bytes from where
// they are (no copy of the tensor).
struct NpyEntry {
  NpyEntry() { zip_error_init(&error); }
  ~NpyEntry() { zip_error_fini(&error); }
  NpyEntry(const NpyEntry&) = delete;
  NpyEntry& operator=(const NpyEntry&) = delete;

  std::string header;
  std::span<const float> values;
  bool size_known = true;
  uint64_t pos = 0;
  zip_error_t error;

  uint64_t size() const { return header.size() + values.size_bytes(); }
};

zip_int64_t npy_entry_source(void* state, void* data, zip_uint64_t len, zip_source_cmd_t cmd) {
  auto* e = static_cast<NpyEntry*>(state);
  switch (cmd) {
    case ZIP_SOURCE_OPEN:
      e->pos = 0;
      return 0;
    case ZIP_SOURCE_READ: {
      const uint64_t n = std::min<uint64_t>(len, e->size() - e->pos);
      auto* out = static_cast<char*>(data);
      for (uint64_t done = 0; done < n;) {
        const uint64_t at = e->pos + done;
        const char* from = at < e->header.size() ? e->header.data() + at
                                                 : reinterpret_cast<const char*>(e->values.data()) +
                                                       (at - e->header.size());
        const uint64_t part =
            at < e->header.size() ? std::min<uint64_t>(n - done, e->header.size() - at) : n - done;
        std::memcpy(out + done, from, part);
        done += part;
      }
      e->pos += n;
      return static_cast<zip_int64_t>(n);
    }
    case ZIP_SOURCE_CLOSE:
    case ZIP_SOURCE_FREE:
      return 0;
    case ZIP_SOURCE_STAT: {
      auto* st = ZIP_SOURCE_GET_ARGS(zip_stat_t, data, len, &e->error);
      if (st == nullptr) return -1;
      zip_stat_init(st);
      // Without a size up front libzip reserves zip64 fields in the local header.
      if (e->size_known) {
        st->size = e->size();
        st->valid |= ZIP_STAT_SIZE;
      }
      st->comp_method = ZIP_CM_STORE;
      st->valid |= ZIP_STAT_COMP_METHOD;
      return sizeof(*st);
    }
    case ZIP_SOURCE_ERROR:
      return zip_error_to_data(&e->error, data, len);
    case ZIP_SOURCE_SUPPORTS:
      return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE,
                                            ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, -1);
    default:
      zip_error_set(&e->error, ZIP_ER_OPNOTSUPP, 0);
      return -1;
  }
}

Status zip_failure(zip_t* z, const std::string& path, const std::string& what) {
  const std::string message = "--out " + path + ": " + what + ": " + zip_strerror(z);
  zip_discard(z);
  return Status(StatusCode::kPermissionDenied, message);
}

}  // namespace

Result<std::string> safetensors_header(const std::vector<NamedTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      json +=
          (json.back() == '{' ? "\"" : ",\"") + json_escape(k) + "\":\"" + json_escape(v) + "\"";
    }
    json += "}";
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const NamedTensor* t : by_name(tensors)) {
    if (t->name == "__metadata__" || !seen.insert(t->name).second) {
      return invalid_argument("tensor name '" + t->name + "' is " +
                              (seen.count(t->name) ? "given twice" : "reserved") +
                              " (safetensors names are unique)");
    }
    GP_RETURN_IF_ERROR(check_values(*t));
    std::string shape;
    for (int64_t d : t->shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    const uint64_t end = offset + t->values.size_bytes();
    json += (json.size() > 1 ? ",\"" : "\"") + json_escape(t->name) +
            "\":{\"dtype\":\"F32\",\"shape\":[" + shape + "],\"data_offsets\":[" +
            std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  for (int k = 0; k < 8; ++k) out[k] = static_cast<char>((json.size() >> (8 * k)) & 0xff);
  return out + json;
}

Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  GP_ASSIGN_OR_RETURN(const std::string header, safetensors_header(tensors, metadata));
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return io_error("write", tmp);
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (const NamedTensor* t : by_name(tensors)) {
    if (!ok) break;
    const size_t bytes = t->values.size_bytes();
    ok = bytes == 0 || std::fwrite(t->values.data(), 1, bytes, f) == bytes;
  }
  // Flushed to the disk before the rename: a crash leaves the old file or the new one, whole.
  ok = ok && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    const Status failed = io_error("write", tmp);
    std::remove(tmp.c_str());
    return failed;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const Status failed = io_error("rename '" + tmp + "' to", path);
    std::remove(tmp.c_str());
    return failed;
  }
  return ok_status();
}

Status write_npz(const std::string& path, const std::vector<NamedTensor>& tensors,
                 bool force_zip64) {
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    GP_RETURN_IF_ERROR(check_values(t));
    if (!seen.insert(t.name).second) {
      return invalid_argument("tensor name '" + t.name +
                              "' is given twice (.npz names are "
                              "unique)");
    }
  }
  int code = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  if (z == nullptr) {
    zip_error_t error;
    zip_error_init_with_code(&error, code);
    const std::string message = "--out " + path + ": " + zip_error_strerror(&error);
    zip_error_fini(&error);
    return Status(StatusCode::kPermissionDenied, message);
  }
  // The entries are read at zip_close, so they live until then.
  std::vector<std::unique_ptr<NpyEntry>> entries;
  for (const auto& t : tensors) {
    auto e = std::make_unique<NpyEntry>();
    e->header = npy_header(t.shape);
    e->values = t.values;
    e->size_known = !force_zip64;
    zip_source_t* source = zip_source_function(z, npy_entry_source, e.get());
    if (source == nullptr) return zip_failure(z, path, t.name);
    const zip_int64_t index = zip_file_add(z, (t.name + ".npy").c_str(), source, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(source);
      return zip_failure(z, path, t.name);
    }
    // Stored (the floats barely compress) and dated 1980-01-01: the same weights, the same file.
    if (zip_set_file_compression(z, static_cast<zip_uint64_t>(index), ZIP_CM_STORE, 0) != 0 ||
        zip_file_set_mtime(z, static_cast<zip_uint64_t>(index), 0, 0) != 0) {
      return zip_failure(z, path, t.name);
    }
    entries.push_back(std::move(e));
  }
  // libzip writes a temporary file beside `path` and renames it over `path`.
  if (zip_close(z) != 0) return zip_failure(z, path, "writing the archive");
  return ok_status();
}

}  // namespace gp::exec
