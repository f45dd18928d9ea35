//===- context.h - The CUDA state of the rank a thread runs -----*- C++ -*-===//
//
// Each rank of a program owns a GPU (several in-process ranks may share
// one), a compute stream, a communication stream, a cuBLASLt and a cuDNN
// handle, a grow-only scratch buffer and, once it offloads, a copy stream
// and a host-task stream (Offload). A rank's thread binds to it with
// bindRank before it calls kernels; kernels reach it through current().
// No global mutable state is shared between ranks, so in-process ranks run
// their kernels concurrently.
//
// Errors: every CUDA, cuBLAS, cuDNN and NCCL call goes through one of the
// check functions below, whose message names the call, the rank and the
// device ("cudaMemcpyAsync failed on rank 1 (GPU 0): an illegal memory
// access was encountered"); the generated code adds the op and ONNX node.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CUDA_CONTEXT_H
#define DSC_RUNTIME_CUDA_CONTEXT_H

#include "dsc/runtime.h"
#include "dsc/workspaces.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dsc::cuda {

struct StepGraphs; // graph.cu
struct Offload;

/// A hostTask call site of a rank (offload.cu): what cudaLaunchHostFunc is
/// handed. It lives as long as the rank, since a graph captured from a step
/// calls it again on every replay.
struct HostTaskSite {
  Offload *offload = nullptr;
  std::function<Status()> fn; // the last hostTask call's
  std::string what;
  /// The tensors it reads and writes: the NVMe reads into them
  /// (cpu::nvmeRead, started by an earlier task) finish before fn runs.
  std::vector<Tensor> named;
  unsigned long long captureId = 0; // the capture that last launched it
  std::atomic<bool> pending{false}; // launched outside a capture, not run
};

/// A rank's copies between device and host memory and its host tasks
/// (offload.cu): two streams beside the compute stream, `copy` for the
/// copies and `host` for the host tasks, each forked from the compute stream
/// by `fork` and joined back by its `join`; per buffer (by data pointer) the
/// event of the last copy into it, of the last copy up out of it and of
/// the last host task that wrote it. Made by the rank's first offload call,
/// outside any capture (offloadOf), and kept as long as the rank; the events
/// are reused by every later step and replay.
struct Offload {
  struct Mark {
    cudaEvent_t done = nullptr;
    bool recorded = false;
    unsigned long long captureId = 0; // 0: recorded outside a capture
  };
  using Marks = std::map<const void *, Mark>;
  struct Lane {
    cudaStream_t stream = nullptr;
    cudaEvent_t join = nullptr; // recorded on it, waited for by compute
  };
  /// The last access on one lane to each byte range of host memory:
  /// begin -> [begin, end) and the event recorded after that access. The
  /// memory plan reuses the host frame, so a write into a range waits for
  /// what last read it on the other lane, whatever value lay there.
  struct Span {
    uintptr_t end = 0;
    cudaEvent_t done = nullptr; // a Mark's event, owned by its map
    unsigned long long captureId = 0;
  };
  using Spans = std::map<uintptr_t, Span>;
  Lane copy, host;
  cudaEvent_t fork = nullptr; // recorded on compute, waited for by a lane
  Marks copies;               // by the copy's destination
  Marks copiesUp;             // by a copy to the device's host source
  Marks hostWrites;           // by a tensor in a host task's `writes`
  Marks hostTasks;            // by HostTaskSite: recorded after each launch
  Spans hostTaskSpans;        // what host tasks read or wrote
  Spans copyUpSpans;          // what copies to the device read
  std::map<int, std::unique_ptr<HostTaskSite>> sites;
  /// The rank's first failed host task, set on CUDA's host-function thread
  /// and taken by Device::synchronize; later host tasks are skipped while
  /// it is set.
  std::mutex mu;
  std::atomic<bool> failed{false};
  Status failure;

  Offload() = default;
  Offload(const Offload &) = delete;
  Offload &operator=(const Offload &) = delete;
  ~Offload();
};

struct RankDevice {
  int rank = 0;
  int device = 0;
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;
  cublasLtHandle_t lt = nullptr;
  void *ltWorkspace = nullptr; // kGemmWorkspaceBytes of device memory
  cudnnHandle_t cudnn = nullptr;
  void *scratch = nullptr; // see scratch()
  size_t scratchBytes = 0;
  /// The call that asked for the current size (see scratch()).
  const char *scratchFor = "";
  /// Bumped each time the scratch buffer moves: a captured step that used
  /// the old one is captured again.
  uint64_t scratchGeneration = 0;
  std::shared_ptr<StepGraphs> graphs; // the captured steps (graph.h)
  std::shared_ptr<Offload> offload;   // null until the first offload call
};

/// Creates (once) the state of `rank` on GPU `rank % visible GPUs` (or
/// `device` when >= 0) and binds the calling thread to it.
Status bindRank(int rank, int device = -1);
/// Devices bound from now on wait by sleeping (cudaDeviceScheduleBlockingSync)
/// rather than spinning; also DSC_CUDA_BLOCKING_SYNC=1.
void preferSleepingWaits();
/// The state the calling thread is bound to; a thread that never bound is
/// bound to rank 0 on the first call.
RankDevice &current();
inline cudaStream_t stream() { return current().compute; }

/// Whether GEMMs may use TF32 (f32 inputs, 10-bit mantissa products). Off by
/// default, so f32 programs match PyTorch with
/// torch.backends.cuda.matmul.allow_tf32 = False; DSC_ALLOW_TF32=1 turns it on.
bool allowTf32();

/// A device buffer of at least `bytes` for the current call only (a GEMM's
/// or convolution's workspace, partial sums): valid until the next scratch()
/// call on the same rank. Growing it waits for the rank's stream first.
/// `what` names the call (the program's memory line names the largest).
Status scratch(size_t bytes, void **out, const char *what);

/// The bound rank's offload state, its streams and fork/join events made on
/// first use. Made while the compute stream is capturing: an error (a
/// step's first run is never captured and makes them).
Status offloadOf(Offload *&out);
/// The mark of `key` in `marks` (Offload::copies or hostWrites), its event
/// made on first use (same rule; `what` names it in the error).
Status markOf(Offload::Marks &marks, const void *key, const char *what,
              Offload::Mark *&out);
/// The capture `stream` is in (0: none).
Status captureIdOf(cudaStream_t stream, unsigned long long &id);
/// Waits for the bound rank's offload streams (if it has them), then returns
/// and clears the first failure of its host tasks (offload.cu).
Status awaitOffload();

/// The message of a failed call: "<call> failed on rank R (GPU D): <what>".
Status callFailed(const char *call, const std::string &what,
                  StatusCode code = StatusCode::InvalidArgument);
Status check(cudaError_t err, const char *call);
Status check(cublasStatus_t err, const char *call);
Status check(cudnnStatus_t err, const char *call);
/// After a kernel launch: the launch error if any; with DSC_CUDA_SYNC=1 also
/// waits for the stream, so a fault is reported by the call that caused it.
Status checkLaunch(const char *kernel);

} // namespace dsc::cuda

/// Returns from the enclosing function (which returns Status) when `expr`
/// (a cudaError_t, cublasStatus_t or cudnnStatus_t) is not success.
#define DSC_CUDA_CHECK(expr)                                                   \
  do {                                                                         \
    if (::dsc::Status dsc_s_ = ::dsc::cuda::check((expr), #expr);              \
        !dsc_s_.ok())                                                          \
      return dsc_s_;                                                           \
  } while (0)

/// Same for a kernel launch just issued (named `kernel` in messages).
#define DSC_CUDA_LAUNCHED(kernel)                                              \
  do {                                                                         \
    if (::dsc::Status dsc_s_ = ::dsc::cuda::checkLaunch(kernel); !dsc_s_.ok()) \
      return dsc_s_;                                                           \
  } while (0)

#endif // DSC_RUNTIME_CUDA_CONTEXT_H
