#include "gp/profile/device_kind.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace gp::profile {
namespace {

// Upper-case alphanumeric runs: "NVIDIA A100-SXM4-80GB" -> NVIDIA, A100, SXM4, 80GB.
std::vector<std::string> words(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      cur += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    } else if (!cur.empty()) {
      out.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

bool has_word(const std::vector<std::string>& ws, std::string_view w) {
  return std::find(ws.begin(), ws.end(), w) != ws.end();
}

}  // namespace

GpuDeviceKind gpu_device_kind(std::string_view gpu_name,
                              std::span<const graphpipe::v1::Cluster> clusters) {
  const auto gpu = words(gpu_name);
  const bool pcie = has_word(gpu, "PCIE");
  const graphpipe::v1::Cluster* match = nullptr;
  bool ambiguous = false;
  for (const auto& c : clusters) {
    if (c.device().type() != graphpipe::v1::DEVICE_TYPE_CUDA) continue;
    const auto kind = words(c.device().name());
    if (kind.empty() || !has_word(gpu, kind[0]) || has_word(kind, "PCIE") != pcie) continue;
    if (match == nullptr) {
      match = &c;
    } else if (match->device().name() != c.device().name()) {
      ambiguous = true;
    }
  }
  if (match != nullptr && !ambiguous) return {match->device().name(), match->name()};
  std::string slug;
  for (const auto& w : gpu) {
    if (!slug.empty()) slug += '-';
    for (char c : w) slug += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return {slug, ""};
}

}  // namespace gp::profile
