#include "gp/exec/device_info.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace gp::exec {

HostInfo query_host() {
  HostInfo info;
  info.logical_cores = static_cast<int>(std::thread::hardware_concurrency());
  info.cpu_model = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size())
        info.cpu_model = line.substr(colon + 2);
      break;
    }
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) info.memory_bytes = int64_t{pages} * page_size;
  return info;
}

// query_cuda() is the backend table's (backends.cc).

}  // namespace gp::exec
