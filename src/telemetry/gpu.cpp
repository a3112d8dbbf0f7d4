// GPU figures through NVML, loaded at run time: sluice neither links against nor needs the
// NVIDIA driver. Without libnvidia-ml (or without a GPU) the metrics say so with
// sluice_gpu_devices 0 and nothing else.
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "telemetry/metrics.hpp"

namespace sluice::telemetry {

namespace {

// The few NVML entry points used, with their C ABI (nvml.h is not needed to build).
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
using Device = void*;

struct Nvml {
  bool ok = false;
  std::string why;
  int (*device_count)(unsigned int*) = nullptr;
  int (*device_by_index)(unsigned int, Device*) = nullptr;
  int (*utilization)(Device, NvmlUtilization*) = nullptr;
  int (*memory)(Device, NvmlMemory*) = nullptr;

  Nvml() {
    void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      why = "libnvidia-ml.so.1 not found";
      return;
    }
    auto init = reinterpret_cast<int (*)()>(::dlsym(lib, "nvmlInit_v2"));
    device_count = reinterpret_cast<decltype(device_count)>(::dlsym(lib, "nvmlDeviceGetCount_v2"));
    device_by_index = reinterpret_cast<decltype(device_by_index)>(::dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    utilization = reinterpret_cast<decltype(utilization)>(::dlsym(lib, "nvmlDeviceGetUtilizationRates"));
    memory = reinterpret_cast<decltype(memory)>(::dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    if (!init || !device_count || !device_by_index || !utilization || !memory) {
      why = "libnvidia-ml lacks an expected function";
      return;
    }
    if (init() != 0) {
      why = "nvmlInit failed (no driver or no device)";
      return;
    }
    ok = true;
  }
};

const Nvml& nvml() {
  static const Nvml n;  // loaded once: at start (load_gpu_library), else at the first scrape
  return n;
}

}  // namespace

void load_gpu_library() { (void)nvml(); }

void render_gpu_metrics(std::string& o) {
  const Nvml& n = nvml();
  unsigned int count = 0;
  if (n.ok && n.device_count(&count) != 0) count = 0;
  metric_help(o, "sluice_gpu_devices", "gauge", "GPUs visible through NVML on this host (0 without NVML).");
  metric_line(o, "sluice_gpu_devices", "", count);
  if (count == 0) return;
  std::string util, mem_used, mem_total;
  for (unsigned int i = 0; i < count; ++i) {
    Device d = nullptr;
    if (n.device_by_index(i, &d) != 0) continue;
    const std::string label = "gpu=\"" + std::to_string(i) + "\"";
    NvmlUtilization u{};
    if (n.utilization(d, &u) == 0) metric_line(util, "sluice_gpu_utilization_ratio", label, u.gpu / 100.0);
    NvmlMemory m{};
    if (n.memory(d, &m) == 0) {
      metric_line(mem_used, "sluice_gpu_memory_used_bytes", label, static_cast<double>(m.used));
      metric_line(mem_total, "sluice_gpu_memory_total_bytes", label, static_cast<double>(m.total));
    }
  }
  metric_help(o, "sluice_gpu_utilization_ratio", "gauge", "GPU busy time over NVML's last sample period (0..1).");
  o += util;
  metric_help(o, "sluice_gpu_memory_used_bytes", "gauge", "GPU memory in use.");
  o += mem_used;
  metric_help(o, "sluice_gpu_memory_total_bytes", "gauge", "GPU memory in all.");
  o += mem_total;
}

}  // namespace sluice::telemetry
