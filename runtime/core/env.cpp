//===- env.cpp - the machine a program runs on, probed at run time --------===//
//
// The CUDA entry points are declared here, not included: the runtime does
// not depend on the toolkit's headers. The signatures are those of the CUDA
// 13 headers (cuda.h, cuda_runtime_api.h, cudnn_graph.h, cublasLt.h,
// nccl.h); the enums they return (CUresult, cudaError_t, ncclResult_t,
// nvmlReturn_t) are int-sized, 0 on success. NVML's header is not part of
// the toolkit; its entry points are those of NVML's API reference.
//
//===----------------------------------------------------------------------===//

#include "core/env.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <sched.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <unistd.h>

extern char **environ;

namespace dsc {
namespace {

// --- CUDA driver (cuda.h) ---------------------------------------------------
using CuResult = int; // CUresult, CUDA_SUCCESS = 0
using CuDevice = int; // CUdevice
constexpr int kCuAttrComputeCapabilityMajor = 75;
constexpr int kCuAttrComputeCapabilityMinor = 76;
using CuInitFn = CuResult (*)(unsigned int flags);
using CuDriverGetVersionFn = CuResult (*)(int *driverVersion);
using CuDeviceGetCountFn = CuResult (*)(int *count);
using CuDeviceGetFn = CuResult (*)(CuDevice *device, int ordinal);
using CuDeviceGetNameFn = CuResult (*)(char *name, int len, CuDevice dev);
using CuDeviceTotalMemFn = CuResult (*)(size_t *bytes, CuDevice dev);
using CuDeviceGetAttributeFn = CuResult (*)(int *pi, int attrib, CuDevice dev);
using CuDeviceGetPCIBusIdFn = CuResult (*)(char *pciBusId, int len,
                                           CuDevice dev);
using CuGetErrorNameFn = CuResult (*)(CuResult error, const char **pStr);
using CuGetErrorStringFn = CuResult (*)(CuResult error, const char **pStr);

// --- NVML
// ---------------------------------------------------------------------
using NvmlReturn = int; // nvmlReturn_t, NVML_SUCCESS = 0
struct NvmlDeviceSt;
using NvmlDevice = NvmlDeviceSt *; // nvmlDevice_t
struct NvmlMemory {                // nvmlMemory_t (version 1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
using NvmlInitFn = NvmlReturn (*)();
using NvmlShutdownFn = NvmlReturn (*)();
using NvmlSystemGetDriverVersionFn = NvmlReturn (*)(char *version,
                                                    unsigned int length);
using NvmlDeviceGetHandleByPciBusIdFn = NvmlReturn (*)(const char *pciBusId,
                                                       NvmlDevice *device);
using NvmlDeviceGetMemoryInfoFn = NvmlReturn (*)(NvmlDevice device,
                                                 NvmlMemory *memory);

// --- the libraries ----------------------------------------------------------
using CudaRuntimeGetVersionFn = int (*)(int *runtimeVersion); // cudaError_t
using CudnnGetVersionFn = size_t (*)();
using CublasLtGetVersionFn = size_t (*)();
using NcclGetVersionFn = int (*)(int *version); // ncclResult_t

/// dlopen's `soname` into `info`; the handle, or null (info.error says why).
void *openLibrary(const char *soname, LibraryInfo &info) {
  info.soname = soname;
  dlerror();
  void *handle = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
  if (!handle) {
    const char *err = dlerror();
    info.error = err ? err : "dlopen failed";
    return nullptr;
  }
  info.found = true;
  struct link_map *map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name &&
      map->l_name[0])
    info.path = map->l_name;
  return handle;
}

/// dlsym as a typed function pointer; null (and info.error set) if absent.
template <typename Fn>
Fn symbol(void *handle, const char *name, LibraryInfo &info) {
  dlerror();
  void *p = dlsym(handle, name);
  if (!p && info.error.empty()) {
    const char *err = dlerror();
    info.error = err ? err : std::string("no symbol ") + name;
  }
  return reinterpret_cast<Fn>(p);
}

/// "13.0" from 13000 (the CUDA driver's and runtime's encoding).
std::string cudaVersionText(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

/// "major.minor.patch" from major * base + minor * 100 + patch.
std::string mmpVersionText(int64_t v, int64_t base) {
  return std::to_string(v / base) + "." + std::to_string((v % base) / 100) +
         "." + std::to_string(v % 100);
}

std::string cuErrorText(void *handle, CuResult r) {
  LibraryInfo ignored;
  auto name = symbol<CuGetErrorNameFn>(handle, "cuGetErrorName", ignored);
  auto text = symbol<CuGetErrorStringFn>(handle, "cuGetErrorString", ignored);
  const char *n = nullptr, *s = nullptr;
  if (name)
    name(r, &n);
  if (text)
    text(r, &s);
  std::string out = n ? n : "CUDA error " + std::to_string(r);
  if (s)
    out += std::string(" (") + s + ")";
  return out;
}

void probeDriver(EnvInfo &env) {
  void *cuda = openLibrary("libcuda.so.1", env.driver);
  if (!cuda)
    return;
  if (auto getVersion = symbol<CuDriverGetVersionFn>(cuda, "cuDriverGetVersion",
                                                     env.driver)) {
    int v = 0;
    if (getVersion(&v) == 0) {
      env.driver.rawVersion = v;
      env.driver.version = cudaVersionText(v);
    }
  }
  auto init = symbol<CuInitFn>(cuda, "cuInit", env.driver);
  auto getCount =
      symbol<CuDeviceGetCountFn>(cuda, "cuDeviceGetCount", env.driver);
  auto get = symbol<CuDeviceGetFn>(cuda, "cuDeviceGet", env.driver);
  auto getName = symbol<CuDeviceGetNameFn>(cuda, "cuDeviceGetName", env.driver);
  auto totalMem =
      symbol<CuDeviceTotalMemFn>(cuda, "cuDeviceTotalMem_v2", env.driver);
  auto getAttr =
      symbol<CuDeviceGetAttributeFn>(cuda, "cuDeviceGetAttribute", env.driver);
  auto getBusId =
      symbol<CuDeviceGetPCIBusIdFn>(cuda, "cuDeviceGetPCIBusId", env.driver);
  if (!init || !getCount || !get || !getName || !totalMem || !getAttr)
    return;
  if (CuResult r = init(0)) {
    env.driverError = "cuInit: " + cuErrorText(cuda, r);
    return;
  }
  int count = 0;
  if (CuResult r = getCount(&count)) {
    env.driverError = "cuDeviceGetCount: " + cuErrorText(cuda, r);
    return;
  }
  for (int i = 0; i < count; ++i) {
    GpuInfo gpu;
    gpu.index = i;
    CuDevice dev = 0;
    if (get(&dev, i))
      continue;
    char name[256] = {};
    if (getName(name, sizeof(name) - 1, dev) == 0)
      gpu.name = name;
    size_t bytes = 0;
    if (totalMem(&bytes, dev) == 0)
      gpu.totalBytes = bytes;
    getAttr(&gpu.ccMajor, kCuAttrComputeCapabilityMajor, dev);
    getAttr(&gpu.ccMinor, kCuAttrComputeCapabilityMinor, dev);
    char bus[64] = {};
    if (getBusId && getBusId(bus, sizeof(bus) - 1, dev) == 0)
      gpu.pciBusId = bus;
    env.gpus.push_back(gpu);
  }
}

/// The kernel driver's version and each GPU's free memory, through NVML:
/// no CUDA context needed. GPUs are matched by PCI bus id, since NVML's
/// numbering ignores CUDA_VISIBLE_DEVICES.
void probeNvml(EnvInfo &env) {
  void *nvml = openLibrary("libnvidia-ml.so.1", env.nvml);
  if (!nvml)
    return;
  auto init = symbol<NvmlInitFn>(nvml, "nvmlInit_v2", env.nvml);
  auto shutdown = symbol<NvmlShutdownFn>(nvml, "nvmlShutdown", env.nvml);
  auto driverVersion = symbol<NvmlSystemGetDriverVersionFn>(
      nvml, "nvmlSystemGetDriverVersion", env.nvml);
  auto byBus = symbol<NvmlDeviceGetHandleByPciBusIdFn>(
      nvml, "nvmlDeviceGetHandleByPciBusId_v2", env.nvml);
  auto memInfo = symbol<NvmlDeviceGetMemoryInfoFn>(
      nvml, "nvmlDeviceGetMemoryInfo", env.nvml);
  if (!init || !shutdown)
    return;
  if (NvmlReturn r = init()) {
    env.nvml.error = "nvmlInit_v2 returned " + std::to_string(r);
    return;
  }
  char version[96] = {};
  if (driverVersion && driverVersion(version, sizeof(version) - 1) == 0)
    env.nvml.version = version;
  for (GpuInfo &gpu : env.gpus) {
    NvmlDevice dev = nullptr;
    NvmlMemory mem = {};
    if (!gpu.pciBusId.empty() && byBus && memInfo &&
        byBus(gpu.pciBusId.c_str(), &dev) == 0 && memInfo(dev, &mem) == 0)
      gpu.freeBytes = static_cast<int64_t>(mem.free);
  }
  shutdown();
}

void probeLibraries(EnvInfo &env) {
  if (void *h = openLibrary("libcudart.so.13", env.cudaRuntime))
    if (auto fn = symbol<CudaRuntimeGetVersionFn>(h, "cudaRuntimeGetVersion",
                                                  env.cudaRuntime)) {
      int v = 0;
      if (int r = fn(&v))
        env.cudaRuntime.error =
            "cudaRuntimeGetVersion returned " + std::to_string(r);
      else {
        env.cudaRuntime.rawVersion = v;
        env.cudaRuntime.version = cudaVersionText(v);
      }
    }
  if (void *h = openLibrary("libcudnn.so.9", env.cudnn))
    if (auto fn = symbol<CudnnGetVersionFn>(h, "cudnnGetVersion", env.cudnn)) {
      auto v = static_cast<int64_t>(fn());
      env.cudnn.rawVersion = v;
      // cuDNN 9: major * 10000 + minor * 100 + patch; 8: major * 1000 + ...
      env.cudnn.version = mmpVersionText(v, v >= 10000 ? 10000 : 1000);
    }
  if (void *h = openLibrary("libcublasLt.so.13", env.cublasLt))
    if (auto fn = symbol<CublasLtGetVersionFn>(h, "cublasLtGetVersion",
                                               env.cublasLt)) {
      auto v = static_cast<int64_t>(fn());
      env.cublasLt.rawVersion = v;
      // cuBLAS 12 and later: major * 10000 + ...; 11: major * 1000 + ...
      env.cublasLt.version = mmpVersionText(v, v >= 100000 ? 10000 : 1000);
    }
  if (void *h = openLibrary("libnccl.so.2", env.nccl))
    if (auto fn = symbol<NcclGetVersionFn>(h, "ncclGetVersion", env.nccl)) {
      int v = 0;
      if (int r = fn(&v))
        env.nccl.error = "ncclGetVersion returned " + std::to_string(r);
      else {
        env.nccl.rawVersion = v;
        // NCCL 2.9 and later: major * 10000 + ...; before: major * 1000 + ...
        env.nccl.version = mmpVersionText(v, v >= 10000 ? 10000 : 1000);
      }
    }
}

std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos)
    return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

/// The value of the first "key<sep>value" line of `path` whose key is `key`.
std::string fileField(const char *path, const std::string &key, char sep) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    size_t pos = line.find(sep);
    if (pos == std::string::npos || trim(line.substr(0, pos)) != key)
      continue;
    std::string v = trim(line.substr(pos + 1));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"')
      v = v.substr(1, v.size() - 2);
    return v;
  }
  return "";
}

void probeHost(HostInfo &host) {
  host.cpuModel = fileField("/proc/cpuinfo", "model name", ':');
  if (host.cpuModel.empty())
    host.cpuModel = "unknown";
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  host.logicalCpus = online > 0 ? static_cast<int>(online) : 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  host.usableCpus = sched_getaffinity(0, sizeof(set), &set) == 0
                        ? CPU_COUNT(&set)
                        : host.logicalCpus;
  struct sysinfo si = {};
  if (sysinfo(&si) == 0) {
    host.memTotalBytes = static_cast<uint64_t>(si.totalram) * si.mem_unit;
    host.memAvailableBytes =
        static_cast<uint64_t>(si.freeram + si.bufferram) * si.mem_unit;
  }
  // MemAvailable counts the page cache the kernel would give back.
  std::string avail = fileField("/proc/meminfo", "MemAvailable", ':');
  if (!avail.empty())
    host.memAvailableBytes = std::strtoull(avail.c_str(), nullptr, 10) * 1024;
  host.os = fileField("/etc/os-release", "PRETTY_NAME", '=');
  if (host.os.empty())
    host.os = "unknown";
  struct utsname u = {};
  if (uname(&u) == 0)
    host.kernel = std::string(u.sysname) + " " + u.release + " " + u.machine;
  host.libc = std::string("glibc ") + gnu_get_libc_version();
}

bool reportedVar(const std::string &name) {
  static const char *const kNames[] = {"CUDA_VISIBLE_DEVICES",
                                       "CUDA_DEVICE_ORDER",
                                       "CUDA_HOME",
                                       "CUDA_LAUNCH_BLOCKING",
                                       "CUDA_MODULE_LOADING",
                                       "LD_LIBRARY_PATH",
                                       "OMP_NUM_THREADS",
                                       "RANK",
                                       "LOCAL_RANK",
                                       "WORLD_SIZE",
                                       "LOCAL_WORLD_SIZE",
                                       "MASTER_ADDR",
                                       "MASTER_PORT",
                                       "DSRUN"};
  for (const char *n : kNames)
    if (name == n)
      return true;
  for (const char *prefix : {"NCCL_", "DSC_", "CUDNN_"})
    if (name.compare(0, std::strlen(prefix), prefix) == 0)
      return true;
  return false;
}

void probeVars(EnvInfo &env) {
  for (char **e = environ; e && *e; ++e) {
    const char *eq = std::strchr(*e, '=');
    if (!eq)
      continue;
    std::string name(*e, eq - *e);
    if (reportedVar(name))
      env.vars.emplace_back(name, eq + 1);
  }
  std::sort(env.vars.begin(), env.vars.end());
}

/// Shown even when unset: which GPUs a process sees, and NVLink multicast.
const char *const kAlwaysShownVars[] = {"CUDA_VISIBLE_DEVICES",
                                        "NCCL_NVLS_ENABLE"};

const std::string *findVar(const EnvInfo &env, const std::string &name) {
  for (const auto &v : env.vars)
    if (v.first == name)
      return &v.second;
  return nullptr;
}

std::string libraryText(const LibraryInfo &lib) {
  if (!lib.found)
    return "not found (" + lib.error + ")";
  std::string out = lib.version.empty() ? "version unknown" : lib.version;
  if (!lib.path.empty())
    out += "  " + lib.path;
  if (lib.version.empty() && !lib.error.empty())
    out += " (" + lib.error + ")";
  return out;
}

// --- JSON -------------------------------------------------------------------

std::string jsonString(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  return out + "\"";
}

/// Appends `"key": value` pairs to one object; `value` is JSON already.
class JsonObject {
public:
  JsonObject &raw(const std::string &key, const std::string &value) {
    body += (body.empty() ? "" : ", ") + jsonString(key) + ": " + value;
    return *this;
  }
  JsonObject &str(const std::string &key, const std::string &value) {
    return raw(key, jsonString(value));
  }
  /// null when empty.
  JsonObject &strOrNull(const std::string &key, const std::string &value) {
    return raw(key, value.empty() ? "null" : jsonString(value));
  }
  JsonObject &num(const std::string &key, int64_t value) {
    return raw(key, std::to_string(value));
  }
  JsonObject &boolean(const std::string &key, bool value) {
    return raw(key, value ? "true" : "false");
  }
  std::string text() const { return "{" + body + "}"; }

private:
  std::string body;
};

std::string libraryJson(const LibraryInfo &lib) {
  JsonObject o;
  o.str("soname", lib.soname).boolean("found", lib.found);
  o.strOrNull("path", lib.path).strOrNull("version", lib.version);
  o.raw("raw_version",
        lib.rawVersion < 0 ? "null" : std::to_string(lib.rawVersion));
  o.strOrNull("error", lib.error);
  return o.text();
}

} // namespace

EnvInfo probeEnvironment() {
  EnvInfo env;
  probeDriver(env);
  probeNvml(env);
  probeLibraries(env);
  probeHost(env.host);
  probeVars(env);
  return env;
}

std::string formatBytes(uint64_t bytes) {
  static const char *const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 4) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  if (unit == 0)
    std::snprintf(buf, sizeof(buf), "%llu B",
                  static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  return buf;
}

std::vector<EnvSection> envSections(const EnvInfo &env) {
  std::vector<EnvSection> out;

  EnvSection driver{"GPU driver", {}};
  driver.entries.emplace_back("CUDA driver", libraryText(env.driver));
  if (env.nvml.found)
    driver.entries.emplace_back(
        "kernel driver",
        env.nvml.version.empty()
            ? "unknown" +
                  (env.nvml.error.empty() ? "" : " (" + env.nvml.error + ")")
            : env.nvml.version);
  else
    driver.entries.emplace_back("NVML", libraryText(env.nvml));
  out.push_back(driver);

  EnvSection gpus{"GPUs", {}};
  if (env.gpus.empty()) {
    std::string why = !env.driver.found          ? "no CUDA driver"
                      : !env.driverError.empty() ? env.driverError
                                                 : "the driver sees no device";
    gpus.entries.emplace_back("count", "0, no GPU found (" + why + ")");
  } else {
    gpus.entries.emplace_back("count", std::to_string(env.gpus.size()));
    for (const GpuInfo &g : env.gpus) {
      std::string v = g.name + ", sm_" + std::to_string(g.ccMajor) +
                      std::to_string(g.ccMinor) + ", " +
                      formatBytes(g.totalBytes);
      if (g.freeBytes >= 0)
        v += " (" + formatBytes(static_cast<uint64_t>(g.freeBytes)) + " free)";
      if (!g.pciBusId.empty())
        v += ", " + g.pciBusId;
      gpus.entries.emplace_back("GPU " + std::to_string(g.index), v);
    }
  }
  out.push_back(gpus);

  EnvSection libs{"CUDA libraries", {}};
  libs.entries.emplace_back("CUDA runtime", libraryText(env.cudaRuntime));
  libs.entries.emplace_back("cuDNN", libraryText(env.cudnn));
  libs.entries.emplace_back("cuBLASLt", libraryText(env.cublasLt));
  libs.entries.emplace_back("NCCL", libraryText(env.nccl));
  out.push_back(libs);

  const HostInfo &h = env.host;
  EnvSection host{"host", {}};
  auto known = [](const std::string &s) { return s.empty() ? "unknown" : s; };
  host.entries.emplace_back("CPU", known(h.cpuModel));
  std::string cpus = std::to_string(h.logicalCpus) + " logical";
  if (h.usableCpus != h.logicalCpus)
    cpus += ", " + std::to_string(h.usableCpus) + " usable by this process";
  host.entries.emplace_back("CPUs", cpus);
  host.entries.emplace_back("memory", formatBytes(h.memTotalBytes) + " (" +
                                          formatBytes(h.memAvailableBytes) +
                                          " available)");
  host.entries.emplace_back("OS", known(h.os));
  host.entries.emplace_back("kernel", known(h.kernel));
  host.entries.emplace_back("libc", known(h.libc));
  out.push_back(host);

  EnvSection vars{"environment", {}};
  for (const char *name : kAlwaysShownVars)
    if (!findVar(env, name))
      vars.entries.emplace_back(name, "(not set)");
  for (const auto &v : env.vars) // set but empty still means something
    vars.entries.emplace_back(v.first, v.second.empty() ? "\"\"" : v.second);
  std::sort(vars.entries.begin(), vars.entries.end());
  out.push_back(vars);
  return out;
}

std::string formatSections(const std::vector<EnvSection> &sections) {
  size_t width = 0;
  for (const EnvSection &s : sections)
    for (const auto &e : s.entries)
      width = std::max(width, e.first.size());
  std::string out;
  for (const EnvSection &s : sections) {
    if (!out.empty())
      out += "\n";
    out += s.title + "\n";
    for (const auto &e : s.entries) {
      out += "  " + e.first + ":";
      if (!e.second.empty()) // no trailing blanks
        out.append(width - e.first.size() + 1, ' ').append(e.second);
      out += "\n";
    }
  }
  return out;
}

std::string formatEnvText(const EnvInfo &env) {
  return formatSections(envSections(env));
}

std::string formatEnvJson(const EnvInfo &env) {
  JsonObject root;
  JsonObject driver;
  driver.raw("library", libraryJson(env.driver));
  driver.strOrNull("init_error", env.driverError);
  root.raw("driver", driver.text());
  root.raw("nvml", libraryJson(env.nvml));

  std::string gpus = "[";
  for (const GpuInfo &g : env.gpus) {
    JsonObject o;
    o.num("index", g.index).str("name", g.name);
    o.strOrNull("pci_bus_id", g.pciBusId);
    o.str("compute_capability",
          std::to_string(g.ccMajor) + "." + std::to_string(g.ccMinor));
    o.num("total_bytes", static_cast<int64_t>(g.totalBytes));
    o.raw("free_bytes", g.freeBytes < 0 ? "null" : std::to_string(g.freeBytes));
    gpus += (gpus.size() > 1 ? ", " : "") + o.text();
  }
  root.raw("gpus", gpus + "]");

  JsonObject libs;
  libs.raw("cuda_runtime", libraryJson(env.cudaRuntime));
  libs.raw("cudnn", libraryJson(env.cudnn));
  libs.raw("cublaslt", libraryJson(env.cublasLt));
  libs.raw("nccl", libraryJson(env.nccl));
  root.raw("libraries", libs.text());

  const HostInfo &h = env.host;
  JsonObject host;
  host.str("cpu", h.cpuModel).num("logical_cpus", h.logicalCpus);
  host.num("usable_cpus", h.usableCpus);
  host.num("memory_total_bytes", static_cast<int64_t>(h.memTotalBytes));
  host.num("memory_available_bytes", static_cast<int64_t>(h.memAvailableBytes));
  host.str("os", h.os).str("kernel", h.kernel).str("libc", h.libc);
  root.raw("host", host.text());

  JsonObject vars;
  for (const char *name : kAlwaysShownVars)
    if (!findVar(env, name))
      vars.raw(name, "null");
  for (const auto &v : env.vars)
    vars.str(v.first, v.second);
  root.raw("environment", vars.text());
  return root.text();
}

} // namespace dsc
