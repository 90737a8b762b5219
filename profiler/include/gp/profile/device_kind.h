// The device kind a profile of a CUDA GPU is recorded for. The planner matches op records against
// the DeviceKind.name of the cluster it plans for, so a GPU's records should carry the name its
// cluster preset uses ("H200-SXM-141GB"), not the name the driver reports ("NVIDIA H200").
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "graphpipe/v1/cluster.pb.h"

namespace gp::profile {

struct GpuDeviceKind {
  std::string device_kind;
  std::string cluster;  // the preset it was taken from; empty when derived from the GPU name
};

// Presets name CUDA devices "<model>-<form factor>-<memory>" ("H200-SXM-141GB", "A100-SXM4-80GB");
// the driver reports e.g. "NVIDIA H200" or "NVIDIA A100-SXM4-80GB". A cluster's CUDA device
// matches when its model is a word of the GPU's name (case-insensitive), and a PCIe GPU matches
// only a PCIe device. With one matching device kind (several clusters may share it) that kind and
// the first such cluster; otherwise (none, or ambiguous) the GPU's name in lower case with
// '-' between words: "NVIDIA H200" -> "nvidia-h200".
GpuDeviceKind gpu_device_kind(std::string_view gpu_name,
                              std::span<const graphpipe::v1::Cluster> clusters);

}  // namespace gp::profile
