//===- DeviceTest.cpp - runProgram's device path on a host "device" -------===//
//
// A Device whose memory is host memory: the program shell mirrors every
// rank's tensors and arena through it exactly as it does on a GPU (uploads,
// double-buffer swaps on the device side, one buffer for a result computed
// in place, downloads for printing and dumps, the will-it-fit check), so
// that path runs in CI without a GPU. The step
// is a linear regression whose gradient and loss are all-reduced, read from
// the context's step (as generated CUDA code does), never from args.
//
//===----------------------------------------------------------------------===//

#include "dsc/device.h"
#include "TestUtil.h"
#include "cpu/offload.h"
#include "io/checkpoint.h"
#include "io/nvme.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <mutex>
#include <set>

using namespace dsc;
using namespace dsc::program;
using namespace dsc::program::test;

namespace {

/// Host memory behind the Device interface, counting what it is asked.
class HostDevice : public Device {
public:
  size_t totalBytes = size_t(1) << 40;
  int allocations = 0, uploads = 0, downloads = 0;

  const char *name() const override { return "host-test"; }
  int count() const override { return 1; }
  Status bindRank(int, int) override { return Status(); }
  std::string describe() override { return "host test device (GPU 0)"; }
  Status allocate(size_t bytes, void **out) override {
    std::lock_guard<std::mutex> lock(mu_);
    size_t rounded = std::max<size_t>((bytes + 255) / 256 * 256, 256);
    *out = std::aligned_alloc(256, rounded); // as cudaMalloc's alignment
    if (*out)
      std::memset(*out, 0, rounded);
    ++allocations;
    inUse_ += bytes;
    peak_ = std::max(peak_, inUse_);
    return *out ? Status()
                : Status::error(StatusCode::OutOfMemory, "host-test: alloc");
  }
  void release(void *p) override { std::free(p); }
  Status toDevice(void *dst, const void *src, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::memcpy(dst, src, bytes);
    ++uploads;
    return Status();
  }
  Status toHost(void *dst, const void *src, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::memcpy(dst, src, bytes);
    ++downloads;
    return Status();
  }
  Status synchronize() override { return Status(); }
  /// Host memory: the default allocateHost, counted; pinning recorded.
  int hostAllocations = 0, pins = 0, unpins = 0;
  std::map<void *, size_t> pinned;
  Status allocateHost(size_t bytes, void **out) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++hostAllocations;
    return Device::allocateHost(bytes, out);
  }
  Status pinHost(void *p, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++pins;
    bool pageAligned = reinterpret_cast<uintptr_t>(p) % 4096 == 0;
    if (!pageAligned || !pinned.emplace(p, bytes).second)
      return Status::error(StatusCode::InvalidArgument, "host-test: pin");
    return Status();
  }
  void unpinHost(void *p) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++unpins;
    pinned.erase(p);
  }
  bool pinnedAny() {
    std::lock_guard<std::mutex> lock(mu_);
    return !pinned.empty();
  }
  bool isPinned(const void *p) {
    std::lock_guard<std::mutex> lock(mu_);
    return pinned.count(const_cast<void *>(p)) > 0;
  }
  Status memoryInUse(size_t &now, size_t &peak) override {
    now = inUse_;
    peak = peak_;
    return Status();
  }
  Status memoryInfo(int &gpu, size_t &free, size_t &total) override {
    gpu = 0;
    free = total = totalBytes;
    return Status();
  }
  /// The tensors are in host memory: the in-process communicator works on
  /// them as they are.
  std::unique_ptr<Communicator> wrapInProcess(Communicator *host) override {
    struct Forward : Communicator {
      Communicator *c;
      explicit Forward(Communicator *c) : c(c) {}
      int rank() const override { return c->rank(); }
      int size() const override { return c->size(); }
      int groupRank(GridAxes a) const override { return c->groupRank(a); }
      int groupSize(GridAxes a) const override { return c->groupSize(a); }
      Status allReduce(const Tensor &in, const Tensor &out, GridAxes a,
                       const char *w) override {
        return c->allReduce(in, out, a, w);
      }
      Status allGather(const Tensor &in, const Tensor &out, GridAxes a,
                       const char *w) override {
        return c->allGather(in, out, a, w);
      }
      Status reduceScatter(const Tensor &in, const Tensor &out, GridAxes a,
                           const char *w) override {
        return c->reduceScatter(in, out, a, w);
      }
    };
    return std::make_unique<Forward>(host);
  }
  Status createDistributed(const DistributedInit &,
                           std::unique_ptr<Communicator> &) override {
    return Status::error(StatusCode::Unimplemented, "host-test: no NCCL");
  }
  /// As the CUDA device's: a key's first step runs directly (the shell
  /// calls `enqueue`), later ones "replay" (here: this device runs the same
  /// host code itself), unless `refuse` says why a capture failed.
  std::vector<std::vector<const void *>> keys;
  int replays = 0;
  std::string refuse;
  Status replayStep(const std::vector<const void *> &key,
                    const std::function<Status()> &enqueue, bool &ran,
                    std::string &why) override {
    bool seen = std::find(keys.begin(), keys.end(), key) != keys.end();
    keys.push_back(key);
    ran = false;
    if (!seen)
      return Status();
    if (!refuse.empty()) {
      why = refuse;
      return Status();
    }
    ++replays;
    ran = true;
    return enqueue();
  }

private:
  std::mutex mu_;
  size_t inUse_ = 0, peak_ = 0;
};

HostDevice *gDevice = nullptr;
Device *testDevice() { return gDevice; }

enum { W, X, Y, LR, STEP, NUM_ARGS };
const ArgSpec kArgs[] = {
    {ArgRole::Param, "w", {DType::F32, 1, {1}}},
    {ArgRole::Input, "x", {DType::F32, 1, {2}}},
    {ArgRole::Input, "y", {DType::F32, 1, {2}}},
    {ArgRole::Hyper, "lr", {DType::F32, 0, {}}},
    {ArgRole::Step, "step", {DType::I64, 0, {}}},
};
const ResultSpec kResults[] = {
    {ResultRole::Loss, "loss", {DType::F32, 0, {}}},
    {ResultRole::Param, "w", {DType::F32, 1, {1}}},
    {ResultRole::Grad, "w", {DType::F32, 1, {1}}},
};
const HyperDefault kHypers[] = {{"lr", 0.01}};
const CollectiveSpec kManifest[] = {
    {"all_reduce", "w gradient", DType::F32, 1, 1, 2},
    {"all_reduce", "loss", DType::F32, 1, 1, 2},
};

std::mutex gStepsMu;
std::vector<int64_t> gSteps; // ctx.step of rank 0, per call

Status linearStep(const RankContext &ctx, const Tensor *a, const Tensor *r) {
  if (!ctx.comm || ctx.comm->rank() == 0) {
    std::lock_guard<std::mutex> lock(gStepsMu);
    gSteps.push_back(ctx.step);
  }
  // The step argument was uploaded too and agrees with the context.
  if (*a[STEP].as<int64_t>() != ctx.step)
    return Status::error(StatusCode::InvalidArgument, "step not uploaded");
  void *scratch = nullptr;
  if (Status s = ctx.arena->at(0, 2 * sizeof(float), &scratch); !s.ok())
    return s;
  float *gl = static_cast<float *>(scratch); // gradient, loss in the arena
  const float *x = a[X].as<float>(), *y = a[Y].as<float>();
  float w = a[W].as<float>()[0];
  gl[0] = gl[1] = 0;
  for (int i = 0; i < 2; ++i) {
    float res = w * x[i] - y[i];
    gl[1] += res * res / 2;
    gl[0] += 2 * res * x[i] / 2;
  }
  float n = ctx.comm ? float(ctx.comm->size()) : 1.f;
  float sums[2] = {gl[0], gl[1]};
  if (ctx.comm) {
    if (Status s = ctx.comm->allReduce(Tensor::of(&gl[0], DType::F32, {1}),
                                       Tensor::of(&sums[0], DType::F32, {1}),
                                       {2}, "w gradient");
        !s.ok())
      return s;
    if (Status s = ctx.comm->allReduce(Tensor::of(&gl[1], DType::F32, {1}),
                                       Tensor::of(&sums[1], DType::F32, {1}),
                                       {2}, "loss");
        !s.ok())
      return s;
  }
  *r[0].as<float>() = sums[1] / n;
  r[1].as<float>()[0] = w - *a[LR].as<float>() * sums[0] / n;
  r[2].as<float>()[0] = sums[0] / n;
  return Status();
}

ProgramSpec spec(int worldSize, bool device) {
  ProgramSpec s{};
  s.modelPath = "/nonexistent/linear.onnx";
  s.optimizer = "sgd";
  s.microBatch = 2;
  s.accumSteps = 1;
  s.tokensPerExample = 1;
  s.numArgs = NUM_ARGS;
  s.args = kArgs;
  s.numResults = 3;
  s.results = kResults;
  s.numHypers = 1;
  s.hypers = kHypers;
  s.arenaBytes = 256;
  s.trainStep = linearStep;
  if (worldSize > 1) {
    s.worldSize = worldSize;
    s.groupSize = worldSize;
    s.numCollectives = 2;
    s.collectives = kManifest;
  }
  s.device = device ? testDevice : nullptr;
  return s;
}

struct DeviceRun : ::testing::Test {
  TempDir dir;
  HostDevice device;
  void SetUp() override {
    gDevice = &device;
    gSteps.clear();
    // The global batch of one rank (2 rows) and of two (4 rows).
    std::vector<float> x = {1, 2, 3, 4}, y = {3, 6, 9, 12};
    for (int64_t rows : {2, 4})
      ASSERT_TRUE(io::writeSafetensors(
                      batchOf(int(rows / 2)),
                      {{"x", Tensor::of(x.data(), DType::F32, {rows})},
                       {"y", Tensor::of(y.data(), DType::F32, {rows})}})
                      .ok());
  }
  std::string batchOf(int ranks) {
    return dir / ("batch" + std::to_string(ranks) + ".safetensors");
  }
  /// The program refuses spec `s` before it runs, naming `message`, as a
  /// dsc bug.
  void expectSpecBug(const ProgramSpec &s, const std::string &message) {
    RunResult r = runWith(s, {"--help"});
    EXPECT_EQ(r.rc, 1);
    EXPECT_TRUE(contains(r.err, "error: program spec: " + message)) << r.err;
    EXPECT_TRUE(contains(r.err, "please report it as a dsc bug")) << r.err;
  }
  RunResult train(int worldSize, bool onDevice, const std::string &tag) {
    return runWith(spec(worldSize, onDevice),
                   {"--steps", "4", "--batch", batchOf(worldSize), "--init",
                    "random", "--lr", "0.01", "--dump-grads", dir / ("g" + tag),
                    "--dump-params", dir / ("p" + tag), "--log",
                    dir / ("log" + tag)});
  }
};

TEST_F(DeviceRun, SameResultsAsTheHostRunOneAndTwoRanks) {
  for (int ranks : {1, 2}) {
    SCOPED_TRACE(std::to_string(ranks) + " rank(s)");
    RunResult host = train(ranks, false, "h");
    ASSERT_EQ(host.rc, 0) << host.err;
    device.allocations = device.uploads = device.downloads = 0;
    RunResult dev = train(ranks, true, "d");
    ASSERT_EQ(dev.rc, 0) << dev.err;
    EXPECT_TRUE(contains(dev.out, "device: host test device (GPU 0)"))
        << dev.out;
    EXPECT_TRUE(contains(dev.out, "gpu memory: peak ")) << dev.out;
    // Every argument, result and arena of every rank lives on the device;
    // the batch and the step go up each step; the loss comes back.
    EXPECT_EQ(device.allocations, ranks * (NUM_ARGS + 3 + 1));
    // (The non-input arguments once, then x, y and the step each step.)
    EXPECT_EQ(device.uploads, ranks * ((NUM_ARGS - 2) + 4 * 3));
    EXPECT_GE(device.downloads, 4);
    // Steps 1..4 through the context, once per step on rank 0.
    EXPECT_EQ(gSteps, (std::vector<int64_t>{1, 2, 3, 4, 1, 2, 3, 4}));
    gSteps.clear();
    // Same log losses, gradients and parameters, bitwise.
    EXPECT_EQ(readFile(dir / "gh"), readFile(dir / "gd"));
    EXPECT_EQ(readFile(dir / "ph"), readFile(dir / "pd"));
    std::string lh = readFile(dir / "logh"), ld = readFile(dir / "logd");
    for (int step = 1; step <= 4; ++step) {
      auto loss = [&](const std::string &log) {
        size_t at = log.find("\"step\":" + std::to_string(step) + ",");
        return log.substr(at, log.find(",\"lr\"", at) - at);
      };
      EXPECT_EQ(loss(lh), loss(ld));
    }
  }
}

TEST_F(DeviceRun, AnInPlaceParameterIsOneDeviceBuffer) {
  // The parameter computed in place (dsc-in-place-updates): on the host and
  // on the device it is its argument's storage, never swapped, and the run
  // is the double-buffered one's, bitwise.
  const ResultSpec inPlace[] = {
      kResults[0],
      {ResultRole::Param, "w", {DType::F32, 1, {1}}, -1, W},
      kResults[2],
  };
  for (int ranks : {1, 2}) {
    SCOPED_TRACE(std::to_string(ranks) + " rank(s)");
    RunResult twice = train(ranks, true, "2");
    ASSERT_EQ(twice.rc, 0) << twice.err;
    device.allocations = 0;
    ProgramSpec s = spec(ranks, true);
    s.results = inPlace;
    RunResult once =
        runWith(s, {"--steps", "4", "--batch", batchOf(ranks), "--init",
                    "random", "--lr", "0.01", "--dump-grads", dir / "g1",
                    "--dump-params", dir / "p1", "--log", dir / "log1"});
    ASSERT_EQ(once.rc, 0) << once.err;
    EXPECT_EQ(device.allocations, ranks * (NUM_ARGS + 2 + 1));
    EXPECT_EQ(readFile(dir / "g2"), readFile(dir / "g1"));
    EXPECT_EQ(readFile(dir / "p2"), readFile(dir / "p1"));
    gSteps.clear();
  }
}

TEST_F(DeviceRun, OneRankReplaysItsStepUnderAKeyOfItsBuffers) {
  // The shell hands every step of a single-rank device run to replayStep,
  // keyed by the step function, the arena and the buffers: a
  // double-buffered parameter alternates two keys, one computed in place
  // keeps one. The replayed steps give the direct run's results bitwise.
  RunResult plain = train(1, true, "p");
  ASSERT_EQ(plain.rc, 0) << plain.err;
  ASSERT_EQ(device.keys.size(), 4u);
  EXPECT_EQ(device.keys[0].front(),
            reinterpret_cast<const void *>(&linearStep));
  EXPECT_EQ(device.keys[0], device.keys[2]);
  EXPECT_EQ(device.keys[1], device.keys[3]);
  EXPECT_NE(device.keys[0], device.keys[1]);
  EXPECT_EQ(device.replays, 2);
  EXPECT_EQ(gSteps, (std::vector<int64_t>{1, 2, 3, 4}));

  const ResultSpec inPlace[] = {
      kResults[0],
      {ResultRole::Param, "w", {DType::F32, 1, {1}}, -1, W},
      kResults[2],
  };
  device.keys.clear();
  device.replays = 0;
  ProgramSpec s = spec(1, true);
  s.results = inPlace;
  RunResult once =
      runWith(s, {"--steps", "4", "--batch", batchOf(1), "--init", "random",
                  "--lr", "0.01", "--dump-params", dir / "p1"});
  ASSERT_EQ(once.rc, 0) << once.err;
  ASSERT_EQ(device.keys.size(), 4u);
  EXPECT_EQ(device.keys[0], device.keys[3]);
  EXPECT_EQ(device.replays, 3);
  EXPECT_EQ(readFile(dir / "pp"), readFile(dir / "p1"));
}

TEST_F(DeviceRun, NoReplayWithACommunicatorTimersOrNoCudaGraph) {
  RunResult two = train(2, true, "2");
  ASSERT_EQ(two.rc, 0) << two.err;
  EXPECT_TRUE(device.keys.empty()); // in-process ranks stage through the host
  RunResult off =
      runWith(spec(1, true), {"--steps", "3", "--batch", batchOf(1), "--init",
                              "random", "--no-cuda-graph"});
  ASSERT_EQ(off.rc, 0) << off.err;
  EXPECT_TRUE(device.keys.empty());
  RunResult timed =
      runWith(spec(1, true), {"--steps", "3", "--batch", batchOf(1), "--init",
                              "random", "--wall-clock-breakdown"});
  ASSERT_EQ(timed.rc, 0) << timed.err;
  EXPECT_TRUE(device.keys.empty());
}

TEST_F(DeviceRun, AStepThatCannotBeCapturedRunsDirectlyAndSaysSoOnce) {
  device.refuse = "the step draws dropout seeds on the host";
  RunResult r = train(1, true, "r");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(device.replays, 0);
  EXPECT_EQ(gSteps, (std::vector<int64_t>{1, 2, 3, 4}));
  std::string note = "note: the step runs without a CUDA graph: the step "
                     "draws dropout seeds on the host";
  size_t at = r.err.find(note);
  EXPECT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(note, at + 1), std::string::npos) << r.err;
}

TEST_F(DeviceRun, AStepThatDoesNotFitIsAnErrorBeforeAnyAllocation) {
  device.totalBytes = 512; // less than the 256-byte arena + 32 MiB workspace
  RunResult r = train(2, true, "x");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(device.allocations, 0);
  EXPECT_TRUE(contains(r.err, "error: this step needs ")) << r.err;
  EXPECT_TRUE(contains(r.err, "on GPU 0 (2 ranks x (tensors, arena and "
                              "library workspaces of the compiled plan, "))
      << r.err;
  EXPECT_TRUE(contains(r.err, "but it has 512 B in all; compile with a "
                              "smaller --micro-batch"))
      << r.err;
}

} // namespace

namespace {

// --gradcheck on a device program: every finite-difference call uploads the
// perturbed parameters, and the analytic gradient comes back from the
// device.
TEST_F(DeviceRun, GradcheckUploadsEachPerturbation) {
  RunResult host = runWith(spec(1, false), {"--gradcheck", "1", "--batch",
                                            batchOf(1), "--init", "random"});
  ASSERT_EQ(host.rc, 0) << host.err;
  RunResult dev = runWith(spec(1, true), {"--gradcheck", "1", "--batch",
                                          batchOf(1), "--init", "random"});
  ASSERT_EQ(dev.rc, 0) << dev.err << dev.out;
  EXPECT_TRUE(contains(dev.out, "gradcheck: loss ")) << dev.out;
  EXPECT_TRUE(contains(dev.out, "| OK (bound ")) << dev.out;
  // The same report as on the host, line for line after the banner.
  EXPECT_EQ(host.out.substr(host.out.find("gradcheck w")),
            dev.out.substr(dev.out.find("gradcheck w")));
  // Three steps (the base and two perturbations), each uploading every
  // argument.
  EXPECT_EQ(device.uploads, 3 + 3 * NUM_ARGS);
}

} // namespace

namespace {

// Offloaded state (ArgSpec::host): the parameter lives in host memory on
// the device too, computed in place; the host arena (spec.hostArenaBytes)
// is there on both paths.
const ArgSpec kHostArgs[] = {
    {ArgRole::Param, "w", {DType::F32, 1, {1}}, -1, /*host=*/true},
    kArgs[X],
    kArgs[Y],
    kArgs[LR],
    kArgs[STEP],
};
const ResultSpec kHostResults[] = {
    kResults[0],
    {ResultRole::Param, "w", {DType::F32, 1, {1}}, -1, W, /*host=*/true},
    kResults[2],
};
constexpr size_t kHostArenaBytes = 64;

std::set<const void *> gHostArenas; // every host arena a step saw

/// linearStep, with its parameter read and updated where the shell put
/// it (host memory, pinned on a device), and the gradient kept in the
/// host arena too.
Status hostStep(const RankContext &ctx, const Tensor *a, const Tensor *r) {
  if (!ctx.hostArena || !ctx.hostArena->base() ||
      ctx.hostArena->capacity() < kHostArenaBytes)
    return Status::error(StatusCode::InvalidArgument, "no host arena");
  if (gDevice->pinnedAny() && !gDevice->isPinned(a[W].data))
    return Status::error(StatusCode::InvalidArgument, "w is not pinned");
  if (Status s = linearStep(ctx, a, r); !s.ok())
    return s;
  {
    std::lock_guard<std::mutex> lock(gStepsMu);
    gHostArenas.insert(ctx.hostArena->base());
  }
  static_cast<float *>(static_cast<void *>(ctx.hostArena->base()))[0] =
      r[2].as<float>()[0];
  return Status();
}

ProgramSpec hostSpec(int worldSize, bool device) {
  ProgramSpec s = spec(worldSize, device);
  s.args = kHostArgs;
  s.results = kHostResults;
  s.trainStep = hostStep;
  s.hostArenaBytes = kHostArenaBytes;
  return s;
}

struct HostOffload : DeviceRun {
  RunResult trainSpec(const ProgramSpec &s, int ranks, const std::string &tag) {
    return runWith(s, {"--steps", "4", "--batch", batchOf(ranks), "--init",
                       "random", "--lr", "0.01", "--dump-grads",
                       dir / ("g" + tag), "--dump-params", dir / ("p" + tag)});
  }
};

TEST_F(HostOffload, AHostParameterOnTheCpuPath) {
  for (int ranks : {1, 2}) {
    SCOPED_TRACE(std::to_string(ranks) + " rank(s)");
    gHostArenas.clear();
    RunResult plain = train(ranks, false, "c");
    ASSERT_EQ(plain.rc, 0) << plain.err;
    RunResult host = trainSpec(hostSpec(ranks, false), ranks, "h");
    ASSERT_EQ(host.rc, 0) << host.err;
    EXPECT_EQ(readFile(dir / "gc"), readFile(dir / "gh"));
    EXPECT_EQ(readFile(dir / "pc"), readFile(dir / "ph"));
    EXPECT_EQ(gHostArenas.size(), size_t(ranks)); // one per rank, kept
    EXPECT_EQ(device.pins + device.hostAllocations, 0);
    EXPECT_FALSE(contains(host.out, "pinned host memory")) << host.out;
    gSteps.clear();
  }
}

TEST_F(HostOffload, AHostParameterIsPinnedNotMirrored) {
  for (int ranks : {1, 2}) {
    SCOPED_TRACE(std::to_string(ranks) + " rank(s)");
    gHostArenas.clear();
    RunResult plain = train(ranks, false, "c");
    ASSERT_EQ(plain.rc, 0) << plain.err;
    device.allocations = device.uploads = device.pins = device.unpins = 0;
    device.hostAllocations = 0;
    RunResult host = trainSpec(hostSpec(ranks, true), ranks, "d");
    ASSERT_EQ(host.rc, 0) << host.err;
    // No device copy of w (and its result is w): the loss, the gradient
    // and the arena are the device allocations; w is pinned, then unpinned.
    EXPECT_EQ(device.allocations, ranks * (NUM_ARGS - 1 + 2 + 1));
    EXPECT_EQ(device.pins, ranks);
    EXPECT_EQ(device.unpins, ranks);
    EXPECT_TRUE(device.pinned.empty());
    EXPECT_EQ(device.hostAllocations, ranks);
    // w is never uploaded: lr and the step once, then x, y and the step
    // each step.
    EXPECT_EQ(device.uploads, ranks * ((NUM_ARGS - 3) + 4 * 3));
    EXPECT_EQ(gHostArenas.size(), size_t(ranks));
    EXPECT_EQ(readFile(dir / "gc"), readFile(dir / "gd"));
    EXPECT_EQ(readFile(dir / "pc"), readFile(dir / "pd"));
    EXPECT_TRUE(contains(host.out, "pinned host memory: 68 B per rank = "
                                   "offloaded tensors 4 B + host arena 64 B"))
        << host.out;
    gSteps.clear();
  }
}

TEST_F(HostOffload, GradcheckWithAHostParameter) {
  // --gradcheck gives every result storage of its own: the host result is
  // pinned on its own pages.
  RunResult plain = runWith(spec(1, true), {"--gradcheck", "1", "--batch",
                                            batchOf(1), "--init", "random"});
  ASSERT_EQ(plain.rc, 0) << plain.err;
  device.pins = 0;
  RunResult host = runWith(hostSpec(1, true), {"--gradcheck", "1", "--batch",
                                               batchOf(1), "--init", "random"});
  ASSERT_EQ(host.rc, 0) << host.err << host.out;
  EXPECT_EQ(device.pins, 2);
  EXPECT_EQ(plain.out.substr(plain.out.find("gradcheck w")),
            host.out.substr(host.out.find("gradcheck w")));
}

TEST_F(HostOffload, AHostUpdateNotInPlaceIsAnError) {
  const ResultSpec notInPlace[] = {
      kResults[0],
      {ResultRole::Param, "w", {DType::F32, 1, {1}}, -1, -1, /*host=*/true},
      kResults[2],
  };
  for (bool onDevice : {false, true}) {
    ProgramSpec s = hostSpec(1, onDevice);
    s.results = notInPlace;
    s.trainStep = linearStep;
    RunResult r = trainSpec(s, 1, "x");
    EXPECT_EQ(r.rc, 1);
    EXPECT_TRUE(contains(r.err, "parameter result 'w' is in host memory but "
                                "not "
                                "computed in place of its argument"))
        << r.err;
  }
}

TEST_F(HostOffload, TheSpecCheckRefusesAHostInputOrAMismatch) {
  ArgSpec args[NUM_ARGS];
  std::copy(std::begin(kHostArgs), std::end(kHostArgs), args);
  args[X].host = true;
  ProgramSpec s = hostSpec(1, true);
  s.args = args;
  RunResult r = trainSpec(s, 1, "i");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "input 'x' is marked host")) << r.err;

  ResultSpec results[3];
  std::copy(std::begin(kHostResults), std::end(kHostResults), results);
  results[1].host = false;
  s = hostSpec(1, true);
  s.results = results;
  r = trainSpec(s, 1, "m");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "and its argument are not both in host memory"))
      << r.err;
}

} // namespace

namespace {

// A bf16 compute copy of w kept as step state (ArgRole::ComputeCopy, as an
// offloaded optimizer has it): the shell fills it with w rounded to nearest
// even whenever the parameters are set, the step reads it in its forward
// and writes the rounded new w into it in place.
enum { CW, CC, CX, CY, CLR, CSTEP, C_NUM_ARGS };
enum { CLOSS, CPARAM, CGRAD, CCOPY, C_NUM_RESULTS };

// 1 + 2^-8 is a tie between two bf16 values, broken to the even one (1.0);
// 2^-20 more rounds up. Truncation would give 1.0 for both.
const float kInitW[2] = {1.00390625f + 0x1p-20f, 1.00390625f};
const uint16_t kInitCopy[2] = {0x3F81, 0x3F80};

std::vector<std::vector<uint16_t>> gCopySeen; // per call: the copy's bits

/// The copy must hold w rounded to bf16 at every call: filled by the shell
/// at the first, updated in place by the step itself at the others.
Status checkCopy(const RankContext &ctx, const float *w, const uint16_t *c) {
  gCopySeen.push_back({c[0], c[1]});
  for (int i = 0; i < 2; ++i)
    if (c[i] != floatToBfloat16(w[i]))
      return Status::error(StatusCode::InvalidArgument,
                           "the compute copy is not w rounded to bf16 at "
                           "step " +
                               std::to_string(ctx.step));
  return Status();
}

/// Elementwise regression y = c * x on the compute copy c; the update goes
/// to the fp32 w, its rounding into the copy.
Status copyStep(const RankContext &ctx, const Tensor *a, const Tensor *r) {
  const float w[2] = {a[CW].as<float>()[0], a[CW].as<float>()[1]};
  if (Status s = checkCopy(ctx, w, a[CC].as<uint16_t>()); !s.ok())
    return s;
  const float *x = a[CX].as<float>(), *y = a[CY].as<float>();
  float lr = *a[CLR].as<float>(), loss = 0;
  for (int i = 0; i < 2; ++i) {
    float c = bfloat16ToFloat(a[CC].as<uint16_t>()[i]);
    float res = c * x[i] - y[i];
    loss += res * res / 2;
    r[CGRAD].as<float>()[i] = res * x[i];
    r[CPARAM].as<float>()[i] = w[i] - lr * res * x[i];
    r[CCOPY].as<uint16_t>()[i] = floatToBfloat16(r[CPARAM].as<float>()[i]);
  }
  *r[CLOSS].as<float>() = loss;
  return Status();
}

struct ComputeCopyRun : DeviceRun {
  std::vector<ArgSpec> args;
  std::vector<ResultSpec> results;
  std::string init;

  void SetUp() override {
    DeviceRun::SetUp();
    gCopySeen.clear();
    init = dir / "init.safetensors";
    std::vector<float> w(kInitW, kInitW + 2);
    ASSERT_TRUE(io::writeSafetensors(
                    init, {{"w", Tensor::of(w.data(), DType::F32, {2})}})
                    .ok());
  }
  /// w offloaded (host, updated in place) or not (double-buffered).
  ProgramSpec copySpec(bool hostParam, bool onDevice) {
    const TensorSpec f32{DType::F32, 1, {2}}, bf16{DType::BF16, 1, {2}};
    args = {{ArgRole::Param, "w", f32, -1, hostParam},
            {ArgRole::ComputeCopy, "w", bf16},
            {ArgRole::Input, "x", f32},
            {ArgRole::Input, "y", f32},
            kArgs[LR],
            kArgs[STEP]};
    results = {
        kResults[0],
        {ResultRole::Param, "w", f32, -1, hostParam ? CW : -1, hostParam},
        {ResultRole::Grad, "w", f32},
        {ResultRole::ComputeCopy, "w", bf16, -1, CC}};
    ProgramSpec s = spec(1, onDevice);
    s.numArgs = C_NUM_ARGS;
    s.args = args.data();
    s.numResults = C_NUM_RESULTS;
    s.results = results.data();
    s.trainStep = copyStep;
    return s;
  }
  RunResult trainCopy(const ProgramSpec &s, const std::string &tag,
                      std::vector<std::string> more = {}) {
    std::vector<std::string> argv = {
        "--batch", batchOf(1), "--init",        init,
        "--lr",    "0.01",     "--dump-params", dir / ("p" + tag)};
    argv.insert(argv.end(), more.begin(), more.end());
    return runWith(s, argv);
  }
};

TEST_F(ComputeCopyRun, TheStepStartsFromTheRoundedParameter) {
  std::string first;
  for (bool onDevice : {false, true})
    for (bool hostParam : {true, false}) {
      std::string tag = std::to_string(onDevice) + std::to_string(hostParam);
      SCOPED_TRACE(tag);
      gCopySeen.clear();
      RunResult r =
          trainCopy(copySpec(hostParam, onDevice), tag, {"--steps", "3"});
      ASSERT_EQ(r.rc, 0) << r.err;
      ASSERT_EQ(gCopySeen.size(), 3u);
      EXPECT_EQ(gCopySeen[0],
                (std::vector<uint16_t>{kInitCopy[0], kInitCopy[1]}));
      EXPECT_NE(gCopySeen[1], gCopySeen[0]); // the step's own update
      // The dump holds the fp32 parameter only, the same on every path.
      EXPECT_TRUE(contains(r.out, "(1 tensors)")) << r.out;
      io::SafetensorsFile p;
      ASSERT_TRUE(p.read(dir / ("p" + tag)).ok());
      EXPECT_EQ(p.names(), (std::vector<std::string>{"w"}));
      if (first.empty())
        first = readFile(dir / ("p" + tag));
      EXPECT_EQ(readFile(dir / ("p" + tag)), first);
      gSteps.clear();
    }
}

TEST_F(ComputeCopyRun, AResumedRunRefillsItFromTheCheckpoint) {
  for (bool onDevice : {false, true}) {
    SCOPED_TRACE(onDevice ? "device" : "cpu");
    std::string ckpt = dir / (onDevice ? "ckd" : "ckc");
    ProgramSpec s = copySpec(/*hostParam=*/true, onDevice);
    RunResult whole = trainCopy(s, "whole", {"--steps", "4"});
    ASSERT_EQ(whole.rc, 0) << whole.err;
    RunResult saved =
        trainCopy(s, "saved", {"--steps", "2", "--save-dir", ckpt});
    ASSERT_EQ(saved.rc, 0) << saved.err;
    io::CheckpointReader reader;
    ASSERT_TRUE(reader.open(ckpt).ok());
    ASSERT_EQ(reader.manifest().tensors.size(), 1u); // no compute copy
    EXPECT_EQ(reader.manifest().tensors[0].name, "param/w");
    gCopySeen.clear();
    RunResult resumed =
        runWith(s, {"--resume", ckpt, "--batch", batchOf(1), "--steps", "4",
                    "--dump-params", dir / "presumed"});
    ASSERT_EQ(resumed.rc, 0) << resumed.err;
    ASSERT_EQ(gCopySeen.size(), 2u); // steps 3 and 4, checked by the step
    EXPECT_EQ(readFile(dir / "pwhole"), readFile(dir / "presumed"));
    gSteps.clear();
  }
}

TEST_F(ComputeCopyRun, GradcheckRefillsItAfterEachPerturbation) {
  for (bool onDevice : {false, true}) {
    SCOPED_TRACE(onDevice ? "device" : "cpu");
    gCopySeen.clear();
    RunResult r = trainCopy(copySpec(/*hostParam=*/true, onDevice), "g",
                            {"--gradcheck", "1", "--gradcheck-tol", "0.5"});
    ASSERT_EQ(r.rc, 0) << r.err << r.out;
    EXPECT_TRUE(contains(r.out, "gradcheck w")) << r.out;
    ASSERT_EQ(gCopySeen.size(), 3u); // the base and w[0] +- 0.01
    EXPECT_EQ(gCopySeen[0][0], kInitCopy[0]);
    EXPECT_NE(gCopySeen[1][0], kInitCopy[0]);
    EXPECT_NE(gCopySeen[2][0], kInitCopy[0]);
  }
}

TEST_F(ComputeCopyRun, TheSpecCheckNamesAMalformedComputeCopy) {
  ProgramSpec s = copySpec(true, false);
  args[CC].type.dtype = results[CCOPY].type.dtype = DType::F16;
  RunResult help = runWith(s, {"--help"});
  ASSERT_EQ(help.rc, 0) << help.err;
  EXPECT_TRUE(contains(help.out, "compute copies: 1 tensors")) << help.out;

  s = copySpec(true, false);
  args[CC].name = results[CCOPY].name = "v";
  expectSpecBug(s, "compute copy 'v' has no parameter of that name");

  s = copySpec(true, false);
  args[CC].type.shape[0] = results[CCOPY].type.shape[0] = 3;
  expectSpecBug(s, "compute copy 'w' is bf16[3] but its parameter is f32[2]");

  s = copySpec(true, false);
  args[CC].type.dtype = results[CCOPY].type.dtype = DType::F32;
  expectSpecBug(s, "compute copy 'w' is f32[2]; a compute copy is bf16 or "
                   "f16");

  s = copySpec(true, false);
  args[CC].bucket = 0;
  expectSpecBug(s, "compute copy 'w' is marked as a bucket shard");

  s = copySpec(true, false);
  results[CCOPY].inPlaceOf = -1;
  expectSpecBug(s, "compute copy result 'w' is not computed in place of its "
                   "argument; a compute copy always is");

  s = copySpec(true, false);
  results[CCOPY].name = "v";
  expectSpecBug(s, "compute copy result 'v' has no argument of that name");
}

} // namespace

namespace {

// Offloaded state in an NVMe file (ArgSpec::nvme): w lives in a file under
// --nvme-path, mapped, updated in place; the step stages it through its
// host arena with cpu::nvmeRead and writes the update back with
// cpu::nvmeWrite, as the generated code's host tasks do.
const TensorSpec kW = {DType::F32, 1, {1}};
const ArgSpec kNvmeArgs[] = {
    {ArgRole::Param, "w", kW, -1, /*host=*/true, /*nvme=*/true},
    kArgs[X],
    kArgs[Y],
    kArgs[LR],
    kArgs[STEP],
};
const ResultSpec kNvmeResults[] = {
    kResults[0],
    {ResultRole::Param, "w", kW, -1, W, /*host=*/true, /*nvme=*/true},
    kResults[2],
};

/// linearStep on w staged in the host arena: read from its file, updated
/// there, written back into the update's file.
Status nvmeStep(const RankContext &ctx, const Tensor *a, const Tensor *r) {
  if (!io::isNvme(a[W].data, a[W].nbytes()) ||
      !io::isNvme(r[1].data, r[1].nbytes()))
    return Status::error(StatusCode::InvalidArgument, "w is not in a file");
  if (gDevice && gDevice->isPinned(a[W].data))
    return Status::error(StatusCode::InvalidArgument, "w is pinned");
  Tensor staged = a[W];
  staged.data = ctx.hostArena->base();
  if (Status s = cpu::nvmeRead(a[W], staged, "w"); !s.ok())
    return s;
  // The host task that reads the staged copy waits for the read first.
  if (Status s = cpu::detail::awaitNvmeReads(&staged, 1); !s.ok())
    return s;
  Tensor args[NUM_ARGS], results[3];
  std::copy(a, a + NUM_ARGS, args);
  std::copy(r, r + 3, results);
  args[W] = results[1] = staged;
  if (Status s = linearStep(ctx, args, results); !s.ok())
    return s;
  return cpu::nvmeWrite(staged, r[1], "w");
}

struct NvmeOffload : DeviceRun {
  ArgSpec args[NUM_ARGS];
  ResultSpec results[3];
  std::string nvmeDir;

  void SetUp() override {
    DeviceRun::SetUp();
    std::copy(std::begin(kNvmeArgs), std::end(kNvmeArgs), args);
    std::copy(std::begin(kNvmeResults), std::end(kNvmeResults), results);
    nvmeDir = dir / "nvme";
    std::filesystem::create_directory(nvmeDir);
  }
  ProgramSpec nvmeSpec(int worldSize, bool onDevice) {
    ProgramSpec s = spec(worldSize, onDevice);
    s.args = args;
    s.results = results;
    s.trainStep = nvmeStep;
    s.hostArenaBytes = 64;
    return s;
  }
  RunResult trainNvme(const ProgramSpec &s, int ranks, const std::string &tag,
                      std::vector<std::string> more = {}) {
    std::vector<std::string> argv = {"--steps",       "4",
                                     "--batch",       batchOf(ranks),
                                     "--init",        "random",
                                     "--lr",          "0.01",
                                     "--dump-grads",  dir / ("g" + tag),
                                     "--nvme-path",   nvmeDir,
                                     "--dump-params", dir / ("p" + tag)};
    argv.insert(argv.end(), more.begin(), more.end());
    return runWith(s, argv);
  }
};

TEST_F(NvmeOffload, SameResultsAsInMemoryNothingPinnedNothingLeft) {
  for (bool onDevice : {false, true})
    for (int ranks : {1, 2}) {
      std::string tag = std::to_string(onDevice) + std::to_string(ranks);
      SCOPED_TRACE(tag);
      RunResult plain = train(ranks, false, "c" + tag);
      ASSERT_EQ(plain.rc, 0) << plain.err;
      device.allocations = device.pins = 0;
      RunResult r = trainNvme(nvmeSpec(ranks, onDevice), ranks, "n" + tag);
      ASSERT_EQ(r.rc, 0) << r.err;
      EXPECT_EQ(readFile(dir / ("gc" + tag)), readFile(dir / ("gn" + tag)));
      EXPECT_EQ(readFile(dir / ("pc" + tag)), readFile(dir / ("pn" + tag)));
      // w is neither mirrored on the device nor pinned.
      EXPECT_EQ(device.pins, 0);
      if (onDevice) {
        EXPECT_EQ(device.allocations, ranks * (NUM_ARGS - 1 + 2 + 1));
      }
      std::string bytes = ranks == 1 ? "4 B" : "8 B";
      EXPECT_TRUE(contains(r.out, "nvme: " + bytes +
                                      " of optimizer state in files under " +
                                      nvmeDir))
          << r.out;
      EXPECT_TRUE(contains(r.out, "nvme: " + bytes + " under " + nvmeDir +
                                      " | per step read " + bytes +
                                      ", written " + bytes))
          << r.out;
      // The files were unlinked when created, and unmapped at the end.
      EXPECT_TRUE(std::filesystem::is_empty(nvmeDir));
      EXPECT_EQ(io::nvmeBytes(), 0u);
      gSteps.clear();
    }
}

TEST_F(NvmeOffload, SavedAndResumedAsInMemory) {
  for (bool onDevice : {false, true}) {
    SCOPED_TRACE(onDevice ? "device" : "cpu");
    std::string ckpt = dir / (onDevice ? "ckd" : "ckc");
    ProgramSpec s = nvmeSpec(1, onDevice);
    RunResult whole = trainNvme(s, 1, "whole");
    ASSERT_EQ(whole.rc, 0) << whole.err;
    RunResult saved =
        trainNvme(s, 1, "saved", {"--steps", "2", "--save-dir", ckpt});
    ASSERT_EQ(saved.rc, 0) << saved.err;
    RunResult resumed =
        runWith(s, {"--resume", ckpt, "--batch", batchOf(1), "--steps", "4",
                    "--nvme-path", nvmeDir, "--dump-params", dir / "presumed"});
    ASSERT_EQ(resumed.rc, 0) << resumed.err;
    EXPECT_EQ(readFile(dir / "pwhole"), readFile(dir / "presumed"));
    gSteps.clear();
  }
}

TEST_F(NvmeOffload, GradcheckGivesTheUpdateAFileOfItsOwn) {
  // --gradcheck gives every result storage of its own: the update of w
  // gets a second file, never pinned.
  for (bool onDevice : {false, true}) {
    SCOPED_TRACE(onDevice ? "device" : "cpu");
    RunResult plain =
        runWith(spec(1, onDevice), {"--gradcheck", "1", "--batch", batchOf(1),
                                    "--init", "random"});
    ASSERT_EQ(plain.rc, 0) << plain.err;
    device.pins = 0;
    RunResult r = runWith(nvmeSpec(1, onDevice),
                          {"--gradcheck", "1", "--batch", batchOf(1), "--init",
                           "random", "--nvme-path", nvmeDir});
    ASSERT_EQ(r.rc, 0) << r.err << r.out;
    EXPECT_EQ(device.pins, 0);
    EXPECT_EQ(plain.out.substr(plain.out.find("gradcheck w")),
              r.out.substr(r.out.find("gradcheck w")));
    EXPECT_TRUE(contains(r.out, "nvme: 8 B of optimizer state")) << r.out;
  }
}

TEST_F(NvmeOffload, TheDirectoryIsTheOptionsOrTheCompilesOrAnError) {
  ProgramSpec s = nvmeSpec(1, false);
  RunResult r = runWith(s, {"--batch", batchOf(1)});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "error: this program keeps optimizer state in "
                              "files on a fast disk (offload_optimizer "
                              "nvme), but no directory was named: pass "
                              "--nvme-path DIR"))
      << r.err;
  s.nvmePath = "/nonexistent-dsc-nvme";
  r = runWith(s, {"--batch", batchOf(1), "--steps", "1"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "error: NVMe file for parameter 'w' in "
                              "/nonexistent-dsc-nvme: no such directory"))
      << r.err;
  r = runWith(s, {"--batch", batchOf(1), "--steps", "1", "--init", "random",
                  "--nvme-path", nvmeDir});
  EXPECT_EQ(r.rc, 0) << r.err;
  r = runWith(s, {"--help"});
  EXPECT_TRUE(contains(r.out, "(default /nonexistent-dsc-nvme)")) << r.out;
  gSteps.clear();
}

TEST_F(NvmeOffload, TheSpecCheckRefusesNvmeWithoutHost) {
  args[W].host = results[1].host = false;
  expectSpecBug(nvmeSpec(1, false), "parameter 'w' is marked nvme but not "
                                    "host; state in an NVMe file is staged "
                                    "through host memory");
}

TEST_F(NvmeOffload, TheSpecCheckRefusesNvmeOnOtherRoles) {
  args[LR].host = args[LR].nvme = true;
  expectSpecBug(nvmeSpec(1, false), "hyperparameter 'lr' is marked nvme; "
                                    "only parameters and optimizer state "
                                    "can be");
}

TEST_F(NvmeOffload, TheSpecCheckRefusesAnUpdateNotInItsArgumentsFile) {
  results[1].nvme = false;
  expectSpecBug(nvmeSpec(1, false), "parameter result 'w' and its argument "
                                    "are not both in NVMe files");
}

TEST_F(NvmeOffload, TheSpecCheckRefusesAnUpdateNotInPlace) {
  results[1].inPlaceOf = -1;
  expectSpecBug(nvmeSpec(1, false), "parameter result 'w' is in an NVMe file "
                                    "but not computed in place of its "
                                    "argument");
}

TEST_F(NvmeOffload, TheSpecCheckRefusesAnNvmeGradient) {
  results[2].host = results[2].nvme = true;
  expectSpecBug(nvmeSpec(1, false), "gradient result 'w' is marked nvme; "
                                    "only updated parameters and optimizer "
                                    "state can be");
}

} // namespace
