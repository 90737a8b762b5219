// Readers of the weights files `graphpipe-executor export` writes, for tests: safetensors (the
// header parsed as the format specifies) and .npz (zip local headers, zip64 extras included, and
// .npy format 1.0 float32 entries). Each returns the tensors by name, or a reason it cannot.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace gp::testing {

struct ReadTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

struct ReadWeights {
  std::string error;   // empty when read
  std::string header;  // safetensors: the JSON header, padding included
  std::map<std::string, ReadTensor> tensors;
  std::vector<std::string> order;  // entry order in the file
  bool zip64 = false;              // .npz: some local header has a zip64 extra field
};

inline ReadWeights failed(std::string why) {
  ReadWeights r;
  r.error = std::move(why);
  return r;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline uint64_t little_endian(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int k = bytes - 1; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(s[at + k]);
  return v;
}

inline std::vector<int64_t> parse_dims(const std::string& list) {
  std::vector<int64_t> dims;
  static const std::regex number("[0-9]+");
  for (std::sregex_iterator it(list.begin(), list.end(), number), end; it != end; ++it) {
    dims.push_back(std::stoll(it->str()));
  }
  return dims;
}

inline ReadWeights read_safetensors(const std::string& path) {
  ReadWeights r;
  const std::string s = read_bytes(path);
  if (s.size() < 8) return failed("shorter than 8 bytes");
  const uint64_t n = little_endian(s, 0, 8);
  if (n % 8 != 0 || 8 + n > s.size()) return failed("header length " + std::to_string(n));
  r.header = s.substr(8, n);
  const std::string data = s.substr(8 + n);
  static const std::regex entry(R"re("([^"]+)":\{"dtype":"([A-Z0-9]+)","shape":\[([0-9,]*)\],)re"
                                R"re("data_offsets":\[([0-9]+),([0-9]+)\]\})re");
  uint64_t covered = 0;
  for (std::sregex_iterator it(r.header.begin(), r.header.end(), entry), end; it != end; ++it) {
    const auto& m = *it;
    if (m[2] != "F32") return failed("dtype " + m[2].str());
    const uint64_t b = std::stoull(m[4]), e = std::stoull(m[5]);
    if (b != covered || e < b || e > data.size() || (e - b) % 4 != 0) {
      return failed("data_offsets of " + m[1].str());
    }
    covered = e;
    ReadTensor t{parse_dims(m[3]), std::vector<float>((e - b) / 4)};
    std::memcpy(t.values.data(), data.data() + b, e - b);
    r.order.push_back(m[1]);
    r.tensors[m[1]] = std::move(t);
  }
  if (covered != data.size()) return failed("data past the last tensor");
  return r;
}

inline ReadWeights read_npz(const std::string& path) {
  ReadWeights r;
  const std::string s = read_bytes(path);
  static const std::regex shape(R"re('shape': \(([0-9, ]*)\))re");
  size_t at = 0;
  while (at + 30 <= s.size() && little_endian(s, at, 4) == 0x04034b50u) {
    uint64_t size = little_endian(s, at + 22, 4);
    const size_t name_len = little_endian(s, at + 26, 2), extra_len = little_endian(s, at + 28, 2);
    const std::string name = s.substr(at + 30, name_len);
    for (size_t x = at + 30 + name_len; x + 4 <= at + 30 + name_len + extra_len;) {
      const uint64_t id = little_endian(s, x, 2), len = little_endian(s, x + 2, 2);
      if (id == 1) {
        r.zip64 = true;
        if (size == 0xFFFFFFFFu) size = little_endian(s, x + 4, 8);
      }
      x += 4 + len;
    }
    const size_t body = at + 30 + name_len + extra_len;
    if (little_endian(s, at + 8, 2) != 0 || body + size > s.size()) {
      return failed(name + ": compressed or truncated");
    }
    const std::string npy = s.substr(body, size);
    if (npy.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) != 0) {
      return failed(name + ": not .npy 1.0");
    }
    const size_t header_len = little_endian(npy, 8, 2);
    const std::string dict = npy.substr(10, header_len);
    std::smatch m;
    if (dict.find("'descr': '<f4'") == std::string::npos || !std::regex_search(dict, m, shape)) {
      return failed(name + ": header " + dict);
    }
    ReadTensor t{parse_dims(m[1]), std::vector<float>((size - 10 - header_len) / 4)};
    std::memcpy(t.values.data(), npy.data() + 10 + header_len, t.values.size() * 4);
    const std::string key = name.ends_with(".npy") ? name.substr(0, name.size() - 4) : name;
    r.order.push_back(key);
    r.tensors[key] = std::move(t);
    at = body + size;
  }
  if (r.tensors.empty()) return failed("no entries");
  return r;
}

}  // namespace gp::testing
