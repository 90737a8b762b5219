// Writes NumPy .npy files (format 1.0, C order) for tests of the --data path.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace gp::testing {

// `descr` is NumPy's dtype string ("<f4", "<i8"); `bytes` the elements in C order.
inline bool write_npy(const std::string& path, const std::string& descr,
                      const std::vector<int64_t>& shape, const void* bytes, size_t size,
                      bool fortran = false) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = "{'descr': '" + descr +
                       "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': (" +
                       dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const unsigned char prefix[10] = {0x93,
                                    'N',
                                    'U',
                                    'M',
                                    'P',
                                    'Y',
                                    1,
                                    0,
                                    static_cast<unsigned char>(header.size() & 0xff),
                                    static_cast<unsigned char>(header.size() >> 8)};
  bool ok = std::fwrite(prefix, 1, 10, f) == 10 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            std::fwrite(bytes, 1, size, f) == size;
  return std::fclose(f) == 0 && ok;
}

template <typename T>
bool write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const std::vector<T>& values) {
  return write_npy(path, descr, shape, values.data(), values.size() * sizeof(T));
}

}  // namespace gp::testing
