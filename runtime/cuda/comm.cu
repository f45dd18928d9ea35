//===- comm.cu - In-process (staged) and NCCL communicators ---------------===//

#include "comm/manifest.h"
#include "cuda/comm.h"
#include "cuda/context.h"

#include <nccl.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

namespace dsc::cuda {

//===----------------------------------------------------------------------===//
// Staged through host memory
//===----------------------------------------------------------------------===//

namespace {

class StagedComm : public Communicator {
public:
  explicit StagedComm(Communicator *host) : host_(host) {}
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  int groupRank(GridAxes axes) const override { return host_->groupRank(axes); }
  int groupSize(GridAxes axes) const override { return host_->groupSize(axes); }

  Status allReduce(const Tensor &in, const Tensor &out, GridAxes axes,
                   const char *what) override {
    return staged(in, out, what, [&](const Tensor &hi, const Tensor &ho) {
      return host_->allReduce(hi, ho, axes, what);
    });
  }
  Status allGather(const Tensor &in, const Tensor &out, GridAxes axes,
                   const char *what) override {
    return staged(in, out, what, [&](const Tensor &hi, const Tensor &ho) {
      return host_->allGather(hi, ho, axes, what);
    });
  }
  Status reduceScatter(const Tensor &in, const Tensor &out, GridAxes axes,
                       const char *what) override {
    return staged(in, out, what, [&](const Tensor &hi, const Tensor &ho) {
      return host_->reduceScatter(hi, ho, axes, what);
    });
  }

private:
  template <typename F>
  Status staged(const Tensor &in, const Tensor &out, const char *what, F run) {
    cudaStream_t s = stream();
    hostIn_.resize(std::max<size_t>(in.nbytes(), 1));
    hostOut_.resize(std::max<size_t>(out.nbytes(), 1));
    Tensor hi = in, ho = out;
    hi.data = hostIn_.data();
    ho.data = hostOut_.data();
    std::string call = std::string("staging collective \"") + what + "\"";
    if (in.nbytes())
      if (Status st = check(cudaMemcpyAsync(hi.data, in.data, in.nbytes(),
                                            cudaMemcpyDeviceToHost, s),
                            call.c_str());
          !st.ok())
        return st;
    if (Status st = check(cudaStreamSynchronize(s), call.c_str()); !st.ok())
      return st;
    if (Status st = run(hi, ho); !st.ok())
      return st;
    if (out.nbytes())
      if (Status st = check(cudaMemcpyAsync(out.data, ho.data, out.nbytes(),
                                            cudaMemcpyHostToDevice, s),
                            call.c_str());
          !st.ok())
        return st;
    // The host buffers are reused by the next collective.
    return check(cudaStreamSynchronize(s), call.c_str());
  }

  Communicator *host_;
  std::vector<char> hostIn_, hostOut_;
};

} // namespace

std::unique_ptr<Communicator> makeStagedComm(Communicator *host) {
  return std::make_unique<StagedComm>(host);
}

//===----------------------------------------------------------------------===//
// NCCL
//===----------------------------------------------------------------------===//

namespace {

Status checkNccl(ncclResult_t r, const char *call) {
  if (r == ncclSuccess || r == ncclInProgress)
    return Status();
  std::string what = ncclGetErrorString(r);
  if (const char *last = ncclGetLastError(nullptr); last && *last)
    what += std::string(" (") + last + ")";
  return callFailed(call, "NCCL: " + what);
}

#define DSC_NCCL_CHECK(expr)                                                   \
  do {                                                                         \
    if (::dsc::Status dsc_s_ = checkNccl((expr), #expr); !dsc_s_.ok())         \
      return dsc_s_;                                                           \
  } while (0)

bool ncclTypeOf(DType t, ncclDataType_t &out) {
  switch (t) {
  case DType::F32:
    out = ncclFloat32;
    return true;
  case DType::F64:
    out = ncclFloat64;
    return true;
  case DType::F16:
    out = ncclFloat16;
    return true;
  case DType::BF16:
    out = ncclBfloat16;
    return true;
  case DType::I64:
    out = ncclInt64;
    return true;
  case DType::I32:
    out = ncclInt32;
    return true;
  case DType::I8:
    out = ncclInt8;
    return true;
  case DType::U8:
  case DType::Bool:
    out = ncclUint8;
    return true;
  }
  return false;
}

const char *kindName(int k) {
  return k == 0 ? "all_reduce" : k == 1 ? "all_gather" : "reduce_scatter";
}

} // namespace

class NcclComm : public Communicator {
public:
  ~NcclComm() override {
    for (auto &p : pending_)
      cudaEventDestroy(p.done);
    for (cudaEvent_t e : freeEvents_)
      cudaEventDestroy(e);
    if (ready_)
      cudaEventDestroy(ready_);
    if (flag_)
      cudaFree(flag_);
    if (group_ && group_ != world_)
      ncclCommDestroy(group_);
    if (replicas_ && replicas_ != world_)
      ncclCommDestroy(replicas_);
    if (world_)
      ncclCommDestroy(world_);
  }

  Status init(const DistributedInit &init, const CollectiveSpec *manifest,
              int numCollectives) {
    rank_ = init.rank;
    size_ = init.worldSize;
    groupSize_ = init.groupSize > 0 ? init.groupSize : init.worldSize;
    checker_ = comm::ManifestChecker(manifest, manifest ? numCollectives : 0);
    std::vector<uint8_t> id(sizeof(ncclUniqueId));
    ncclUniqueId uid{};
    if (rank_ == 0) {
      DSC_NCCL_CHECK(ncclGetUniqueId(&uid));
      std::memcpy(id.data(), &uid, sizeof uid);
    }
    if (!init.exchangeId)
      return callFailed("NCCL init", "no way to exchange the unique id");
    if (Status s = init.exchangeId(id); !s.ok())
      return s;
    if (id.size() != sizeof uid)
      return callFailed("NCCL init", "the unique id from rank 0 has " +
                                         std::to_string(id.size()) +
                                         " bytes, want " +
                                         std::to_string(sizeof uid));
    std::memcpy(&uid, id.data(), sizeof uid);
    DSC_NCCL_CHECK(ncclCommInitRank(&world_, size_, uid, rank_));
    int G = groupSize_;
    if (G == size_) {
      group_ = world_;
    } else {
      DSC_NCCL_CHECK(
          ncclCommSplit(world_, rank_ / G, rank_ % G, &group_, nullptr));
      DSC_NCCL_CHECK(
          ncclCommSplit(world_, rank_ % G, rank_ / G, &replicas_, nullptr));
    }
    if (size_ / G == 1)
      replicas_ = nullptr; // one replica: axis 0 has one member
    DSC_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    return Status();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int groupRank(GridAxes axes) const override {
    switch (axes.mask & 3u) {
    case 3u:
      return rank_;
    case 2u:
      return rank_ % groupSize_;
    case 1u:
      return rank_ / groupSize_;
    default:
      return 0;
    }
  }
  int groupSize(GridAxes axes) const override {
    switch (axes.mask & 3u) {
    case 3u:
      return size_;
    case 2u:
      return groupSize_;
    case 1u:
      return size_ / groupSize_;
    default:
      return 1;
    }
  }

  Status allReduce(const Tensor &in, const Tensor &out, GridAxes axes,
                   const char *what) override {
    return issue(0, in, out, axes, what);
  }
  /// A max over one int of every process, on the compute stream once the
  /// step's collectives are done; not a call of the manifest.
  Status anyRank(bool local, bool &any) override {
    RankDevice &rd = current();
    if (!flag_)
      DSC_CUDA_CHECK(cudaMalloc(&flag_, sizeof(int)));
    int v = local ? 1 : 0;
    DSC_CUDA_CHECK(cudaMemcpyAsync(flag_, &v, sizeof v, cudaMemcpyHostToDevice,
                                   rd.compute));
    DSC_NCCL_CHECK(
        ncclAllReduce(flag_, flag_, 1, ncclInt32, ncclMax, world_, rd.compute));
    DSC_CUDA_CHECK(cudaMemcpyAsync(&v, flag_, sizeof v, cudaMemcpyDeviceToHost,
                                   rd.compute));
    DSC_CUDA_CHECK(cudaStreamSynchronize(rd.compute));
    any = v != 0;
    return Status();
  }
  Status allGather(const Tensor &in, const Tensor &out, GridAxes axes,
                   const char *what) override {
    return issue(1, in, out, axes, what);
  }
  Status reduceScatter(const Tensor &in, const Tensor &out, GridAxes axes,
                       const char *what) override {
    return issue(2, in, out, axes, what);
  }

  Status wait(const Tensor &out, const char *what) override {
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (it->out != out.data)
        continue;
      // The event stays queryable for awaitIdle until the step ends.
      DSC_CUDA_CHECK(cudaStreamWaitEvent(current().compute, it->done, 0));
      return Status();
    }
    return Status(); // already completed and recycled, or synchronous
  }

  /// See awaitIdle in comm.h.
  Status idle(double timeoutSeconds) {
    RankDevice &rd = current();
    auto start = std::chrono::steady_clock::now();
    cudaEvent_t mark = nullptr;
    DSC_CUDA_CHECK(cudaEventCreateWithFlags(&mark, cudaEventDisableTiming));
    struct Destroy {
      cudaEvent_t e;
      ~Destroy() { cudaEventDestroy(e); }
    } destroyMark{mark};
    DSC_CUDA_CHECK(cudaEventRecord(mark, rd.compute));
    for (int spins = 0;; ++spins) {
      cudaError_t q = cudaEventQuery(mark);
      if (q == cudaSuccess)
        break;
      if (q != cudaErrorNotReady)
        return check(q, "cudaEventQuery (end of step)");
      double waited = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - start)
                          .count();
      if (timeoutSeconds > 0 && waited > timeoutSeconds)
        return hung(waited);
      std::this_thread::sleep_for(
          std::chrono::microseconds(spins < 1000 ? 20 : 1000));
    }
    // Every collective of the step is done: recycle their events; the next
    // call is the next step's collective #0.
    checker_.beginStep();
    for (auto &p : pending_) {
      cudaError_t q = cudaEventQuery(p.done);
      if (q == cudaErrorNotReady) {
        DSC_CUDA_CHECK(cudaEventSynchronize(p.done));
      }
      freeEvents_.push_back(p.done);
    }
    pending_.clear();
    return Status();
  }

private:
  struct Pending {
    void *out;
    cudaEvent_t done;
    std::string what;
    int64_t index;
    int kind;
  };

  Status hung(double waited) {
    std::string which = "the compute stream";
    for (auto &p : pending_)
      if (cudaEventQuery(p.done) == cudaErrorNotReady) {
        which = std::string(kindName(p.kind)) + " \"" + p.what +
                "\" (collective #" + std::to_string(p.index) + " of the step)";
        break;
      }
    if (world_)
      ncclCommAbort(world_);
    if (group_ && group_ != world_)
      ncclCommAbort(group_);
    if (replicas_ && replicas_ != world_)
      ncclCommAbort(replicas_);
    world_ = group_ = replicas_ = nullptr;
    return callFailed(
        "NCCL collective",
        which + " has not completed after " + std::to_string(int(waited)) +
            " s; another rank has not reached it (crashed, stuck, or issuing "
            "a different collective). Raise DSC_COLLECTIVE_TIMEOUT if the "
            "step is just slow",
        StatusCode::IoError);
  }

  ncclComm_t commFor(uint32_t mask) const {
    switch (mask & 3u) {
    case 3u:
      return world_;
    case 2u:
      return group_;
    case 1u:
      return replicas_;
    default:
      return nullptr;
    }
  }

  Status issue(int kind, const Tensor &in, const Tensor &out, GridAxes axes,
               const char *what) {
    std::string call = std::string(kindName(kind)) + " \"" + what + "\"";
    auto fail = [&](const std::string &why) {
      return callFailed(call.c_str(), why);
    };
    // The manifest checker the in-process world uses too (comm/manifest.h);
    // idle() at the end of the step starts the next one at entry 0.
    int64_t index = 0;
    if (Status s = checker_.check(kindName(kind), in.dtype, in.numel(),
                                  out.numel(), axes.mask, what, index);
        !s.ok())
      return fail(s.message());
    int n = groupSize(axes);
    ncclDataType_t type;
    if (!ncclTypeOf(in.dtype, type) || in.dtype != out.dtype)
      return fail("unsupported dtypes " + describe(in) + " -> " +
                  describe(out));
    int64_t want = kind == 0   ? in.numel()
                   : kind == 1 ? in.numel() * n
                               : in.numel() / n;
    if (out.numel() != want || (kind == 2 && in.numel() % n))
      return fail(describe(in) + " -> " + describe(out) + " over a group of " +
                  std::to_string(n));
    RankDevice &rd = current();
    if (n == 1 || !commFor(axes.mask)) {
      // A group of one: the collective is a copy.
      if (out.data != in.data && in.nbytes())
        DSC_CUDA_CHECK(cudaMemcpyAsync(out.data, in.data, in.nbytes(),
                                       cudaMemcpyDeviceToDevice, rd.compute));
      return Status();
    }
    // The communication stream starts when the compute stream has produced
    // the input.
    DSC_CUDA_CHECK(cudaEventRecord(ready_, rd.compute));
    DSC_CUDA_CHECK(cudaStreamWaitEvent(rd.comm, ready_, 0));
    ncclComm_t c = commFor(axes.mask);
    switch (kind) {
    case 0:
      DSC_NCCL_CHECK(ncclAllReduce(in.data, out.data, size_t(in.numel()), type,
                                   ncclSum, c, rd.comm));
      break;
    case 1:
      DSC_NCCL_CHECK(ncclAllGather(in.data, out.data, size_t(in.numel()), type,
                                   c, rd.comm));
      break;
    default:
      DSC_NCCL_CHECK(ncclReduceScatter(in.data, out.data, size_t(out.numel()),
                                       type, ncclSum, c, rd.comm));
    }
    cudaEvent_t done;
    if (!freeEvents_.empty()) {
      done = freeEvents_.back();
      freeEvents_.pop_back();
    } else {
      DSC_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    }
    DSC_CUDA_CHECK(cudaEventRecord(done, rd.comm));
    // A newer collective into the same buffer supersedes an older one.
    for (auto &p : pending_)
      if (p.out == out.data)
        p.out = nullptr;
    pending_.push_back({out.data, done, what, index, kind});
    return Status();
  }

  int rank_ = 0, size_ = 1, groupSize_ = 1;
  comm::ManifestChecker checker_;
  ncclComm_t world_ = nullptr, group_ = nullptr, replicas_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  int *flag_ = nullptr; // anyRank's device word
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> freeEvents_;
};

Status makeNcclComm(const DistributedInit &init, const CollectiveSpec *manifest,
                    int numCollectives, NcclComm *&out) {
  auto c = std::make_unique<NcclComm>();
  if (Status s = c->init(init, manifest, numCollectives); !s.ok())
    return s;
  out = c.release();
  return Status();
}

Communicator *asCommunicator(NcclComm *comm) { return comm; }

Status awaitIdle(NcclComm *comm, double timeoutSeconds) {
  if (!comm)
    return check(cudaStreamSynchronize(current().compute),
                 "cudaStreamSynchronize");
  return comm->idle(timeoutSeconds);
}

void destroy(NcclComm *comm) { delete comm; }

} // namespace dsc::cuda
