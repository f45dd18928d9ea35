//===- env.h - the machine a program runs on, probed at run time -*- C++
//-*-===//
//
// What `dsc env` and a compiled program's --version report: the CUDA driver and
// its GPUs, the CUDA libraries a GPU program loads (runtime, cuDNN,
// cuBLASLt, NCCL) with their versions and the files they came from, the
// host, and the environment variables that change what a run does.
//
// Everything is found with dlopen/dlsym, so neither the runtime nor a
// program built for the CPU links CUDA, and a machine without a GPU, a
// driver or the libraries gets a report that says so instead of a failure.
// Probing creates no CUDA context: the driver is asked through cuInit and
// the cuDevice* queries, free memory through NVML.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CORE_ENV_H
#define DSC_RUNTIME_CORE_ENV_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dsc {

/// One shared library looked for with dlopen.
struct LibraryInfo {
  std::string soname; // what was dlopen'ed: "libcudnn.so.9"
  bool found = false;
  std::string path;        // the file it was loaded from, when found
  std::string version;     // "9.13.0"; empty when the version call failed
  int64_t rawVersion = -1; // the number the library returned, or -1
  /// Not found: dlerror's text. Found: why the version is missing, if it is.
  std::string error;
};

/// One GPU, as the CUDA driver numbers it (after CUDA_VISIBLE_DEVICES).
struct GpuInfo {
  int index = 0;
  std::string name;
  std::string pciBusId; // "0000:1B:00.0"; empty when unknown
  int ccMajor = 0, ccMinor = 0;
  uint64_t totalBytes = 0;
  int64_t freeBytes = -1; // from NVML; -1 when unknown
};

struct HostInfo {
  std::string cpuModel;
  int logicalCpus = 0; // online
  int usableCpus = 0;  // in this process's affinity mask
  uint64_t memTotalBytes = 0;
  uint64_t memAvailableBytes = 0;
  std::string os;     // /etc/os-release PRETTY_NAME
  std::string kernel; // uname: "Linux 6.8.0 x86_64"
  std::string libc;   // "glibc 2.39"
};

struct EnvInfo {
  /// libcuda.so.1; version is the CUDA version the driver supports
  /// (cuDriverGetVersion), "13.0".
  LibraryInfo driver;
  /// cuInit's error when the driver is there but unusable (no device, a
  /// driver too old, ...); empty when it succeeded or was not reached.
  std::string driverError;
  /// libnvidia-ml.so.1; version is the kernel driver's, "580.65.06".
  LibraryInfo nvml;
  std::vector<GpuInfo> gpus;
  LibraryInfo cudaRuntime; // libcudart.so.13
  LibraryInfo cudnn;       // libcudnn.so.9
  LibraryInfo cublasLt;    // libcublasLt.so.13
  LibraryInfo nccl;        // libnccl.so.2
  HostInfo host;
  /// CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, LD_LIBRARY_PATH, NCCL_*,
  /// DSC_*, and the launcher's RANK, WORLD_SIZE, ...: those that are set,
  /// sorted by name.
  std::vector<std::pair<std::string, std::string>> vars;
};

/// Probes the machine. Never fails: what is missing is recorded as such.
/// Libraries that load stay loaded (unloading CUDA libraries is unsafe).
EnvInfo probeEnvironment();

/// A titled group of "name: value" lines.
struct EnvSection {
  std::string title;
  std::vector<std::pair<std::string, std::string>> entries;
};

/// The report as sections: "GPU driver", "GPUs", "CUDA libraries", "host",
/// "environment".
std::vector<EnvSection> envSections(const EnvInfo &env);

/// Sections as text: each title on its own line, then its entries indented
/// with the values aligned across all sections.
std::string formatSections(const std::vector<EnvSection> &sections);

/// formatSections(envSections(env)).
std::string formatEnvText(const EnvInfo &env);

/// The report as one JSON object (no trailing newline):
/// {"driver": {...}, "nvml": {...}, "gpus": [...], "libraries": {...},
///  "host": {...}, "environment": {...}}. Numbers unknown are null.
std::string formatEnvJson(const EnvInfo &env);

/// "12.0 GiB" (binary units, one decimal).
std::string formatBytes(uint64_t bytes);

} // namespace dsc

#endif // DSC_RUNTIME_CORE_ENV_H
