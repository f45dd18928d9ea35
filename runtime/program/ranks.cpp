//===- ranks.cpp - The ranks this process runs, and the step on each ------===//

#include "program/ranks.h"
#include "cpu/kernel_util.h"
#include "cpu/kernels.h"
#include "io/nvme.h"
#include "program/convert.h"

#include "dsc/workspaces.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <set>
#include <thread>

namespace dsc::program {

//===----------------------------------------------------------------------===//
// DeviceMirror
//===----------------------------------------------------------------------===//

DeviceMirror::~DeviceMirror() {
  for (void *p : memory)
    device->release(p);
  for (void *p : pinned)
    device->unpinHost(p);
  if (hostMemory)
    device->releaseHost(hostMemory);
}

Status DeviceMirror::create(Device *d, const ProgramSpec &spec,
                            const std::vector<Tensor> &hostArgs,
                            const std::vector<Tensor> &hostResults,
                            const std::vector<int> &aliasOf) {
  device = d;
  args.resize(hostArgs.size());
  results.resize(hostResults.size());
  for (size_t i = 0; i < hostArgs.size(); ++i)
    if (Status s =
            mirror(hostArgs[i], spec.args[i].host, spec.args[i].nvme, args[i]);
        !s.ok())
      return s;
  for (size_t i = 0; i < hostResults.size(); ++i) {
    if (aliasOf[i] >= 0) { // computed in place: its argument's storage
      results[i] = args[size_t(aliasOf[i])];
      continue;
    }
    if (Status s = mirror(hostResults[i], spec.results[i].host,
                          spec.results[i].nvme, results[i]);
        !s.ok())
      return s;
  }
  return allocateArenas(spec.arenaBytes, spec.hostArenaBytes);
}

/// `out` is the device copy of host tensor `h`, or `h` itself: pinned, or
/// (in an NVMe file) as it is: pinning would lock the file's pages in
/// memory, and the step only stages it through host memory.
Status DeviceMirror::mirror(const Tensor &h, bool onHost, bool inFile,
                            Tensor &out) {
  out = h;
  if (inFile)
    return Status();
  if (onHost)
    return pin(h);
  void *p = nullptr;
  if (Status s = device->allocate(h.nbytes(), &p); !s.ok())
    return s;
  memory.push_back(p);
  out.data = p;
  return Status();
}

Status DeviceMirror::pin(const Tensor &h) {
  if (!h.nbytes())
    return Status();
  if (Status s = device->pinHost(h.data, h.nbytes()); !s.ok())
    return Status::error(s.code(), "pinning a host tensor " + describe(h) +
                                       ": " + s.message());
  pinned.push_back(h.data);
  pinnedBytes += h.nbytes();
  return Status();
}

Status DeviceMirror::allocateArenas(size_t arenaBytes, size_t hostArenaBytes) {
  void *base = nullptr;
  if (Status s = device->allocate(arenaBytes, &base); !s.ok())
    return Status::error(s.code(), "the step's arena (" +
                                       std::to_string(arenaBytes) +
                                       " bytes): " + s.message());
  memory.push_back(base);
  if (Status s = arena.adopt(base, arenaBytes); !s.ok())
    return s;
  if (Status s = device->allocateHost(hostArenaBytes, &hostMemory); !s.ok())
    return Status::error(s.code(), "the step's host arena (" +
                                       std::to_string(hostArenaBytes) +
                                       " bytes): " + s.message());
  pinnedBytes += hostArenaBytes;
  return hostArena.adopt(hostMemory, hostArenaBytes);
}

Status DeviceMirror::upload(const std::vector<Tensor> &hostArgs, size_t i) {
  if (args[i].data == hostArgs[i].data)
    return Status(); // a host tensor: the step reads it where it is
  return device->toDevice(args[i].data, hostArgs[i].data, hostArgs[i].nbytes());
}

Status DeviceMirror::download(const Tensor &d, const Tensor &h) {
  if (d.data == h.data) // a host tensor: the step may still be writing it
    return device->synchronize();
  return device->toHost(h.data, d.data, h.nbytes());
}

//===----------------------------------------------------------------------===//
// Timing (--wall-clock-breakdown)
//===----------------------------------------------------------------------===//

void StepClock::mark(Phase phase) {
  if (device_)
    (void)device_->synchronize();
  Clock::time_point now = Clock::now();
  if (current_ >= 0 && current_ < 3)
    seconds[current_] += dsc::program::seconds(now - since_);
  current_ = phase == Phase::End ? -1 : int(phase);
  since_ = now;
}

namespace {

/// A communicator whose collectives add their host time to a StepClock.
class TimedComm final : public Communicator {
public:
  TimedComm(Communicator *inner, StepClock *clock)
      : inner_(inner), clock_(clock) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int groupRank(GridAxes axes) const override {
    return inner_->groupRank(axes);
  }
  int groupSize(GridAxes axes) const override {
    return inner_->groupSize(axes);
  }
  Status allReduce(const Tensor &in, const Tensor &out, GridAxes axes,
                   const char *what) override {
    return timed([&] { return inner_->allReduce(in, out, axes, what); });
  }
  Status allGather(const Tensor &in, const Tensor &out, GridAxes axes,
                   const char *what) override {
    return timed([&] { return inner_->allGather(in, out, axes, what); });
  }
  Status reduceScatter(const Tensor &in, const Tensor &out, GridAxes axes,
                       const char *what) override {
    return timed([&] { return inner_->reduceScatter(in, out, axes, what); });
  }
  Status wait(const Tensor &out, const char *what) override {
    return timed([&] { return inner_->wait(out, what); });
  }
  Status anyRank(bool local, bool &any) override {
    return inner_->anyRank(local, any);
  }

private:
  template <typename F> Status timed(F f) {
    Clock::time_point t0 = Clock::now();
    Status s = f();
    clock_->commSeconds += seconds(Clock::now() - t0);
    return s;
  }
  Communicator *inner_;
  StepClock *clock_;
};

} // namespace

Status Ranks::anyRank(bool local, bool &any) {
  any = local;
  if (!nccl_)
    return Status(); // one process: its decision is every rank's
  return nccl_->anyRank(local, any);
}

void Ranks::resetClocks() {
  for (auto &rs : ranks_)
    if (rs->clock)
      rs->clock->reset();
}

Communicator *Ranks::commOf(RankState &rs) {
  Communicator *comm = nullptr;
  if (world_)
    comm = job_.device ? staged_[size_t(rs.id)].get() : world_->comm(rs.id);
  else
    comm = nccl_.get();
  if (!comm || !rs.clock)
    return comm;
  if (!rs.timedComm)
    rs.timedComm = std::make_unique<TimedComm>(comm, rs.clock.get());
  return rs.timedComm.get();
}

//===----------------------------------------------------------------------===//
// Storage and initial values
//===----------------------------------------------------------------------===//

Status Ranks::allocate() {
  const int W = job_.W;
  // Results computed in place share their argument's storage, but under
  // --gradcheck, whose steps must all start from the same parameters.
  aliasOf_ = job_.layout.aliasOf;
  if (job_.o.gradcheck > 0)
    aliasOf_.assign(aliasOf_.size(), -1);
  // The global batch: rank r's Input is a view of rows [r B, (r + 1) B).
  for (int i : job_.layout.inputs) {
    TensorSpec t = spec_.args[i].type;
    if (W > 1)
      t.shape[0] *= W;
    Memory m;
    Tensor g;
    if (Status s = allocateTensor(
            t, std::string("input '") + spec_.args[i].name + "'", m, g);
        !s.ok())
      return s;
    slots_.push_back({spec_.args[i].name, g});
    inputMemory_.push_back(std::move(m));
  }
  std::vector<int> ids; // the ranks this process runs
  if (job_.distributed)
    ids.push_back(job_.env.rank);
  else
    for (int r = 0; r < W; ++r)
      ids.push_back(r);
  for (int r : ids) {
    auto rs = std::make_unique<RankState>();
    rs->id = r;
    std::string who = W > 1 ? format(" of rank %d", r) : "";
    rs->args.resize(size_t(spec_.numArgs));
    rs->argMemory.resize(size_t(spec_.numArgs));
    size_t inputIndex = 0;
    for (int i = 0; i < spec_.numArgs; ++i) {
      const ArgSpec &a = spec_.args[i];
      if (a.role == ArgRole::Input) {
        Tensor view = slots_[inputIndex++].tensor;
        size_t bytes = size_t(numelOf(a.type)) * dtypeSize(a.type.dtype);
        view.data = static_cast<char *>(view.data) + size_t(r) * bytes;
        view.shape[0] = a.type.shape[0];
        rs->args[i] = view;
        continue;
      }
      std::string what =
          std::string(argRoleName(a.role)) + " '" + a.name + "'" + who;
      if (Status s =
              a.nvme ? allocateNvmeTensor(a.type, job_.o.nvmePath, what,
                                          rs->argMemory[i], rs->args[i])
                     : allocateTensor(a.type, what, rs->argMemory[i],
                                      rs->args[i], a.host ? kPageBytes : 64);
          !s.ok())
        return s;
    }
    rs->results.resize(size_t(spec_.numResults));
    rs->resultMemory.resize(size_t(spec_.numResults));
    for (int i = 0; i < spec_.numResults; ++i) {
      const ResultSpec &res = spec_.results[i];
      if (aliasOf_[size_t(i)] >= 0) {
        rs->results[i] = rs->args[size_t(aliasOf_[size_t(i)])];
        continue;
      }
      std::string what = std::string(resultRoleName(res.role)) + " result '" +
                         res.name + "'" + who;
      if (Status s =
              res.nvme
                  ? allocateNvmeTensor(res.type, job_.o.nvmePath, what,
                                       rs->resultMemory[i], rs->results[i])
                  : allocateTensor(res.type, what, rs->resultMemory[i],
                                   rs->results[i], res.host ? kPageBytes : 64);
          !s.ok())
        return s;
    }
    if (!job_.device) { // a device program's arenas are the mirror's
      if (Status s = rs->arena.init(spec_.arenaBytes); !s.ok())
        return s;
      if (Status s = rs->hostArena.init(spec_.hostArenaBytes); !s.ok())
        return s;
    }
    if (job_.o.wallClockBreakdown)
      rs->clock = std::make_unique<StepClock>(job_.device);
    ranks_.push_back(std::move(rs));
  }
  return Status();
}

/// Host storage for bucket `b` packed whole (zeros in the padding).
Status Ranks::allocateBucket(int b, Memory &m, Tensor &flat) const {
  const BucketSpec &bk = spec_.buckets[b];
  return allocateTensor(TensorSpec{bk.dtype, 1, {bk.paddedNumel}},
                        std::string("bucket '") + bk.name + "'", m, flat);
}

Status Ranks::initialize(std::string &initWhat, bool weights) {
  const Options &o = job_.o;
  RankState &first = rank0();
  // Parameter shapes from the model of --init when it is one (the program
  // may run where the model it was compiled from is not), else that model.
  std::string shapeModel = spec_.modelPath ? spec_.modelPath : "";
  if (endsWith(lower(o.init), ".onnx"))
    shapeModel = o.init;
  shapes_ = bucketShapes(spec_, shapeModel);
  if (!weights) {
    setScalars(/*scaler=*/false);
    return Status();
  }
  // Rank 0's replicated parameters and buffers, and each sharded bucket
  // packed whole (zeros in the padding); then every rank gets the
  // replicated ones and its shard.
  std::vector<Memory> packed(size_t(spec_.numBuckets));
  std::vector<InitTarget> targets;
  for (int i = 0; i < spec_.numArgs; ++i) {
    const ArgSpec &a = spec_.args[i];
    if (a.role == ArgRole::Buffer ||
        (a.role == ArgRole::Param && a.bucket < 0)) {
      targets.push_back({a.role, a.name, a.type, first.args[i]});
    } else if (a.role == ArgRole::Param) {
      Memory &m = packed[size_t(a.bucket)];
      if (m)
        continue; // a bucket is one argument; be safe with two
      Tensor flat;
      if (Status s = allocateBucket(a.bucket, m, flat); !s.ok())
        return s;
      std::vector<io::NamedTensor> views;
      unpackBucket(spec_, shapes_, a.bucket, flat.data, views);
      for (size_t e = 0; e < views.size(); ++e)
        targets.push_back({ArgRole::Param, views[e].name,
                           shapes_[size_t(a.bucket)][e], views[e].tensor});
    }
  }
  if (Status s = initWeights(spec_, o, targets, initWhat); !s.ok())
    return s;
  for (auto &rsp : ranks_)
    for (int i = 0; i < spec_.numArgs; ++i) {
      const ArgSpec &a = spec_.args[i];
      const Tensor &dst = rsp->args[i];
      if (a.role == ArgRole::Param && a.bucket >= 0) {
        int64_t shard = numelOf(a.type);
        std::memcpy(dst.data,
                    static_cast<char *>(packed[size_t(a.bucket)].get()) +
                        size_t((rsp->id % job_.G) * shard) *
                            dtypeSize(a.type.dtype),
                    dst.nbytes());
      } else if (rsp.get() != &first &&
                 (a.role == ArgRole::Param || a.role == ArgRole::Buffer)) {
        std::memcpy(dst.data, first.args[i].data, dst.nbytes());
      }
    }
  setScalars(/*scaler=*/true);
  return Status();
}

Status Ranks::evictNvme() {
  for (auto &rs : ranks_) {
    std::vector<std::pair<const char *, Tensor>> inFiles;
    for (int i : job_.layout.nvme)
      inFiles.push_back({spec_.args[i].name, rs->args[size_t(i)]});
    for (size_t r = 0; r < rs->results.size(); ++r)
      if (spec_.results[r].nvme && aliasOf_[r] < 0)
        inFiles.push_back({spec_.results[r].name, rs->results[r]});
    for (const auto &[name, t] : inFiles)
      if (Status s = t.nbytes() ? io::nvmeEvict(t.data, t.nbytes()) : Status();
          !s.ok())
        return Status::error(s.code(), std::string("NVMe state '") + name +
                                           "': " + s.message());
  }
  return Status();
}

Status Ranks::fillComputeCopies() {
  for (auto &rs : ranks_)
    for (const auto &[copy, param] : job_.layout.computeCopies)
      if (Status s = cpu::cast(rs->args[size_t(param)], rs->args[size_t(copy)]);
          !s.ok())
        return Status::error(s.code(), std::string("compute copy '") +
                                           spec_.args[copy].name +
                                           "': " + s.message());
  return Status();
}

void Ranks::setScalars(bool scaler) {
  const Options &o = job_.o;
  lrHyper_ = NAN;
  const LossScalerSpec &ls = spec_.lossScaler;
  for (auto &rs : ranks_)
    for (int i = 0; i < spec_.numArgs; ++i) {
      const ArgSpec &a = spec_.args[i];
      if (a.role == ArgRole::Hyper)
        fillValue(rs->args[i], o.hypers.at(a.name));
      else if (a.role == ArgRole::Seed)
        setIntScalar(rs->args[i], static_cast<int64_t>(o.seed));
      else if (a.role == ArgRole::Scaler && scaler)
        fillValue(rs->args[i], std::strcmp(a.name, "loss_scale") == 0
                                   ? ls.initialScale
                               : std::strcmp(a.name, "hysteresis") == 0
                                   ? double(ls.hysteresis)
                                   : 0.0);
    }
  if (o.hypers.count("lr"))
    lrHyper_ = o.hypers.at("lr");
}

//===----------------------------------------------------------------------===//
// Devices
//===----------------------------------------------------------------------===//

/// Will it fit? What every rank needs (its tensors, the planned arena and
/// the library workspaces the compiler estimated), summed per GPU, against
/// that GPU's memory, before anything is allocated.
Status Ranks::checkFit(size_t rankBytes) {
  Device *device = job_.device;
  std::map<int, std::pair<size_t, int>> perGpu;       // bytes, ranks
  std::map<int, std::pair<size_t, size_t>> gpuMemory; // free, total
  for (auto &rs : ranks_) {
    if (Status s = device->bindRank(rs->id, rs->gpu); !s.ok())
      return s;
    int gpu = 0;
    size_t free = 0, total = 0;
    if (!device->memoryInfo(gpu, free, total).ok())
      continue; // no answer: the allocations will tell
    perGpu[gpu].first += rankBytes;
    perGpu[gpu].second += 1;
    gpuMemory[gpu] = {free, total};
  }
  for (const auto &[gpu, need] : perGpu) {
    auto [free, total] = gpuMemory[gpu];
    std::string what = format(
        "this step needs %s on GPU %d (%d rank%s x (tensors, arena and "
        "library workspaces of the compiled plan, %s))",
        humanBytes(double(need.first)).c_str(), gpu, need.second,
        need.second == 1 ? "" : "s", humanBytes(double(rankBytes)).c_str());
    if (need.first > total)
      return fail(what + format(", but it has %s in all; compile with a "
                                "smaller --micro-batch (and --accum-steps), a "
                                "higher --stage, or more ranks over more GPUs "
                                "(`dsc compile --report` shows the plan)",
                                humanBytes(double(total)).c_str()));
    if (need.first > free)
      job_.warn(what + format(", but only %s of its %s are free now; the "
                              "allocations may fail",
                              humanBytes(double(free)).c_str(),
                              humanBytes(double(total)).c_str()));
  }
  return Status();
}

Status Ranks::placeOnDevice(std::string &deviceWhat) {
  Device *device = job_.device;
  const launch::DistEnv &env = job_.env;
  RankState &first = rank0();
  if (job_.distributed) {
    DistributedInit init;
    init.rank = env.rank;
    init.worldSize = env.worldSize;
    init.groupSize = job_.G;
    init.localRank = env.localRank;
    init.timeoutSeconds = job_.timeout;
    init.manifest = spec_.collectives;
    init.numCollectives = spec_.numCollectives;
    double timeout = job_.timeout;
    init.exchangeId = [&env, timeout](std::vector<uint8_t> &id) {
      return launch::exchangeId(env, id, timeout > 0 ? timeout : 300);
    };
    if (Status s = device->createDistributed(init, nccl_); !s.ok())
      return Status::error(s.code(),
                           format("rank %d: ", env.rank) + s.message());
    first.gpu = env.localRank % std::max(device->count(), 1);
  }
  if (!device)
    return Status();
  size_t rankBytes =
      spec_.arenaBytes +
      (spec_.workspaceBytes ? spec_.workspaceBytes : kGemmWorkspaceBytes) +
      deviceTensorBytes();
  if (Status s = checkFit(rankBytes); !s.ok())
    return s;
  for (auto &rs : ranks_) {
    if (Status s = device->bindRank(rs->id, rs->gpu); !s.ok())
      return s;
    rs->dev = std::make_unique<DeviceMirror>();
    if (Status s =
            rs->dev->create(device, spec_, rs->args, rs->results, aliasOf_);
        !s.ok())
      return Status::error(s.code(), format("rank %d: ", rs->id) + s.message());
  }
  if (Status s = uploadAll(); !s.ok())
    return s;
  deviceWhat = device->describe();
  const int W = job_.W;
  if (job_.distributed)
    deviceWhat += format(" | rank %d of %d (%s), NCCL", env.rank, env.worldSize,
                         env.source.c_str());
  else if (W > 1)
    deviceWhat += format(" | %d in-process ranks over %d GPU%s", W,
                         std::min(W, device->count()),
                         std::min(W, device->count()) == 1 ? "" : "s");
  return Status();
}

Status Ranks::uploadAll() {
  if (!job_.device)
    return Status();
  for (auto &rs : ranks_) {
    if (Status s = job_.device->bindRank(rs->id, rs->gpu); !s.ok())
      return s;
    for (int i = 0; i < spec_.numArgs; ++i)
      if (spec_.args[i].role != ArgRole::Input)
        if (Status s = rs->dev->upload(rs->args, size_t(i)); !s.ok())
          return s;
  }
  return job_.device->bindRank(rank0().id, rank0().gpu);
}

void Ranks::startWorld() {
  if (job_.W > 1 && !job_.distributed) {
    world_ = std::make_unique<comm::InProcessWorld>(
        job_.W, job_.G, spec_.collectives, spec_.numCollectives, job_.timeout);
    if (job_.device)
      for (int r = 0; r < job_.W; ++r)
        staged_.push_back(job_.device->wrapInProcess(world_->comm(r)));
  }
}

//===----------------------------------------------------------------------===//
// The step
//===----------------------------------------------------------------------===//

Status Ranks::stepOn(RankState &rs, int64_t step, bool all) {
  RankContext ctx{nullptr, commOf(rs), step, static_cast<int64_t>(job_.o.seed),
                  rs.clock.get()};
  if (!rs.dev) {
    rs.arena.reset();
    rs.hostArena.reset();
    ctx.arena = &rs.arena;
    ctx.hostArena = &rs.hostArena;
    Status s = spec_.trainStep(ctx, rs.args.data(), rs.results.data());
    if (!s.ok()) { // a failed step may leave an NVMe read filling its arena
      io::nvmeDrain();
      return s;
    }
    // The step's NVMe writes-behind are on the disk before anything reads
    // the files through their mapping (a checkpoint, a dump), whatever
    // the step's own code joined.
    return io::nvmeFlush();
  }
  Device *device = job_.device;
  if (Status s = device->bindRank(rs.id, rs.gpu); !s.ok())
    return s;
  for (int i = 0; i < spec_.numArgs; ++i) {
    ArgRole role = spec_.args[i].role;
    if (all || role == ArgRole::Input || role == ArgRole::Step)
      if (Status s = rs.dev->upload(rs.args, size_t(i)); !s.ok())
        return s;
  }
  rs.dev->arena.reset();
  rs.dev->hostArena.reset();
  ctx.arena = &rs.dev->arena;
  ctx.hostArena = &rs.dev->hostArena;
  if (Status s = runOnDevice(rs, ctx); !s.ok()) {
    io::nvmeDrain(); // nothing may still fill the host arena
    return s;
  }
  // The results the progress line and the loss scaler read.
  const Layout &l = job_.layout;
  std::vector<int> shown = {l.loss, l.lr, l.gradNorm, l.overflow};
  shown.insert(shown.end(), l.scalerResults.begin(), l.scalerResults.end());
  for (int r : shown)
    if (r >= 0)
      if (Status s = rs.dev->download(rs.dev->results[size_t(r)],
                                      rs.results[size_t(r)]);
          !s.ok())
        return s;
  if (Status s = device->synchronize(); !s.ok())
    return s;
  return io::nvmeFlush(); // as above, once the host tasks have run
}

/// The step's kernels, replayed as a CUDA graph where the device can (one
/// process, one rank: a communicator's collectives and the phase timers
/// need the host inside the step).
Status Ranks::runOnDevice(RankState &rs, const RankContext &ctx) {
  auto enqueue = [&] {
    return spec_.trainStep(ctx, rs.dev->args.data(), rs.dev->results.data());
  };
  bool ran = false;
  // An offloaded optimizer's host tasks ran slower as graph nodes than
  // from their streams (Llama 1B on an H200: 971 against 823 ms a step,
  // bench/results/2026-12-02-h200-offload.md): off unless asked for.
  bool offloaded = ctx.hostArena && spec_.hostArenaBytes > 0;
  if (offloaded && !job_.o.cudaGraphGiven && !graphWarned_) {
    graphWarned_ = true;
    job_.note("the step runs without a CUDA graph: the offloaded "
              "optimizer's host work runs faster from its streams "
              "(--cuda-graph captures it anyway)");
  }
  if (job_.o.cudaGraph && (!offloaded || job_.o.cudaGraphGiven) &&
      !ctx.comm && !rs.clock) {
    // The step function and every buffer it is handed: the same key is
    // the same kernels on the same memory.
    std::vector<const void *> key = {
        reinterpret_cast<const void *>(spec_.trainStep), ctx.arena->base(),
        ctx.hostArena->base()};
    for (const Tensor &t : rs.dev->args)
      key.push_back(t.data);
    for (const Tensor &t : rs.dev->results)
      key.push_back(t.data);
    std::string why;
    if (Status s = job_.device->replayStep(key, enqueue, ran, why); !s.ok())
      return s;
    if (!why.empty() && !graphWarned_) {
      graphWarned_ = true;
      job_.note("the step runs without a CUDA graph: " + why);
    }
  }
  return ran ? Status() : enqueue();
}

std::vector<std::string> Ranks::runStep(int64_t step) {
  if (world_)
    return runWorldStep(step);
  Status s = stepOn(rank0(), step, /*all=*/false);
  if (s.ok())
    return {};
  return {(job_.distributed ? format("rank %d: ", job_.env.rank) : "") +
          format("step %" PRId64 ": ", step) + s.message()};
}

/// One step of the in-process ranks, shared with their threads: a rank
/// that never returns (it computes forever outside the collectives) is
/// left behind, and its thread must not outlive what it writes to.
struct WorldStep {
  std::mutex m;
  std::condition_variable cv;
  std::vector<Status> st;
  std::vector<char> done;
  int finished = 0;
};

std::vector<std::string> Ranks::runWorldStep(int64_t step) {
  const int W = job_.W;
  std::string at = format("step %" PRId64 ": ", step);
  world_->beginStep();
  auto ws = std::make_shared<WorldStep>();
  ws->st.resize(size_t(W));
  ws->done.assign(size_t(W), 0);
  comm::InProcessWorld *world = world_.get();
  auto body = [this, ws, world, step](int r) {
    RankState &rs = *ranks_[size_t(r)];
    Status s;
    try {
      s = stepOn(rs, step, /*all=*/false);
    } catch (const std::bad_alloc &) {
      s = Status::error(StatusCode::OutOfMemory, "out of host memory");
    } catch (const std::exception &e) {
      s = Status::error(StatusCode::InvalidArgument, e.what());
    }
    if (!s.ok())
      world->abort(r, s.message());
    else
      world->finishStep(r);
    std::lock_guard<std::mutex> lock(ws->m);
    ws->st[size_t(r)] = s;
    ws->done[size_t(r)] = 1;
    ++ws->finished;
    ws->cv.notify_all();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < W; ++r)
    threads.emplace_back(body, r);
  std::vector<int> hung = waitForRanks(*ws);
  std::vector<Status> st;
  {
    std::lock_guard<std::mutex> lock(ws->m);
    st = ws->st;
  }
  for (int r = 0; r < W; ++r) {
    if (std::find(hung.begin(), hung.end(), r) != hung.end())
      threads[size_t(r)].detach();
    else
      threads[size_t(r)].join();
  }
  // The rank whose failure aborted the world first, then any other rank
  // that failed on its own (not with "rank F failed: ...").
  std::vector<std::string> lines;
  auto line = [&](int r) {
    std::string m = st[size_t(r)].message();
    std::string prefix = "rank " + std::to_string(r) + ": ";
    if (m.compare(0, prefix.size(), prefix) == 0)
      m = m.substr(prefix.size());
    return prefix + at + m;
  };
  int root = world_->failedRank();
  if (root >= 0 && !st[size_t(root)].ok())
    lines.push_back(line(root));
  std::string secondary = "rank " + std::to_string(root) + " failed: ";
  for (int r = 0; r < W; ++r)
    if (r != root && !st[size_t(r)].ok() &&
        st[size_t(r)].message().find(secondary) == std::string::npos)
      lines.push_back(line(r));
  if (lines.empty() && root >= 0)
    lines.push_back("rank " + std::to_string(root) + ": " + at +
                    world_->failure());
  if (lines.empty() && spec_.collectives)
    for (int r = 0; r < W; ++r) {
      int64_t calls = world_->callsThisStep(r);
      if (calls != spec_.numCollectives)
        lines.push_back(format("rank %d: ", r) + at +
                        format("issued %" PRId64
                               " collectives, but the manifest has %d per "
                               "step",
                               calls, spec_.numCollectives));
    }
  if (!hung.empty())
    exitWithHungRanks(lines, hung, at);
  return lines;
}

/// Waits for every rank's step. Once the world has failed, the others
/// return from their collectives at once; a rank still in its step a grace
/// period later (the collective timeout, 5 to 60 s) is hung outside the
/// collectives: those ranks are returned.
std::vector<int> Ranks::waitForRanks(WorldStep &ws) {
  const int W = job_.W;
  double grace =
      job_.timeout > 0 ? std::min(60.0, std::max(5.0, job_.timeout)) : -1;
  std::unique_lock<std::mutex> lock(ws.m);
  bool failed = false, someDone = false;
  Clock::time_point failedAt, firstDoneAt;
  while (ws.finished < W) {
    ws.cv.wait_for(lock, std::chrono::milliseconds(50));
    if (ws.finished == W || grace < 0)
      continue;
    Clock::time_point now = Clock::now();
    if (ws.finished > 0 && !someDone) {
      someDone = true;
      firstDoneAt = now;
    }
    // Others done and none waiting for it in a collective: a rank still in
    // its step after the collective timeout is stuck (after the step's
    // last collective nothing else would ever time out).
    if (someDone && seconds(now - firstDoneAt) > job_.timeout + grace)
      break;
    if (!world_->aborted())
      continue;
    if (!failed) {
      failed = true;
      failedAt = now;
    }
    if (seconds(now - failedAt) > grace)
      break;
  }
  std::vector<int> hung;
  for (int r = 0; r < W; ++r)
    if (!ws.done[size_t(r)])
      hung.push_back(r);
  return hung;
}

/// Some rank never returned: report every rank, then end the process (its
/// thread cannot be stopped, and the process cannot exit while it runs).
void Ranks::exitWithHungRanks(std::vector<std::string> &lines,
                              const std::vector<int> &hung,
                              const std::string &at) {
  for (int r : hung)
    lines.push_back(format("rank %d: ", r) + at +
                    "did not return from its step while the other ranks "
                    "were done or had failed: it is stuck outside the "
                    "collectives (computing or waiting on its own)");
  for (const std::string &l : lines)
    std::fprintf(job_.err, "error: %s\n", l.c_str());
  std::fflush(job_.out);
  std::fflush(job_.err);
  std::_Exit(1);
}

void Ranks::setStep(int64_t step) {
  for (auto &rs : ranks_)
    for (int i = 0; i < spec_.numArgs; ++i)
      if (spec_.args[i].role == ArgRole::Step)
        setIntScalar(rs->args[i], step);
}

Status Ranks::swapUpdates() {
  const Layout &l = job_.layout;
  for (auto *list : {&l.updates, &l.inPlace})
    for (const auto &[r, a] : *list)
      if (aliasOf_[size_t(r)] < 0 && spec_.results[r].host)
        return fail(format("%s result '%s' is in host memory but not "
                           "computed in place of its argument, and host "
                           "tensors are never double-buffered (the "
                           "generated code is inconsistent; please report "
                           "it as a dsc bug)",
                           resultRoleName(spec_.results[r].role),
                           spec_.results[r].name));
  for (auto &rs : ranks_)
    for (auto *list : {&l.updates, &l.inPlace})
      for (const auto &[r, a] : *list) {
        if (aliasOf_[size_t(r)] >= 0)
          continue; // one storage: it already holds the update
        std::swap(rs->args[a].data, rs->results[r].data);
        if (rs->dev)
          std::swap(rs->dev->args[size_t(a)].data,
                    rs->dev->results[size_t(r)].data);
      }
  return Status();
}

//===----------------------------------------------------------------------===//
// What the host reads back
//===----------------------------------------------------------------------===//

Status Ranks::fetch(const std::vector<int> &which, bool args) {
  if (!job_.device)
    return Status();
  for (auto &rs : ranks_) {
    if (Status s = job_.device->bindRank(rs->id, rs->gpu); !s.ok())
      return s;
    for (int i : which) {
      const Tensor &d =
          args ? rs->dev->args[size_t(i)] : rs->dev->results[size_t(i)];
      const Tensor &h = args ? rs->args[size_t(i)] : rs->results[size_t(i)];
      if (Status s = rs->dev->download(d, h); !s.ok())
        return s;
    }
  }
  return Status();
}

Status Ranks::gatherBucket(int b, const std::function<Tensor(int)> &shardOf,
                           std::vector<io::NamedTensor> &list) {
  const BucketSpec &bk = spec_.buckets[b];
  Memory m;
  Tensor flat;
  if (Status s = allocateBucket(b, m, flat); !s.ok())
    return s;
  size_t shardBytes = size_t(bk.paddedNumel / job_.G) * dtypeSize(bk.dtype);
  for (int g = 0; g < job_.G; ++g)
    std::memcpy(static_cast<char *>(flat.data) + size_t(g) * shardBytes,
                shardOf(g).data, shardBytes);
  unpackBucket(spec_, shapes_, b, flat.data, list);
  scratch_.push_back(std::move(m));
  return Status();
}

/// Results `which` (or, with args, arguments) of every rank by name: a
/// replicated one is rank 0's, a sharded bucket gathered and unpacked.
Status Ranks::collect(const std::vector<int> &which, bool args,
                      std::vector<io::NamedTensor> &list) {
  if (Status s = fetch(which, args); !s.ok())
    return s;
  for (int i : which) {
    int bucket = args ? spec_.args[i].bucket : spec_.results[i].bucket;
    const char *name = args ? spec_.args[i].name : spec_.results[i].name;
    if (bucket < 0) {
      list.push_back({name, args ? rank0().args[i] : rank0().results[i]});
      continue;
    }
    if (Status s = gatherBucket(
            bucket,
            [&](int g) {
              RankState &rs = *ranks_[size_t(g)];
              return args ? rs.args[i] : rs.results[i];
            },
            list);
        !s.ok())
      return s;
  }
  return Status();
}

Status Ranks::collectGrads(std::vector<io::NamedTensor> &grads) {
  const Layout &l = job_.layout;
  if (Status s = collect(l.grads, /*args=*/false, grads); !s.ok())
    return s;
  if (l.gradNormalizer < 0)
    return Status();
  // The step returned the gradients unnormalized and the factor apart
  // ({dsc.grad_normalizer}, of the gradients' float type): scaled copies,
  // each product rounded as the step's dsc.mul would have.
  if (Status s = fetch({l.gradNormalizer}, /*args=*/false); !s.ok())
    return s;
  const double scale = scalarValue(rank0().results[l.gradNormalizer]);
  for (io::NamedTensor &g : grads) {
    const DType dt = g.tensor.dtype;
    if (dt != DType::F32 && dt != DType::F64)
      return Status::error(StatusCode::InvalidArgument,
                           "gradient '" + g.name +
                               "': a normalized gradient must be f32 or f64");
    TensorSpec type{dt, g.tensor.rank, {}};
    for (int d = 0; d < g.tensor.rank; ++d)
      type.shape[d] = g.tensor.shape[d];
    Memory m;
    Tensor scaled;
    if (Status s = allocateTensor(type, "gradient '" + g.name + "'", m, scaled);
        !s.ok())
      return s;
    const int64_t e = g.tensor.numel();
    for (int64_t i = 0; i < e; ++i) {
      double v = mulRounded(cpu::detail::loadAsDouble(g.tensor.data, dt, i),
                            scale, dt);
      if (dt == DType::F32)
        scaled.as<float>()[i] = float(v);
      else
        scaled.as<double>()[i] = v;
    }
    g.tensor = scaled;
    scratch_.push_back(std::move(m));
  }
  return Status();
}

Status Ranks::collectParams(std::vector<io::NamedTensor> &tensors) {
  const Layout &l = job_.layout;
  if (Status s = collect(l.params, /*args=*/true, tensors); !s.ok())
    return s;
  return collect(l.buffers, /*args=*/true, tensors);
}

Status Ranks::nonFiniteGrads(std::string &where) {
  // A distributed rank holds only its own shards and says nothing more.
  if (job_.distributed && job_.W > 1)
    return Status();
  std::vector<io::NamedTensor> grads;
  if (Status s = collectGrads(grads); !s.ok())
    return s;
  std::map<std::string, int> bucketOf;
  for (int b = 0; b < spec_.numBuckets; ++b)
    for (int e = 0; e < spec_.buckets[b].numEntries; ++e)
      bucketOf[spec_.buckets[b].entries[e].param] = b;
  std::vector<std::string> bad;
  for (const io::NamedTensor &g : grads) {
    bool finite = true;
    for (int64_t i = 0, n = g.tensor.numel(); finite && i < n; ++i)
      finite = std::isfinite(
          cpu::detail::loadAsDouble(g.tensor.data, g.tensor.dtype, i));
    if (finite)
      continue;
    auto b = bucketOf.find(g.name);
    bad.push_back(g.name + (b == bucketOf.end()
                                ? std::string()
                                : std::string(" (") +
                                      spec_.buckets[b->second].name + ")"));
  }
  clearScratch();
  for (size_t i = 0; i < bad.size() && i < 3; ++i)
    where += (i ? ", " : " in ") + bad[i];
  if (bad.size() > 3)
    where += " and " + std::to_string(bad.size() - 3) + " more";
  return Status();
}

size_t Ranks::arenaPeak() const {
  size_t peak = 0;
  for (auto &rs : ranks_)
    peak = std::max(peak, rs->dev ? rs->dev->arena.peak() : rs->arena.peak());
  return peak;
}

void Ranks::deviceMemory(size_t &peak, size_t &tensorBytes) const {
  peak = tensorBytes = 0;
  if (!job_.device)
    return;
  for (auto &rs : ranks_) {
    size_t now = 0, p = 0;
    if (job_.device->bindRank(rs->id, rs->gpu).ok() &&
        job_.device->memoryInUse(now, p).ok())
      peak = std::max(peak, p);
  }
  tensorBytes = deviceTensorBytes();
}

void Ranks::deviceWorkspaces(size_t &fixedBytes, size_t &scratchBytes,
                             std::string &scratchFor) const {
  fixedBytes = scratchBytes = 0;
  scratchFor.clear();
  const RankState &first = *ranks_[0];
  if (job_.device && job_.device->bindRank(first.id, first.gpu).ok())
    job_.device->workspaces(fixedBytes, scratchBytes, scratchFor);
}

size_t Ranks::deviceTensorBytes() const {
  const RankState &first = *ranks_[0];
  size_t bytes = 0;
  for (size_t i = 0; i < first.args.size(); ++i)
    if (!onHost(true, i))
      bytes += first.args[i].nbytes();
  for (size_t i = 0; i < first.results.size(); ++i)
    if (aliasOf_[i] < 0 && !onHost(false, i))
      bytes += first.results[i].nbytes();
  return bytes;
}

void Ranks::pinnedMemory(size_t &tensorBytes, size_t &arenaBytes) const {
  tensorBytes = arenaBytes = 0;
  const DeviceMirror *dev = ranks_[0]->dev.get();
  if (!dev)
    return;
  arenaBytes = dev->hostArena.capacity();
  tensorBytes = dev->pinnedBytes - arenaBytes;
}

/// Whether argument (or result) i lives in host memory on a device.
bool Ranks::onHost(bool arg, size_t i) const {
  return arg ? spec_.args[i].host : spec_.results[i].host;
}

} // namespace dsc::program
