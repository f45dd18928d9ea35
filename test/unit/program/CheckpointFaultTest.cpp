//===- CheckpointFaultTest.cpp - Faults a long run survives ---------------===//
//
// The program shell on a hand-built spec (a parameter big enough that its
// checkpoint shard is larger than the file size limit a forked child runs
// under): a full disk while saving (RLIMIT_FSIZE: writes fail with EFBIG,
// as on a full disk with ENOSPC), a corrupted or truncated checkpoint on
// --resume, what a killed save leaves behind, and non-finite values in the
// batch and in the gradients.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"
#include "io/checkpoint.h"
#include "io/output_file.h"

#include <cmath>
#include <csignal>
#include <cstring>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace dsc;
using namespace dsc::program;
using namespace dsc::program::test;

namespace {

constexpr int64_t kN = 2048; // elements of w: its shard is ~16 KiB

enum Arg { W, MOM, COUNT, X, LR, MU, STEP, SEED, NUM_ARGS };
enum Result { LOSS, W_NEW, MOM_NEW, COUNT_NEW, GRAD_W, GNORM };

const ArgSpec kArgs[] = {
    {ArgRole::Param, "w", {DType::F32, 1, {kN}}},
    {ArgRole::OptState, "w/momentum_buffer", {DType::F32, 1, {kN}}},
    {ArgRole::Buffer, "count", {DType::I64, 0, {}}},
    {ArgRole::Input, "x", {DType::F32, 1, {4}}},
    {ArgRole::Hyper, "lr", {DType::F32, 0, {}}},
    {ArgRole::Hyper, "momentum", {DType::F32, 0, {}}},
    {ArgRole::Step, "step", {DType::I64, 0, {}}},
    {ArgRole::Seed, "seed", {DType::I64, 0, {}}},
};
const ResultSpec kResults[] = {
    {ResultRole::Loss, "loss", {DType::F32, 0, {}}},
    {ResultRole::Param, "w", {DType::F32, 1, {kN}}},
    {ResultRole::OptState, "w/momentum_buffer", {DType::F32, 1, {kN}}},
    {ResultRole::BufferUpdate, "count", {DType::I64, 0, {}}},
    {ResultRole::Grad, "w", {DType::F32, 1, {kN}}},
    {ResultRole::GradNorm, "grad_norm", {DType::F32, 0, {}}},
};
const HyperDefault kHypers[] = {{"lr", 0.1}, {"momentum", 0.5}};

// From this step on the gradient is nan (0: never).
int64_t gNanFrom = 0;

/// loss = mean((w - mean(x))^2), SGD with momentum.
Status quadraticStep(const RankContext &, const Tensor *a, const Tensor *r) {
  const float *w = a[W].as<float>(), *m = a[MOM].as<float>();
  const float *x = a[X].as<float>();
  float lr = *a[LR].as<float>(), mu = *a[MU].as<float>();
  int64_t step = *a[STEP].as<int64_t>();
  float target = (x[0] + x[1] + x[2] + x[3]) / 4;
  float loss = 0, norm = 0;
  for (int64_t i = 0; i < kN; ++i) {
    float d = w[i] - target;
    float g = 2 * d / float(kN);
    if (gNanFrom > 0 && step >= gNanFrom && i == 7)
      g = NAN;
    loss += d * d / float(kN);
    norm += g * g;
    float m2 = mu * m[i] + g;
    r[GRAD_W].as<float>()[i] = g;
    r[MOM_NEW].as<float>()[i] = m2;
    r[W_NEW].as<float>()[i] = w[i] - lr * m2;
  }
  *r[LOSS].as<float>() = loss + (std::isfinite(norm) ? 0 : NAN);
  *r[GNORM].as<float>() = std::sqrt(norm);
  *r[COUNT_NEW].as<int64_t>() = *a[COUNT].as<int64_t>() + 1;
  return Status();
}

ProgramSpec faultSpec() {
  ProgramSpec spec{};
  spec.modelPath = "/nonexistent/quadratic.onnx";
  spec.optimizer = "sgd";
  spec.microBatch = 4;
  spec.accumSteps = 1;
  spec.tokensPerExample = 1;
  spec.numArgs = NUM_ARGS;
  spec.args = kArgs;
  spec.numResults = 6;
  spec.results = kResults;
  spec.numHypers = 2;
  spec.hypers = kHypers;
  spec.arenaBytes = 64;
  spec.trainStep = quadraticStep;
  return spec;
}

bool exists(const std::string &path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

int countOf(const std::string &s, const std::string &part) {
  int n = 0;
  for (size_t at = s.find(part); at != std::string::npos;
       at = s.find(part, at + 1))
    ++n;
  return n;
}

struct CheckpointFaults : ::testing::Test {
  TempDir dir;
  std::string batch, init, ckpt;
  void SetUp() override {
    gNanFrom = 0;
    // The temporary-file signal handlers (io/output_file.h) are installed
    // once per process and chain to the handlers found then: install them
    // now, before a run with --save-dir sets its own SIGTERM handler, so
    // that a later test's SIGTERM still kills.
    io::unregisterTemporary(io::registerTemporary("/nonexistent/dsc-test"));
    float x[4] = {1, 2, 3, 4};
    std::vector<float> w(kN);
    for (int64_t i = 0; i < kN; ++i)
      w[size_t(i)] = float(i % 17) / 4;
    int64_t count = 0;
    batch = dir / "batch.safetensors";
    init = dir / "init.safetensors";
    ckpt = dir / "ckpt";
    ASSERT_TRUE(io::writeSafetensors(
                    init, {{"w", Tensor::of(w.data(), DType::F32, {kN})},
                           {"count", Tensor::of(&count, DType::I64, {})}})
                    .ok());
    ASSERT_TRUE(
        io::writeSafetensors(batch, {{"x", Tensor::of(x, DType::F32, {4})}})
            .ok());
  }
  std::vector<std::string> args(std::vector<std::string> extra) const {
    std::vector<std::string> a = {"--batch", batch, "--init", init, "--quiet"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  /// runWith in a forked child whose files may not grow beyond `limit`
  /// bytes (its stdout and stderr go to files below the limit).
  RunResult runLimited(const std::vector<std::string> &a, rlim_t limit) {
    std::string outPath = dir / "child.out", errPath = dir / "child.err";
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      std::signal(SIGXFSZ, SIG_IGN); // as runProgram does
      struct rlimit rl = {limit, limit};
      ::setrlimit(RLIMIT_FSIZE, &rl);
      RunResult r = runWith(faultSpec(), a);
      writeFile(outPath, r.out.substr(0, 2000));
      writeFile(errPath, r.err.substr(0, 3000));
      ::_exit(r.rc);
    }
    RunResult r;
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
      return r;
    r.rc = WEXITSTATUS(status);
    r.out = readFile(outPath);
    r.err = readFile(errPath);
    return r;
  }

  /// Saves steps 1 and 2 into ckpt.
  void saveTwoSteps() {
    RunResult r = runWith(faultSpec(), args({"--save-dir", ckpt, "--save-every",
                                             "1", "--steps", "2"}));
    ASSERT_EQ(r.rc, 0) << r.err;
    ASSERT_EQ(readFile(ckpt + "/latest"), "step_2\n");
  }

  void expectIntact(const std::string &latest) {
    EXPECT_EQ(readFile(ckpt + "/latest"), latest + "\n");
    io::CheckpointReader reader;
    ASSERT_TRUE(reader.open(ckpt).ok());
    std::vector<std::string> problems;
    ASSERT_TRUE(reader.verify(problems).ok());
    EXPECT_TRUE(problems.empty()) << problems[0];
  }
};

//===----------------------------------------------------------------------===//
// A full disk while saving
//===----------------------------------------------------------------------===//

TEST_F(CheckpointFaults, AFullDiskStopsTheRunAndKeepsThePreviousCheckpoint) {
  saveTwoSteps();
  RunResult r = runLimited(args({"--resume", ckpt, "--save-dir", ckpt,
                                 "--save-every", "1", "--steps", "4"}),
                           8192);
  EXPECT_EQ(r.rc, 1) << r.err;
  // The file and the errno text, once, as the error.
  EXPECT_TRUE(contains(r.err, "error: --save-dir: ")) << r.err;
  EXPECT_TRUE(contains(r.err, "step_3.tmp/rank_00000.safetensors")) << r.err;
  EXPECT_TRUE(contains(r.err, std::strerror(EFBIG))) << r.err;
  EXPECT_TRUE(contains(r.err, "note: removed " + ckpt + "/step_3.tmp"))
      << r.err;
  EXPECT_FALSE(exists(ckpt + "/step_3.tmp"));
  EXPECT_FALSE(exists(ckpt + "/step_3"));
  expectIntact("step_2");
}

TEST_F(CheckpointFaults, OnSaveErrorContinueWarnsAndRetriesEachSave) {
  saveTwoSteps();
  RunResult r =
      runLimited(args({"--resume", ckpt, "--save-dir", ckpt, "--save-every",
                       "1", "--steps", "5", "--on-save-error", "continue"}),
                 8192);
  EXPECT_EQ(r.rc, 0) << r.err;
  // Steps 3, 4 and 5 each tried and warned (the end of the run does not
  // retry step 5 a second time).
  EXPECT_EQ(countOf(r.err, "the checkpoint was not saved: --save-dir: "), 3)
      << r.err;
  EXPECT_TRUE(contains(r.err, "warning: step 4: the checkpoint was not saved"))
      << r.err;
  EXPECT_TRUE(contains(r.err, std::strerror(EFBIG))) << r.err;
  EXPECT_TRUE(contains(r.err, "3 checkpoint saves failed")) << r.err;
  for (const char *step : {"step_3", "step_4", "step_5"}) {
    EXPECT_FALSE(exists(ckpt + "/" + step + ".tmp")) << step;
    EXPECT_FALSE(exists(ckpt + "/" + step)) << step;
  }
  expectIntact("step_2");
}

TEST_F(CheckpointFaults, OnSaveErrorIsChecked) {
  RunResult r = runWith(faultSpec(), args({"--on-save-error", "retry"}));
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "--on-save-error expects stop or continue"))
      << r.err;
  r = runWith(faultSpec(), args({"--max-bad-steps", "-1"}));
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "--max-bad-steps expects a count >= 0")) << r.err;
  r = runWith(faultSpec(), {"--help"});
  EXPECT_TRUE(contains(r.out, "--on-save-error X")) << r.out;
  EXPECT_TRUE(contains(r.out, "--max-bad-steps K")) << r.out;
}

//===----------------------------------------------------------------------===//
// A corrupted or truncated checkpoint on --resume
//===----------------------------------------------------------------------===//

TEST_F(CheckpointFaults, ACorruptedShardIsRefusedNamingTheFileAndTensor) {
  saveTwoSteps();
  std::string shard = ckpt + "/step_2/rank_00000.safetensors";
  std::string bytes = readFile(shard);
  ASSERT_GT(bytes.size(), 1000u);
  bytes[bytes.size() - 100] ^= 0x40; // a flipped bit in the data
  writeFile(shard, bytes);
  RunResult r = runWith(faultSpec(), args({"--resume", ckpt, "--steps", "3"}));
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "error: --resume: ")) << r.err;
  EXPECT_TRUE(contains(r.err, shard + ": sha256 ")) << r.err;
  EXPECT_TRUE(contains(r.err, "corrupted")) << r.err;
  EXPECT_TRUE(contains(r.err, "'param/w'") || contains(r.err, "(param/w,") ||
              contains(r.err, "(optim/w/momentum_buffer,") ||
              contains(r.err, "(buffer/count,"))
      << r.err;
}

TEST_F(CheckpointFaults, ATruncatedShardIsRefusedNamingTheFileAndTensors) {
  saveTwoSteps();
  std::string shard = ckpt + "/step_2/rank_00000.safetensors";
  std::string bytes = readFile(shard);
  writeFile(shard, bytes.substr(0, bytes.size() / 2));
  RunResult r = runWith(faultSpec(), args({"--resume", ckpt, "--steps", "3"}));
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, shard + " has " +
                                  std::to_string(bytes.size() / 2) + " bytes"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "truncated")) << r.err;
  EXPECT_TRUE(contains(r.err, "'param/w'")) << r.err;
}

//===----------------------------------------------------------------------===//
// What a killed save leaves behind
//===----------------------------------------------------------------------===//

TEST_F(CheckpointFaults, AKillBetweenTheRenamesOfAReSaveIsRepaired) {
  saveTwoSteps();
  // A re-save of step 2 killed after step_2 was moved aside and before
  // step_2.tmp took its place; `latest` names step_2.
  ASSERT_EQ(
      ::rename((ckpt + "/step_2").c_str(), (ckpt + "/step_2.old").c_str()), 0);
  ASSERT_EQ(::mkdir((ckpt + "/step_2.tmp").c_str(), 0755), 0);
  writeFile(ckpt + "/latest.tmp.AbC123", "step_3\n");
  std::vector<std::string> fixed = io::removeStaleCheckpoints(ckpt);
  EXPECT_EQ(fixed.size(), 3u);
  EXPECT_TRUE(exists(ckpt + "/step_2"));
  EXPECT_FALSE(exists(ckpt + "/step_2.old"));
  EXPECT_FALSE(exists(ckpt + "/step_2.tmp"));
  EXPECT_FALSE(exists(ckpt + "/latest.tmp.AbC123"));
  expectIntact("step_2");

  // Both there (killed while removing the old one): the old one goes.
  ASSERT_EQ(::mkdir((ckpt + "/step_2.old").c_str(), 0755), 0);
  fixed = io::removeStaleCheckpoints(ckpt);
  EXPECT_EQ(fixed.size(), 1u);
  EXPECT_FALSE(exists(ckpt + "/step_2.old"));
  expectIntact("step_2");

  // And the run starting there says so and resumes.
  ASSERT_EQ(
      ::rename((ckpt + "/step_2").c_str(), (ckpt + "/step_2.old").c_str()), 0);
  RunResult r =
      runWith(faultSpec(),
              args({"--save-dir", ckpt, "--resume", ckpt, "--steps", "3"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "renamed back to " + ckpt + "/step_2")) << r.err;
  expectIntact("step_3");
}

//===----------------------------------------------------------------------===//
// Non-finite values
//===----------------------------------------------------------------------===//

TEST_F(CheckpointFaults, ANonFiniteBatchIsNamedBeforeTheFirstStep) {
  float x[4] = {1, 2, NAN, 4};
  ASSERT_TRUE(
      io::writeSafetensors(batch, {{"x", Tensor::of(x, DType::F32, {4})}})
          .ok());
  RunResult r = runWith(faultSpec(), args({"--steps", "2"}));
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "error: --batch " + batch +
                       ": input 'x' holds nan at element 2 (example 2 of 4); "
                       "every step's loss would be non-finite. Fix or filter "
                       "the data\n");
}

TEST_F(CheckpointFaults, NonFiniteGradientsStopAfterMaxBadSteps) {
  gNanFrom = 3;
  RunResult r =
      runWith(faultSpec(), args({"--steps", "20", "--max-bad-steps", "3",
                                 "--save-dir", ckpt, "--save-every", "1"}));
  EXPECT_EQ(r.rc, 1) << r.err;
  // One warning for the run of bad steps, naming the first and the
  // gradient; then the error at the third in a row.
  EXPECT_EQ(countOf(r.err, "warning: "), 1) << r.err;
  EXPECT_TRUE(contains(r.err, "warning: step 3: the loss is nan; non-finite "
                              "gradients in w;"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "error: step 5: 3 steps in a row with a "
                              "non-finite loss or gradient norm (since step 3, "
                              "gradients in w); stopping (--max-bad-steps 3)"))
      << r.err;
  // The bad steps were not checkpointed.
  EXPECT_EQ(readFile(ckpt + "/latest"), "step_2\n");
  EXPECT_FALSE(exists(ckpt + "/step_3"));
}

TEST_F(CheckpointFaults, TheDefaultStopsAfterTenAndZeroNeverStops) {
  gNanFrom = 2;
  RunResult r = runWith(faultSpec(), args({"--steps", "30"}));
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "error: step 11: 10 steps in a row")) << r.err;
  r = runWith(faultSpec(), args({"--steps", "30", "--max-bad-steps", "0"}));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(countOf(r.err, "warning: step 2: the loss is nan"), 1) << r.err;
  EXPECT_TRUE(contains(r.err, "training goes on (--max-bad-steps 0)")) << r.err;
}

} // namespace
