//===- device.h - An accelerator a compiled program runs on -----*- C++ -*-===//
//
// The program shell (runProgram) keeps every tensor of the step in host
// memory: initial weights, batches, dumps. A program compiled for a device
// (--target cuda) hands runProgram a Device, and the shell mirrors each
// rank's tensors and arena in that device's memory, runs the step there,
// and copies back only what it prints or writes. Tensors a spec marks host
// (ArgSpec::host: offloaded optimizer state) stay in host memory, pinned
// through the device, and the step reads and writes them there. No CUDA
// header here: the CUDA backend implements this in runtime/cuda/device.cu.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_DEVICE_H
#define DSC_DEVICE_H

#include "dsc/comm.h"
#include "dsc/runtime.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dsc {

/// What a process of a distributed run (one process per GPU) knows.
struct DistributedInit {
  int rank = 0;
  int worldSize = 1;
  int groupSize = 1; // ranks that shard state (hybrid); else worldSize
  int localRank = 0; // picks the GPU: localRank % visible GPUs
  /// Rank 0 passes in the communicator's unique id; every other rank gets
  /// rank 0's back (over TCP: launch::exchangeId).
  std::function<Status(std::vector<uint8_t> &id)> exchangeId;
  /// Seconds a collective may take before the run is declared hung (0: no
  /// limit). The error names the collective.
  double timeoutSeconds = 0;
  /// The compiled manifest every call is checked against (may be null).
  const CollectiveSpec *manifest = nullptr;
  int numCollectives = 0;
};

class Device {
public:
  virtual ~Device() = default;
  virtual const char *name() const = 0; // "cuda"
  /// GPUs this process sees.
  virtual int count() const = 0;
  /// Binds the calling thread to rank `rank`, on GPU `device` (-1: rank %
  /// count()). Every call below acts for the bound rank.
  virtual Status bindRank(int rank, int device = -1) = 0;
  /// Threads that wait for the device sleep instead of spinning on a core,
  /// for the devices bound after the call: a program whose host does heavy
  /// work beside the device's (an offloaded optimizer) leaves it the core.
  /// The default: nothing to do.
  virtual void preferSleepingWaits() {}
  /// "NVIDIA H200 (GPU 0, 139.8 GiB)", for the banner.
  virtual std::string describe() = 0;
  /// Zero-filled device memory aligned to 256 bytes (never null, even for 0
  /// bytes).
  virtual Status allocate(size_t bytes, void **out) = 0;
  virtual void release(void *p) = 0;
  /// Zero-filled host memory the device copies to and from at full speed
  /// (pinned), aligned to 4096 bytes (never null, even for 0 bytes), freed
  /// by releaseHost. The default, for a device without pinned memory:
  /// plain host memory.
  virtual Status allocateHost(size_t bytes, void **out) {
    size_t rounded = std::max<size_t>((bytes + 4095) / 4096 * 4096, 4096);
    *out = std::aligned_alloc(4096, rounded);
    if (!*out)
      return Status::error(StatusCode::OutOfMemory,
                           "cannot allocate " + std::to_string(bytes) +
                               " bytes of host memory");
    std::memset(*out, 0, rounded);
    return Status();
  }
  virtual void releaseHost(void *p) { std::free(p); }
  /// Pins [p, p + bytes) of host memory allocated elsewhere, in place,
  /// until unpinHost(p); two ranges pinned at once must not share a page.
  /// The default: nothing to do.
  virtual Status pinHost(void *p, size_t bytes) {
    (void)p, (void)bytes;
    return Status();
  }
  virtual void unpinHost(void *p) { (void)p; }
  /// Copies ordered with the rank's compute stream; toHost returns when the
  /// bytes are in host memory.
  virtual Status toDevice(void *dst, const void *src, size_t bytes) = 0;
  virtual Status toHost(void *dst, const void *src, size_t bytes) = 0;
  /// Waits until the rank's work so far is done, collectives included; in
  /// a distributed run a collective still running after
  /// DistributedInit::timeoutSeconds is named and the run aborted.
  virtual Status synchronize() = 0;
  /// Runs one step of the bound rank, `enqueue` (which only issues work on
  /// the rank's stream), as a captured graph that is replayed each time the
  /// step comes with the same `key` (its buffers). `ran` false: nothing ran
  /// and the caller calls `enqueue` itself: the key's first step, or a
  /// step that cannot be replayed (`why` says why, once). Checks the
  /// replayed kernels make are reported by the next synchronize().
  virtual Status replayStep(const std::vector<const void *> &key,
                            const std::function<Status()> &enqueue, bool &ran,
                            std::string &why) {
    (void)key, (void)enqueue, (void)why;
    ran = false;
    return Status();
  }
  /// Bytes of device memory this process holds on the rank's GPU beyond
  /// what it held before the first rank was bound (tensors, arena, library
  /// workspaces, NCCL buffers), now and at its high-water mark.
  virtual Status memoryInUse(size_t &now, size_t &peak) = 0;
  /// The bound rank's library workspaces, part of memoryInUse: a GEMM
  /// library's fixed workspace, the scratch buffer the kernels share, and
  /// the call that asked for the scratch buffer's size.
  virtual void workspaces(size_t &fixedBytes, size_t &scratchBytes,
                          std::string &scratchFor) {
    fixedBytes = scratchBytes = 0;
    scratchFor.clear();
  }
  /// The bound rank's GPU: its index, and its free and total memory now.
  virtual Status memoryInfo(int &gpu, size_t &free, size_t &total) = 0;
  /// A communicator for an in-process rank whose tensors are on this
  /// device, built on `host` (the in-process one): it stages through host
  /// memory. Owned by the caller.
  virtual std::unique_ptr<Communicator> wrapInProcess(Communicator *host) = 0;
  /// The NCCL communicator of a distributed run (binds the rank first).
  virtual Status createDistributed(const DistributedInit &init,
                                   std::unique_ptr<Communicator> &out) = 0;
};

} // namespace dsc

#endif // DSC_DEVICE_H
