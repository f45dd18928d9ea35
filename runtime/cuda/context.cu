//===- context.cu - Per-rank CUDA state and checked calls -----------------===//

#include "cuda/context.h"

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace dsc::cuda {
namespace {

std::mutex ranksMutex;
std::map<int, std::unique_ptr<RankDevice>> &ranks() {
  static std::map<int, std::unique_ptr<RankDevice>> table;
  return table;
}
thread_local RankDevice *bound = nullptr;
std::atomic<bool> sleepingWaits{false};

bool envFlag(const char *name) {
  const char *v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

Status create(RankDevice &rd) {
  DSC_CUDA_CHECK(cudaSetDevice(rd.device));
  // A thread waiting for the GPU sleeps instead of spinning on a core that
  // an offloaded AdamW's threads need (Llama-3.2-1B offloaded on an H200:
  // 611 -> 561 ms a step with the graph, 579 -> 569 without,
  // bench/results/2026-12-03-h200-offload-7b.md).
  // A driver that cannot change an active context's flags keeps spinning:
  // a preference, not an error.
  if ((sleepingWaits.load() || envFlag("DSC_CUDA_BLOCKING_SYNC")) &&
      cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) != cudaSuccess)
    (void)cudaGetLastError();
  DSC_CUDA_CHECK(cudaStreamCreateWithFlags(&rd.compute, cudaStreamNonBlocking));
  DSC_CUDA_CHECK(cudaStreamCreateWithFlags(&rd.comm, cudaStreamNonBlocking));
  DSC_CUDA_CHECK(cublasLtCreate(&rd.lt));
  DSC_CUDA_CHECK(cudaMalloc(&rd.ltWorkspace, kGemmWorkspaceBytes));
  DSC_CUDA_CHECK(cudnnCreate(&rd.cudnn));
  DSC_CUDA_CHECK(cudnnSetStream(rd.cudnn, rd.compute));
  return Status();
}

} // namespace

void preferSleepingWaits() { sleepingWaits.store(true); }

Status bindRank(int rank, int device) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    return Status::error(
        StatusCode::InvalidArgument,
        std::string("rank ") + std::to_string(rank) +
            ": no CUDA device is visible (" +
            (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") +
            "); this program was compiled with --target cuda; check "
            "nvidia-smi and CUDA_VISIBLE_DEVICES, or compile with --target "
            "cpu");
  if (device < 0)
    device = rank % count;
  if (device >= count)
    return Status::error(StatusCode::InvalidArgument,
                         "rank " + std::to_string(rank) + ": GPU " +
                             std::to_string(device) + " is not visible (" +
                             std::to_string(count) + " visible)");
  std::lock_guard<std::mutex> lock(ranksMutex);
  auto &slot = ranks()[rank];
  if (!slot) {
    auto rd = std::make_unique<RankDevice>();
    rd->rank = rank;
    rd->device = device;
    bound = rd.get(); // so that messages name the rank
    if (Status s = create(*rd); !s.ok()) {
      bound = nullptr;
      return s;
    }
    slot = std::move(rd);
  }
  bound = slot.get();
  // The thread's current device, for allocations and launches.
  return check(cudaSetDevice(bound->device), "cudaSetDevice");
}

RankDevice &current() {
  if (!bound) {
    // A thread that never bound (a unit test, a one-rank program): rank 0.
    Status s = bindRank(0);
    if (!s.ok() || !bound) {
      static RankDevice none;
      return none;
    }
  }
  return *bound;
}

bool allowTf32() {
  static const bool on = envFlag("DSC_ALLOW_TF32");
  return on;
}

Status scratch(size_t bytes, void **out, const char *what) {
  RankDevice &rd = current();
  if (bytes > rd.scratchBytes) {
    if (rd.scratch) {
      // Kernels still in flight may read the old buffer.
      DSC_CUDA_CHECK(cudaStreamSynchronize(rd.compute));
      DSC_CUDA_CHECK(cudaFree(rd.scratch));
      rd.scratch = nullptr;
      rd.scratchBytes = 0;
    }
    size_t want = scratchBufferBytes(bytes);
    DSC_CUDA_CHECK(cudaMalloc(&rd.scratch, want));
    rd.scratchBytes = want;
    rd.scratchFor = what;
    ++rd.scratchGeneration;
  }
  *out = rd.scratch;
  return Status();
}

Offload::~Offload() {
  for (Marks *marks : {&copies, &copiesUp, &hostWrites, &hostTasks})
    for (auto &entry : *marks)
      cudaEventDestroy(entry.second.done);
  for (cudaEvent_t e : {fork, copy.join, host.join})
    if (e)
      cudaEventDestroy(e);
  for (cudaStream_t s : {copy.stream, host.stream})
    if (s)
      cudaStreamDestroy(s);
}

Status captureIdOf(cudaStream_t stream, unsigned long long &id) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  id = 0;
  DSC_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &id));
  if (status == cudaStreamCaptureStatusNone)
    id = 0;
  return Status();
}

namespace {

/// Offload streams and events are made before any capture (see offloadOf).
Status notWhileCapturing(const RankDevice &rd, const char *what) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  DSC_CUDA_CHECK(cudaStreamIsCapturing(rd.compute, &status));
  if (status == cudaStreamCaptureStatusNone)
    return Status();
  return callFailed(what, "it would be created while the step is captured "
                          "into a CUDA graph; the step's first run (never "
                          "captured) must make every offload call first");
}

Status createLane(Offload::Lane &lane) {
  DSC_CUDA_CHECK(
      cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking));
  DSC_CUDA_CHECK(cudaEventCreateWithFlags(&lane.join, cudaEventDisableTiming));
  return Status();
}

Status createOffload(Offload &o) {
  if (Status s = createLane(o.copy); !s.ok())
    return s;
  if (Status s = createLane(o.host); !s.ok())
    return s;
  DSC_CUDA_CHECK(cudaEventCreateWithFlags(&o.fork, cudaEventDisableTiming));
  return Status();
}

} // namespace

Status offloadOf(Offload *&out) {
  RankDevice &rd = current();
  if (!rd.offload) {
    if (Status s = notWhileCapturing(rd, "the offload streams"); !s.ok())
      return s;
    auto o = std::make_shared<Offload>();
    if (Status s = createOffload(*o); !s.ok())
      return s;
    rd.offload = std::move(o);
  }
  out = rd.offload.get();
  return Status();
}

Status markOf(Offload::Marks &marks, const void *key, const char *what,
              Offload::Mark *&out) {
  auto it = marks.find(key);
  if (it == marks.end()) {
    if (Status s = notWhileCapturing(current(), what); !s.ok())
      return s;
    cudaEvent_t e = nullptr;
    DSC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    it = marks.emplace(key, Offload::Mark{e}).first;
  }
  out = &it->second;
  return Status();
}

Status callFailed(const char *call, const std::string &what, StatusCode code) {
  std::string where;
  if (bound)
    where = " on rank " + std::to_string(bound->rank) + " (GPU " +
            std::to_string(bound->device) + ")";
  return Status::error(code,
                       std::string(call) + " failed" + where + ": " + what);
}

Status check(cudaError_t err, const char *call) {
  if (err == cudaSuccess)
    return Status();
  StatusCode code = err == cudaErrorMemoryAllocation
                        ? StatusCode::OutOfMemory
                        : StatusCode::InvalidArgument;
  std::string what =
      std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
  // A fault inside a kernel surfaces at the next call that waits, which is
  // rarely the op that caused it.
  bool kernelFault =
      err == cudaErrorIllegalAddress || err == cudaErrorLaunchFailure ||
      err == cudaErrorMisalignedAddress || err == cudaErrorIllegalInstruction ||
      err == cudaErrorHardwareStackError || err == cudaErrorAssert;
  static const bool sync = envFlag("DSC_CUDA_SYNC");
  if (kernelFault && !sync)
    what += " (raised by a kernel launched earlier; run with DSC_CUDA_SYNC=1 "
            "to have the op that launched it named)";
  return callFailed(call, what, code);
}

Status check(cublasStatus_t err, const char *call) {
  if (err == CUBLAS_STATUS_SUCCESS)
    return Status();
  return callFailed(call,
                    std::string("cuBLAS status ") + cublasLtGetStatusName(err) +
                        ": " + cublasLtGetStatusString(err),
                    err == CUBLAS_STATUS_ALLOC_FAILED
                        ? StatusCode::OutOfMemory
                        : StatusCode::InvalidArgument);
}

Status check(cudnnStatus_t err, const char *call) {
  if (err == CUDNN_STATUS_SUCCESS)
    return Status();
  return callFailed(call, std::string("cuDNN: ") + cudnnGetErrorString(err));
}

Status checkLaunch(const char *kernel) {
  if (Status s = check(cudaGetLastError(), kernel); !s.ok())
    return s;
  static const bool sync = envFlag("DSC_CUDA_SYNC");
  if (sync)
    return check(cudaStreamSynchronize(current().compute), kernel);
  return Status();
}

} // namespace dsc::cuda
