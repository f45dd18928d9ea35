//===- MultiRankTest.cpp - runProgram with several ranks as threads -------===//
//
// Hand-written steps that call ctx.comm as generated code does:
//   - stage 0: linear regression whose gradient and loss are all-reduced;
//   - stage 3 on a hybrid 2 x 2 grid: one flat bucket of two parameters
//     (padded), Param args are shards; the step all-gathers the bucket,
//     reduce-scatters the gradient in the group and all-reduces it across
//     replicas, so the dumps must come back unpadded and per parameter,
//     bitwise equal to the same step run on one rank;
//   - --data windows sliced per rank; failures, manifest mismatches and
//     spec errors.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"
#include "io/checkpoint.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace dsc;
using namespace dsc::program;
using namespace dsc::program::test;

namespace {

std::vector<std::string> lines(const std::string &text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos)
      end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::mutex gMu;
std::map<int, float> gFirstX; // rank -> the first x it saw at step 1

void record(const RankContext &ctx, float x0) {
  std::lock_guard<std::mutex> lock(gMu);
  int r = ctx.comm ? ctx.comm->rank() : 0;
  if (!gFirstX.count(r))
    gFirstX[r] = x0;
}

//===----------------------------------------------------------------------===//
// Stage 0: linear regression, gradient all-reduced
//===----------------------------------------------------------------------===//

enum { W_ARG, X_ARG, Y_ARG, LR_ARG, NUM_ARGS0 };
const ArgSpec kArgs0[] = {
    {ArgRole::Param, "w", {DType::F32, 1, {1}}},
    {ArgRole::Input, "x", {DType::F32, 1, {2}}}, // the rank's 2 rows
    {ArgRole::Input, "y", {DType::F32, 1, {2}}},
    {ArgRole::Hyper, "lr", {DType::F32, 0, {}}},
};
const ResultSpec kResults0[] = {
    {ResultRole::Loss, "loss", {DType::F32, 0, {}}},
    {ResultRole::Param, "w", {DType::F32, 1, {1}}},
    {ResultRole::Grad, "w", {DType::F32, 1, {1}}},
};
const HyperDefault kHypers0[] = {{"lr", 0.01}};
const CollectiveSpec kManifest0[] = {
    {"all_reduce", "w gradient", DType::F32, 1, 1, 2},
    {"all_reduce", "loss", DType::F32, 1, 1, 2},
};

Status linearStage0(const RankContext &ctx, const Tensor *a, const Tensor *r) {
  const float *x = a[X_ARG].as<float>(), *y = a[Y_ARG].as<float>();
  record(ctx, x[0]);
  float w = a[W_ARG].as<float>()[0];
  float loss = 0, g = 0;
  for (int i = 0; i < 2; ++i) {
    float res = w * x[i] - y[i];
    loss += res * res / 2;
    g += 2 * res * x[i] / 2;
  }
  float n = ctx.comm ? float(ctx.comm->size()) : 1.f;
  float gsum = g, lsum = loss;
  if (ctx.comm) {
    if (Status s = ctx.comm->allReduce(Tensor::of(&g, DType::F32, {1}),
                                       Tensor::of(&gsum, DType::F32, {1}), {2},
                                       "w gradient");
        !s.ok())
      return s;
    if (Status s = ctx.comm->allReduce(Tensor::of(&loss, DType::F32, {1}),
                                       Tensor::of(&lsum, DType::F32, {1}), {2},
                                       "loss");
        !s.ok())
      return s;
  }
  *r[0].as<float>() = lsum / n;
  r[1].as<float>()[0] = w - *a[LR_ARG].as<float>() * gsum / n;
  r[2].as<float>()[0] = gsum / n;
  return Status();
}

ProgramSpec stage0Spec(int worldSize) {
  ProgramSpec spec{};
  spec.modelPath = "/nonexistent/linear.onnx";
  spec.optimizer = "sgd";
  spec.microBatch = 2;
  spec.accumSteps = 1;
  spec.tokensPerExample = 1;
  spec.numArgs = NUM_ARGS0;
  spec.args = kArgs0;
  spec.numResults = 3;
  spec.results = kResults0;
  spec.numHypers = 1;
  spec.hypers = kHypers0;
  spec.arenaBytes = 256;
  spec.trainStep = linearStage0;
  spec.worldSize = worldSize;
  spec.groupSize = worldSize;
  spec.stage = 0;
  spec.numCollectives = 2;
  spec.collectives = kManifest0;
  return spec;
}

struct MultiRank : ::testing::Test {
  TempDir dir;
  std::string batch;
  void SetUp() override {
    std::lock_guard<std::mutex> lock(gMu);
    gFirstX.clear();
    std::vector<float> x(8), y(8);
    for (int i = 0; i < 8; ++i) {
      x[i] = float(i + 1);
      y[i] = 3.0f * float(i + 1);
    }
    batch = dir / "batch.safetensors";
    ASSERT_TRUE(io::writeSafetensors(
                    batch, {{"x", Tensor::of(x.data(), DType::F32, {8})},
                            {"y", Tensor::of(y.data(), DType::F32, {8})}})
                    .ok());
  }
};

TEST_F(MultiRank, Stage0AllReducesTheGradientOfTheGlobalBatch) {
  RunResult r = runWith(stage0Spec(4),
                        {"--batch", batch, "--init", "random", "--steps", "40",
                         "--lr", "0.01", "--dump-grads", dir / "g.safetensors",
                         "--dump-params", dir / "p.safetensors"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  std::vector<std::string> out = lines(r.out);
  ASSERT_FALSE(out.empty());
  EXPECT_TRUE(contains(out[0], "global batch 8 = 4 ranks x 2 x 1")) << out[0];
  EXPECT_TRUE(contains(out[0], "| 4 ranks (in-process threads), ZeRO stage 0"))
      << out[0];
  EXPECT_FALSE(contains(out[0], "groups of")) << out[0];
  // Rank r got rows [2r, 2r + 2).
  ASSERT_EQ(gFirstX.size(), 4u);
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(gFirstX[k], float(2 * k + 1));
  // The loss and gradient of the whole batch: 9 mean(x^2) and -6 mean(x^2).
  EXPECT_TRUE(contains(r.out, "step 1/40 | loss 229.5000")) << r.out;
  int stepLines = 0;
  for (const std::string &l : out)
    stepLines += l.rfind("step ", 0) == 0;
  EXPECT_EQ(stepLines, 40); // rank 0 only
  io::SafetensorsFile g, p;
  ASSERT_TRUE(g.read(dir / "g.safetensors").ok());
  Tensor gw, w;
  ASSERT_TRUE(g.get("w", gw).ok());
  EXPECT_EQ(gw.as<float>()[0], -153.0f);
  ASSERT_TRUE(p.read(dir / "p.safetensors").ok());
  ASSERT_TRUE(p.get("w", w).ok());
  EXPECT_NEAR(w.as<float>()[0], 3.0f, 1e-3);
}

TEST_F(MultiRank, AFailingRankIsOneErrorLineNamingIt) {
  ProgramSpec spec = stage0Spec(4);
  spec.trainStep = [](const RankContext &ctx, const Tensor *a,
                      const Tensor *r) -> Status {
    if (ctx.comm->rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return Status::error(StatusCode::InvalidArgument,
                           "matmul(lhs=f32[2,3], rhs=f32[4,5]): inner dims");
    }
    return linearStage0(ctx, a, r);
  };
  RunResult r = runWith(spec, {"--batch", batch, "--init", "random"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "error: rank 2: step 1: matmul(lhs=f32[2,3], rhs=f32[4,5]): "
                   "inner dims\n");
}

// A rank that never returns from its step (stuck outside the collectives):
// the others time out in their collective and the process still ends, with
// exit code 1 and a line naming the stuck rank, within the timeout and its
// grace period (it cannot wait for that thread).
Status hangOnRank1(const RankContext &ctx, const Tensor *a, const Tensor *r) {
  if (ctx.comm && ctx.comm->rank() == 1)
    for (;;)
      std::this_thread::sleep_for(std::chrono::seconds(1));
  return linearStage0(ctx, a, r);
}

// The same after the step's last collective: the others are done and no
// collective waits for it, so only the runner can tell.
Status hangOnRank1AfterCollectives(const RankContext &ctx, const Tensor *a,
                                   const Tensor *r) {
  Status s = linearStage0(ctx, a, r);
  if (ctx.comm && ctx.comm->rank() == 1)
    for (;;)
      std::this_thread::sleep_for(std::chrono::seconds(1));
  return s;
}

TEST_F(MultiRank, AHungRankDoesNotKeepTheProcessAlive) {
  std::string errFile = dir / "err.txt";
  auto start = std::chrono::steady_clock::now();
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::setenv("DSC_COLLECTIVE_TIMEOUT", "1", 1);
    ProgramSpec spec = stage0Spec(4);
    spec.trainStep = hangOnRank1;
    RunResult r = runWith(spec, {"--batch", batch, "--init", "random",
                                 "--steps", "2", "--quiet"});
    writeFile(errFile, r.err); // not reached: the program exits itself
    ::_exit(r.rc == 0 ? 3 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 1) << readFile(errFile);
  // Stuck after its last collective.
  child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::setenv("DSC_COLLECTIVE_TIMEOUT", "1", 1);
    ProgramSpec spec = stage0Spec(4);
    spec.trainStep = hangOnRank1AfterCollectives;
    RunResult r = runWith(spec, {"--batch", batch, "--init", "random",
                                 "--steps", "2", "--quiet"});
    writeFile(errFile, r.err);
    ::_exit(r.rc == 0 ? 3 : 4);
  }
  status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 1) << readFile(errFile);
  EXPECT_LT(took, 30.0);
}

TEST_F(MultiRank, ManifestMismatchAndMissingCollectives) {
  ProgramSpec spec = stage0Spec(4);
  spec.trainStep = [](const RankContext &ctx, const Tensor *a,
                      const Tensor *r) -> Status {
    if (ctx.comm->rank() == 1) {
      float g[2] = {}, out[1];
      return ctx.comm->reduceScatter(Tensor::of(g, DType::F32, {2}),
                                     Tensor::of(out, DType::F32, {1}), {2},
                                     "w gradient");
    }
    return linearStage0(ctx, a, r);
  };
  RunResult r = runWith(spec, {"--batch", batch, "--init", "random"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err,
            "error: rank 1: step 1: collective #0 is reduce_scatter of 2 -> 1 "
            "f32 over the group axis (\"w gradient\") but the manifest says "
            "all_reduce of 1 f32 over the group axis (\"w gradient\")\n");

  // Every rank stops one collective short of the manifest.
  spec = stage0Spec(4);
  spec.trainStep = [](const RankContext &ctx, const Tensor *a,
                      const Tensor *r) -> Status {
    float g = 0, out = 0;
    return ctx.comm->allReduce(Tensor::of(&g, DType::F32, {1}),
                               Tensor::of(&out, DType::F32, {1}), {2},
                               "w gradient");
  };
  r = runWith(spec, {"--batch", batch, "--init", "random"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "error: rank 0: step 1: issued 1 collectives, "
                              "but the manifest has 2 per step"))
      << r.err;
}

TEST_F(MultiRank, SpecAndOptionErrors) {
  ProgramSpec spec = stage0Spec(4);
  spec.groupSize = 3;
  RunResult r = runWith(spec, {"--help"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "the group size must divide the world size"))
      << r.err;
  r = runWith(stage0Spec(4),
              {"--batch", batch, "--init", "random", "--gradcheck", "2"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "--gradcheck needs a program compiled for one "
                              "rank"))
      << r.err;
  // The batch file must hold the global batch: 4 ranks x 2 rows.
  std::vector<float> x(2);
  std::string small = dir / "small.safetensors";
  ASSERT_TRUE(io::writeSafetensors(
                  small, {{"x", Tensor::of(x.data(), DType::F32, {2})},
                          {"y", Tensor::of(x.data(), DType::F32, {2})}})
                  .ok());
  r = runWith(stage0Spec(4), {"--batch", small, "--init", "random"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "dim 0 is the global batch, 8 (4 ranks x "
                              "micro-batch 2 x 1 accumulation steps)"))
      << r.err;
  r = runWith(stage0Spec(4), {"--help"});
  EXPECT_TRUE(contains(r.out, "global batch of 8 examples = 4 ranks x "
                              "micro-batch 2 x 1"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "Compiled for 4 ranks (ZeRO stage 0)")) << r.out;
}

//===----------------------------------------------------------------------===//
// Stage 3, hybrid: one bucket of a[2,3] and b[3], padded to 10
//===----------------------------------------------------------------------===//

// Grid 2 x 2: the bucket is sharded over the group axis (shards of 5),
// replicated across the two replicas.
const BucketEntry kEntries[] = {
    {"a", 0, 6, 2, {2, 3}},
    {"b", 6, 3}, // shape left out: not in the (absent) model, so [3]
};
const BucketSpec kBuckets[] = {{"bucket0", DType::F32, 10, 2, kEntries}};

enum { P_ARG, X3_ARG, LR3_ARG, NUM_ARGS3 };
ArgSpec args3(int64_t shard) {
  return {ArgRole::Param, "bucket0", {DType::F32, 1, {shard}}, 0};
}
const ResultSpec kResults3Hybrid[] = {
    {ResultRole::Loss, "loss", {DType::F32, 0, {}}},
    {ResultRole::Param, "bucket0", {DType::F32, 1, {5}}, 0},
    {ResultRole::Grad, "bucket0", {DType::F32, 1, {5}}, 0},
};
const ResultSpec kResults3Single[] = {
    {ResultRole::Loss, "loss", {DType::F32, 0, {}}},
    {ResultRole::Param, "bucket0", {DType::F32, 1, {10}}, 0},
    {ResultRole::Grad, "bucket0", {DType::F32, 1, {10}}, 0},
};
const ArgSpec kArgs3Hybrid[] = {
    args3(5),
    {ArgRole::Input, "x", {DType::F32, 2, {2, 10}}},
    {ArgRole::Hyper, "lr", {DType::F32, 0, {}}},
};
const ArgSpec kArgs3Single[] = {
    args3(10),
    {ArgRole::Input, "x", {DType::F32, 2, {8, 10}}},
    {ArgRole::Hyper, "lr", {DType::F32, 0, {}}},
};
const CollectiveSpec kManifest3[] = {
    {"all_gather", "bucket0 params", DType::F32, 5, 10, 2},
    {"reduce_scatter", "bucket0 grads", DType::F32, 10, 5, 2},
    {"all_reduce", "bucket0 grads across replicas", DType::F32, 5, 5, 1},
    {"all_reduce", "loss", DType::F32, 1, 1, 3},
};

/// loss = sum over the 8 global rows of 0.5 |p - x_row|^2 / 8 over the 9
/// real elements; SGD. The padding must read 0 in the gathered bucket.
Status stage3Step(const RankContext &ctx, const Tensor *a, const Tensor *r) {
  const int64_t shard = a[P_ARG].numel();
  const int64_t rows = a[X3_ARG].shape[0];
  record(ctx, a[X3_ARG].as<float>()[0]);
  float full[10], grad[10] = {}, gshard[5], gsum[5], loss = 0, lsum = 0;
  if (ctx.comm) {
    if (Status s =
            ctx.comm->allGather(a[P_ARG], Tensor::of(full, DType::F32, {10}),
                                {2}, "bucket0 params");
        !s.ok())
      return s;
  } else {
    std::memcpy(full, a[P_ARG].data, sizeof full);
  }
  if (full[9] != 0.0f)
    return Status::error(StatusCode::InvalidArgument, "padding is not zero");
  const float *x = a[X3_ARG].as<float>();
  for (int64_t row = 0; row < rows; ++row)
    for (int i = 0; i < 9; ++i) {
      float d = full[i] - x[row * 10 + i];
      grad[i] += d / 8;
      loss += 0.5f * d * d / 8;
    }
  const float *g = grad;
  if (ctx.comm) {
    if (Status s = ctx.comm->reduceScatter(Tensor::of(grad, DType::F32, {10}),
                                           Tensor::of(gshard, DType::F32, {5}),
                                           {2}, "bucket0 grads");
        !s.ok())
      return s;
    if (Status s = ctx.comm->allReduce(Tensor::of(gshard, DType::F32, {5}),
                                       Tensor::of(gsum, DType::F32, {5}), {1},
                                       "bucket0 grads across replicas");
        !s.ok())
      return s;
    if (Status s = ctx.comm->allReduce(Tensor::of(&loss, DType::F32, {1}),
                                       Tensor::of(&lsum, DType::F32, {1}), {3},
                                       "loss");
        !s.ok())
      return s;
    g = gsum;
  } else {
    lsum = loss;
  }
  float lr = *a[LR3_ARG].as<float>();
  for (int64_t i = 0; i < shard; ++i) {
    r[2].as<float>()[i] = g[i];
    r[1].as<float>()[i] = a[P_ARG].as<float>()[i] - lr * g[i];
  }
  *r[0].as<float>() = lsum;
  return Status();
}

ProgramSpec stage3Spec(bool hybrid) {
  ProgramSpec spec{};
  spec.modelPath = "/nonexistent/two.onnx";
  spec.optimizer = "sgd";
  spec.microBatch = hybrid ? 1 : 4;
  spec.accumSteps = 2;
  spec.tokensPerExample = 1;
  spec.numArgs = NUM_ARGS3;
  spec.args = hybrid ? kArgs3Hybrid : kArgs3Single;
  spec.numResults = 3;
  spec.results = hybrid ? kResults3Hybrid : kResults3Single;
  spec.numHypers = 1;
  spec.hypers = kHypers0;
  spec.arenaBytes = 64;
  spec.trainStep = stage3Step;
  spec.worldSize = hybrid ? 4 : 1;
  spec.groupSize = hybrid ? 2 : 1;
  spec.stage = 3;
  spec.numBuckets = 1;
  spec.buckets = kBuckets;
  spec.numCollectives = hybrid ? 4 : 0;
  spec.collectives = hybrid ? kManifest3 : nullptr;
  return spec;
}

TEST(MultiRankStage3, ShardsPackUpdateAndDumpUnpadded) {
  TempDir dir;
  std::vector<float> a0 = {1, 2, 3, 4, 5, 6}, b0 = {-1, -2, -3};
  std::vector<float> x(80);
  for (int row = 0; row < 8; ++row)
    for (int col = 0; col < 10; ++col)
      x[row * 10 + col] = float(row * 10 + col);
  std::string init = dir / "init.safetensors", batch = dir / "x.safetensors";
  ASSERT_TRUE(io::writeSafetensors(
                  init, {{"a", Tensor::of(a0.data(), DType::F32, {2, 3})},
                         {"b", Tensor::of(b0.data(), DType::F32, {3})}})
                  .ok());
  ASSERT_TRUE(io::writeSafetensors(
                  batch, {{"x", Tensor::of(x.data(), DType::F32, {8, 10})}})
                  .ok());
  auto run = [&](bool hybrid, const std::string &tag) {
    {
      std::lock_guard<std::mutex> lock(gMu);
      gFirstX.clear();
    }
    RunResult r =
        runWith(stage3Spec(hybrid),
                {"--batch", batch, "--init", init, "--steps", "3", "--lr",
                 "0.5", "--dump-grads", dir / (tag + "g.safetensors"),
                 "--dump-params", dir / (tag + "p.safetensors")});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.err, "");
    return r;
  };
  RunResult one = run(false, "one");
  RunResult four = run(true, "four");
  std::string first = lines(four.out)[0];
  EXPECT_TRUE(contains(first, "9 parameters (36 B)")) << first;
  EXPECT_TRUE(contains(first, "global batch 8 = 4 ranks x 1 x 2")) << first;
  EXPECT_TRUE(contains(first, "| 4 ranks (in-process threads), ZeRO stage 3, "
                              "groups of 2"))
      << first;
  EXPECT_TRUE(contains(four.out, "wrote ")) << four.out;
  // Rank r got rows [2r, 2r + 2) of the global batch.
  ASSERT_EQ(gFirstX.size(), 4u);
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(gFirstX[k], float(20 * k));

  // Per parameter, unpadded, full shapes; the same bytes as on one rank.
  for (const char *kind : {"g", "p"}) {
    io::SafetensorsFile f1, f4;
    ASSERT_TRUE(
        f1.read(dir / (std::string("one") + kind + ".safetensors")).ok());
    ASSERT_TRUE(
        f4.read(dir / (std::string("four") + kind + ".safetensors")).ok());
    EXPECT_EQ(f4.names(), (std::vector<std::string>{"a", "b"})) << kind;
    for (const char *name : {"a", "b"}) {
      Tensor t1, t4;
      ASSERT_TRUE(f1.get(name, t1).ok());
      ASSERT_TRUE(f4.get(name, t4).ok());
      EXPECT_EQ(t4.dims(),
                (std::string(name) == "a" ? std::vector<int64_t>{2, 3}
                                          : std::vector<int64_t>{3}));
      ASSERT_EQ(t1.dims(), t4.dims());
      EXPECT_EQ(std::memcmp(t1.data, t4.data, t1.nbytes()), 0)
          << kind << " " << name;
    }
  }
  // Closed form: p_t = m + (1 - lr)^t (p_0 - m), m = the column means
  // (col + 35); the first gradient is p_0 - m.
  io::SafetensorsFile g, p;
  ASSERT_TRUE(g.read(dir / "fourg.safetensors").ok());
  ASSERT_TRUE(p.read(dir / "fourp.safetensors").ok());
  Tensor ga, gb, pa, pb;
  ASSERT_TRUE(g.get("a", ga).ok());
  ASSERT_TRUE(g.get("b", gb).ok());
  ASSERT_TRUE(p.get("a", pa).ok());
  ASSERT_TRUE(p.get("b", pb).ok());
  for (int i = 0; i < 9; ++i) {
    float p0 = i < 6 ? a0[i] : b0[i - 6], m = float(i + 35);
    float gi = i < 6 ? ga.as<float>()[i] : gb.as<float>()[i - 6];
    float pi = i < 6 ? pa.as<float>()[i] : pb.as<float>()[i - 6];
    EXPECT_EQ(gi, p0 - m) << i;
    EXPECT_EQ(pi, m + 0.125f * (p0 - m)) << i;
  }
}

TEST(MultiRankStage3, ShardSizeMustMatchTheBucket) {
  ProgramSpec spec = stage3Spec(true);
  spec.groupSize = 4; // shards of 10 / 4: not even
  RunResult r = runWith(spec, {"--help"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "not a multiple of the group size 4")) << r.err;
}

//===----------------------------------------------------------------------===//
// --data: the global batch's windows, rank r its contiguous rows
//===----------------------------------------------------------------------===//

std::map<int, std::vector<int64_t>> gTokens; // rank -> idx of step 1

const ArgSpec kTokArgs2[] = {{ArgRole::Input, "idx", {DType::I64, 2, {2, 4}}}};
const ArgSpec kTokArgs1[] = {{ArgRole::Input, "idx", {DType::I64, 2, {4, 4}}}};
const ResultSpec kTokResults[] = {
    {ResultRole::Loss, "loss", {DType::F32, 0, {}}}};

Status tokenRecord(const RankContext &ctx, const Tensor *a, const Tensor *r) {
  std::lock_guard<std::mutex> lock(gMu);
  int rank = ctx.comm ? ctx.comm->rank() : 0;
  if (!gTokens.count(rank))
    gTokens[rank].assign(a[0].as<int64_t>(), a[0].as<int64_t>() + a[0].numel());
  *r[0].as<float>() = 0;
  return Status();
}

TEST(MultiRankData, TokenWindowsAreSlicedPerRank) {
  TempDir dir;
  std::string tokens;
  for (uint16_t k = 0; k < 500; ++k)
    tokens.append(reinterpret_cast<const char *>(&k), 2);
  writeFile(dir / "train.bin", tokens);
  ProgramSpec spec{};
  spec.modelPath = "/nonexistent/lm.onnx";
  spec.optimizer = "adamw";
  spec.microBatch = 2;
  spec.accumSteps = 1;
  spec.tokensPerExample = 4;
  spec.numArgs = 1;
  spec.args = kTokArgs2;
  spec.numResults = 1;
  spec.results = kTokResults;
  spec.trainStep = tokenRecord;
  spec.worldSize = 2;
  gTokens.clear();
  RunResult r = runWith(
      spec, {"--data", dir / "train.bin", "--steps", "1", "--seed", "5"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<int64_t> split = gTokens[0];
  split.insert(split.end(), gTokens[1].begin(), gTokens[1].end());
  // One rank with the whole global batch draws the same windows.
  spec.args = kTokArgs1;
  spec.microBatch = 4;
  spec.worldSize = 1;
  gTokens.clear();
  r = runWith(spec,
              {"--data", dir / "train.bin", "--steps", "1", "--seed", "5"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(split, gTokens[0]);
  EXPECT_EQ(split.size(), 16u);
}

// Checkpoints of a hybrid stage-3 run (4 ranks, groups of 2): only the
// ranks of group 0 write shards, as pieces of the parameters they overlap;
// a resume continues bit for bit, and so does a resume into the program for
// one rank (another world size and group size).
TEST(MultiRankStage3, CheckpointsResumeAndReshard) {
  TempDir dir;
  std::vector<float> a0 = {1, 2, 3, 4, 5, 6}, b0 = {-1, -2, -3};
  std::vector<float> x(80);
  for (int i = 0; i < 80; ++i)
    x[size_t(i)] = float(i % 7) - 2.5f;
  std::string init = dir / "init.safetensors", batch = dir / "x.safetensors";
  ASSERT_TRUE(io::writeSafetensors(
                  init, {{"a", Tensor::of(a0.data(), DType::F32, {2, 3})},
                         {"b", Tensor::of(b0.data(), DType::F32, {3})}})
                  .ok());
  ASSERT_TRUE(io::writeSafetensors(
                  batch, {{"x", Tensor::of(x.data(), DType::F32, {8, 10})}})
                  .ok());
  std::vector<std::string> common = {"--batch", batch,  "--init", init,
                                     "--lr",    "0.25", "--quiet"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  RunResult full = runWith(
      stage3Spec(true),
      with({"--steps", "4", "--dump-params", dir / "full.safetensors"}));
  ASSERT_EQ(full.rc, 0) << full.err;
  RunResult first = runWith(stage3Spec(true),
                            with({"--steps", "2", "--save-dir", dir / "ck"}));
  ASSERT_EQ(first.rc, 0) << first.err;
  EXPECT_EQ(readFile(dir / "ck/latest"), "step_2\n");
  // Group 0 (ranks 0 and 1) wrote the shards; replicas 2 and 3 nothing.
  io::CheckpointReader reader;
  ASSERT_TRUE(reader.open(dir / "ck").ok());
  const io::CheckpointManifest &m = reader.manifest();
  EXPECT_EQ(m.step, 2);
  EXPECT_EQ(m.worldSize, 4);
  EXPECT_EQ(m.groupSize, 2);
  EXPECT_EQ(m.files.size(), 2u);
  const io::CheckpointTensor *a = m.find("param/a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  // Shards of 5 elements: rank 0 holds a[0, 5), rank 1 a[5] and b.
  ASSERT_EQ(a->pieces.size(), 2u);
  EXPECT_EQ(a->pieces[0].numel, 5);
  EXPECT_EQ(a->pieces[1].offset, 5);
  EXPECT_EQ(a->pieces[1].numel, 1);
  ASSERT_NE(m.find("param/b"), nullptr);
  EXPECT_EQ(m.find("param/b")->shape, (std::vector<int64_t>{3}));
  std::vector<std::string> problems;
  ASSERT_TRUE(reader.verify(problems).ok());
  EXPECT_TRUE(problems.empty());

  auto sameParams = [&](const std::string &path) {
    io::SafetensorsFile f1, f2;
    ASSERT_TRUE(f1.read(dir / "full.safetensors").ok());
    ASSERT_TRUE(f2.read(path).ok());
    for (const char *name : {"a", "b"}) {
      Tensor t1, t2;
      ASSERT_TRUE(f1.get(name, t1).ok());
      ASSERT_TRUE(f2.get(name, t2).ok());
      ASSERT_EQ(t1.dims(), t2.dims()) << name;
      EXPECT_EQ(std::memcmp(t1.data, t2.data, t1.nbytes()), 0) << name;
    }
  };
  RunResult resumed = runWith(
      stage3Spec(true), with({"--steps", "4", "--resume", dir / "ck",
                              "--dump-params", dir / "resumed.safetensors"}));
  ASSERT_EQ(resumed.rc, 0) << resumed.err;
  sameParams(dir / "resumed.safetensors");
  RunResult one = runWith(stage3Spec(false),
                          with({"--steps", "4", "--resume", dir / "ck",
                                "--dump-params", dir / "one.safetensors"}));
  ASSERT_EQ(one.rc, 0) << one.err;
  sameParams(dir / "one.safetensors");
  // A resume past the end runs nothing and keeps the state.
  RunResult done =
      runWith(stage3Spec(true), with({"--steps", "2", "--resume", dir / "ck"}));
  EXPECT_EQ(done.rc, 0) << done.err;
}

} // namespace
