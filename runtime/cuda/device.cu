//===- device.cu - dsc::Device for CUDA GPUs ------------------------------===//

#include "cuda/comm.h"
#include "cuda/context.h"
#include "cuda/device.h"
#include "cuda/graph.h"

#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace dsc::cuda {
namespace {

std::string gib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(1 << 30));
  return buf;
}

class CudaDevice : public Device {
public:
  const char *name() const override { return "cuda"; }

  int count() const override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
      return 0;
    return n;
  }

  Status bindRank(int rank, int device) override {
    return cuda::bindRank(rank, device);
  }

  void preferSleepingWaits() override { cuda::preferSleepingWaits(); }

  std::string describe() override {
    RankDevice &rd = current();
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, rd.device) != cudaSuccess)
      return "GPU " + std::to_string(rd.device);
    return std::string(prop.name) + " (GPU " + std::to_string(rd.device) +
           ", " + gib(prop.totalGlobalMem) + ", sm_" +
           std::to_string(prop.major) + std::to_string(prop.minor) + ")";
  }

  Status allocate(size_t bytes, void **out) override {
    size_t rounded = std::max<size_t>((bytes + 255) / 256 * 256, 256);
    void *p = nullptr;
    if (Status s = check(cudaMalloc(&p, rounded), "cudaMalloc"); !s.ok())
      return Status::error(s.code(), s.message() + " (" +
                                         std::to_string(bytes) + " bytes)");
    if (Status s =
            check(cudaMemsetAsync(p, 0, rounded, stream()), "cudaMemsetAsync");
        !s.ok())
      return s;
    std::lock_guard<std::mutex> lock(mu_);
    Usage &u = usage_[current().rank];
    sizes_[p] = rounded;
    u.now += rounded;
    u.peak = std::max(u.peak, u.now + workspaces());
    *out = p;
    return Status();
  }

  void release(void *p) override {
    if (!p)
      return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sizes_.find(p);
      if (it != sizes_.end()) {
        usage_[current().rank].now -= it->second;
        sizes_.erase(it);
      }
    }
    cudaFree(p);
  }

  Status allocateHost(size_t bytes, void **out) override {
    size_t rounded = std::max<size_t>((bytes + 4095) / 4096 * 4096, 4096);
    void *p = nullptr;
    if (Status s = check(cudaHostAlloc(&p, rounded, cudaHostAllocPortable),
                         "cudaHostAlloc");
        !s.ok())
      return Status::error(s.code(), s.message() + " (" +
                                         std::to_string(bytes) + " bytes)");
    std::memset(p, 0, rounded);
    *out = p;
    return Status();
  }

  void releaseHost(void *p) override {
    if (p && cudaFreeHost(p) != cudaSuccess)
      (void)cudaGetLastError(); // not the next call's error
  }

  Status pinHost(void *p, size_t bytes) override {
    if (!bytes)
      return Status();
    if (Status s = check(cudaHostRegister(p, bytes, cudaHostRegisterPortable),
                         "cudaHostRegister");
        !s.ok())
      return Status::error(s.code(), s.message() + " (" +
                                         std::to_string(bytes) + " bytes)");
    return Status();
  }

  void unpinHost(void *p) override {
    if (p && cudaHostUnregister(p) != cudaSuccess)
      (void)cudaGetLastError();
  }

  Status toDevice(void *dst, const void *src, size_t bytes) override {
    if (!bytes)
      return Status();
    // Pageable host memory: the copy has left `src` when the call returns.
    return check(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()),
        "cudaMemcpyAsync (host to device)");
  }

  Status toHost(void *dst, const void *src, size_t bytes) override {
    if (Status s = synchronize(); !s.ok())
      return s;
    if (!bytes)
      return Status();
    if (Status s = check(
            cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()),
            "cudaMemcpyAsync (device to host)");
        !s.ok())
      return s;
    return check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  }

  Status synchronize() override {
    NcclComm *comm = nullptr;
    double timeout = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = nccl_.find(current().rank);
      if (it != nccl_.end()) {
        comm = it->second;
        timeout = timeout_;
      }
    }
    if (Status s = awaitIdle(comm, timeout); !s.ok())
      return s;
    // The copy and host streams, then a host task's failure (offload.cu).
    if (Status s = awaitOffload(); !s.ok())
      return s;
    if (Status s = deferredVerdicts(); !s.ok())
      return s;
    std::lock_guard<std::mutex> lock(mu_);
    Usage &u = usage_[current().rank];
    u.peak = std::max(u.peak, u.now + workspaces());
    return Status();
  }

  Status replayStep(const std::vector<const void *> &key,
                    const std::function<Status()> &enqueue, bool &ran,
                    std::string &why) override {
    return cuda::replayStep(key, enqueue, ran, why);
  }

  Status memoryInUse(size_t &now, size_t &peak) override {
    std::lock_guard<std::mutex> lock(mu_);
    Usage &u = usage_[current().rank];
    now = u.now + workspaces();
    peak = std::max(u.peak, now);
    return Status();
  }

  void workspaces(size_t &fixedBytes, size_t &scratchBytes,
                  std::string &scratchFor) override {
    RankDevice &rd = current();
    fixedBytes = kGemmWorkspaceBytes;
    scratchBytes = rd.scratchBytes;
    scratchFor = rd.scratchFor;
  }

  Status memoryInfo(int &gpu, size_t &free, size_t &total) override {
    gpu = current().device;
    return check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  }

  std::unique_ptr<Communicator> wrapInProcess(Communicator *host) override {
    return makeStagedComm(host);
  }

  Status createDistributed(const DistributedInit &init,
                           std::unique_ptr<Communicator> &out) override {
    if (Status s =
            cuda::bindRank(init.rank, init.localRank % std::max(count(), 1));
        !s.ok())
      return s;
    NcclComm *comm = nullptr;
    if (Status s = makeNcclComm(init, init.manifest, init.numCollectives, comm);
        !s.ok())
      return s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      nccl_[init.rank] = comm;
      timeout_ = init.timeoutSeconds;
    }
    out.reset(new Owned(this, init.rank, comm));
    return Status();
  }

private:
  /// The NCCL communicator handed out, forgotten by the device when freed.
  class Owned : public Communicator {
  public:
    Owned(CudaDevice *d, int rank, NcclComm *c) : d_(d), rank_(rank), c_(c) {}
    ~Owned() override {
      {
        std::lock_guard<std::mutex> lock(d_->mu_);
        d_->nccl_.erase(rank_);
      }
      destroy(c_);
    }
    Communicator &c() const { return *asCommunicator(c_); }
    int rank() const override { return c().rank(); }
    int size() const override { return c().size(); }
    int groupRank(GridAxes a) const override { return c().groupRank(a); }
    int groupSize(GridAxes a) const override { return c().groupSize(a); }
    Status allReduce(const Tensor &in, const Tensor &out, GridAxes a,
                     const char *what) override {
      return c().allReduce(in, out, a, what);
    }
    Status allGather(const Tensor &in, const Tensor &out, GridAxes a,
                     const char *what) override {
      return c().allGather(in, out, a, what);
    }
    Status reduceScatter(const Tensor &in, const Tensor &out, GridAxes a,
                         const char *what) override {
      return c().reduceScatter(in, out, a, what);
    }
    Status wait(const Tensor &out, const char *what) override {
      return c().wait(out, what);
    }
    Status anyRank(bool local, bool &any) override {
      return c().anyRank(local, any);
    }

  private:
    CudaDevice *d_;
    int rank_;
    NcclComm *c_;
  };

  struct Usage {
    size_t now = 0, peak = 0;
  };
  /// The bound rank's library workspaces (cuBLASLt, scratch).
  static size_t workspaces() {
    RankDevice &rd = current();
    return kGemmWorkspaceBytes + rd.scratchBytes;
  }

  std::mutex mu_;
  std::map<void *, size_t> sizes_;
  std::map<int, Usage> usage_;
  std::map<int, NcclComm *> nccl_;
  double timeout_ = 0;
};

} // namespace

Device *device() {
  static CudaDevice d;
  return &d;
}

} // namespace dsc::cuda
