//===- ProgramTest.cpp - runProgram end to end on hand-written steps ------===//
//
// The steps here are plain C++ functions standing in for generated code:
// linear regression y = w*x with SGD momentum written by hand, an identity
// step over the MLP fixture's parameters (to check --init), and a token
// step that checks the --data windows it is fed.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"
#include "program/data.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>
#include <sys/stat.h>
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

void expectOneErrorLine(const RunResult &r, const std::string &part) {
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
  EXPECT_TRUE(contains(r.err, part)) << r.err;
}

//===----------------------------------------------------------------------===//
// Linear regression: loss = mean((w x - y)^2), SGD with momentum
//===----------------------------------------------------------------------===//

enum LinArg { W, MOM, COUNT, X, Y, LR, MU, STEP, SEED, NUM_LIN_ARGS };
enum LinResult { LOSS, W_NEW, MOM_NEW, COUNT_NEW, GRAD_W, GNORM, LR_USED };

const ArgSpec kLinArgs[] = {
    {ArgRole::Param, "w", {DType::F32, 1, {1}}},
    {ArgRole::OptState, "w/momentum_buffer", {DType::F32, 1, {1}}},
    {ArgRole::Buffer, "bn.num_batches_tracked", {DType::I64, 0, {}}},
    {ArgRole::Input, "x", {DType::F32, 1, {8}}},
    {ArgRole::Input, "y", {DType::F32, 1, {8}}},
    {ArgRole::Hyper, "lr", {DType::F32, 0, {}}},
    {ArgRole::Hyper, "momentum", {DType::F32, 0, {}}},
    {ArgRole::Step, "step", {DType::I64, 0, {}}},
    {ArgRole::Seed, "seed", {DType::I64, 0, {}}},
};
const ResultSpec kLinResults[] = {
    {ResultRole::Loss, "loss", {DType::F32, 0, {}}},
    {ResultRole::Param, "w", {DType::F32, 1, {1}}},
    {ResultRole::OptState, "w/momentum_buffer", {DType::F32, 1, {1}}},
    {ResultRole::BufferUpdate, "bn.num_batches_tracked", {DType::I64, 0, {}}},
    {ResultRole::Grad, "w", {DType::F32, 1, {1}}},
    {ResultRole::GradNorm, "grad_norm", {DType::F32, 0, {}}},
    {ResultRole::Lr, "lr", {DType::F32, 0, {}}},
};
const HyperDefault kLinHypers[] = {{"lr", 0.01}, {"momentum", 0.9}};

struct Seen {
  std::vector<int64_t> steps, seeds;
  std::vector<const void *> wArgs;
};
Seen gSeen;

Status linearStep(const RankContext &ctx, const Tensor *a, const Tensor *r) {
  HostArena &arena = *ctx.arena;
  gSeen.steps.push_back(*a[STEP].as<int64_t>());
  gSeen.seeds.push_back(*a[SEED].as<int64_t>());
  gSeen.wArgs.push_back(a[W].data);
  float w = a[W].as<float>()[0], m = a[MOM].as<float>()[0];
  float lr = *a[LR].as<float>(), mu = *a[MU].as<float>();
  const float *x = a[X].as<float>(), *y = a[Y].as<float>();
  void *scratch = nullptr;
  if (Status s = arena.allocate(8 * sizeof(float), &scratch); !s.ok())
    return s;
  float *res = static_cast<float *>(scratch);
  float loss = 0, g = 0;
  for (int i = 0; i < 8; ++i) {
    res[i] = w * x[i] - y[i];
    loss += res[i] * res[i] / 8;
    g += 2 * res[i] * x[i] / 8;
  }
  float m2 = mu * m + g;
  *r[LOSS].as<float>() = loss;
  r[W_NEW].as<float>()[0] = w - lr * m2;
  r[MOM_NEW].as<float>()[0] = m2;
  *r[COUNT_NEW].as<int64_t>() = *a[COUNT].as<int64_t>() + 1;
  r[GRAD_W].as<float>()[0] = g;
  *r[GNORM].as<float>() = std::fabs(g);
  *r[LR_USED].as<float>() = lr;
  return Status();
}

ProgramSpec linearSpec() {
  ProgramSpec spec{};
  spec.modelPath = "/nonexistent/linear.onnx";
  spec.optimizer = "sgd";
  spec.microBatch = 4;
  spec.accumSteps = 2;
  spec.tokensPerExample = 1;
  spec.numArgs = NUM_LIN_ARGS;
  spec.args = kLinArgs;
  spec.numResults = 7;
  spec.results = kLinResults;
  spec.numHypers = 2;
  spec.hypers = kLinHypers;
  spec.arenaBytes = 1024;
  spec.trainStep = linearStep;
  return spec;
}

struct LinearFixture : ::testing::Test {
  TempDir dir;
  std::string batch;
  void SetUp() override {
    gSeen = Seen();
    std::vector<float> x(8);
    std::vector<double> y(8); // f64 in the file, converted to f32
    for (int i = 0; i < 8; ++i) {
      x[i] = float(i + 1);
      y[i] = 3.0 * (i + 1);
    }
    batch = dir / "batch.safetensors";
    ASSERT_TRUE(io::writeSafetensors(
                    batch, {{"x", Tensor::of(x.data(), DType::F32, {8})},
                            {"y", Tensor::of(y.data(), DType::F64, {8})}})
                    .ok());
  }
};

TEST_F(LinearFixture, TrainsLogsAndDumps) {
  RunResult r = runWith(linearSpec(),
                        {"--steps", "60", "--lr", "0.005", "--momentum=0.5",
                         "--seed", "7", "--batch", batch, "--init", "random",
                         "--dump-grads", dir / "g.safetensors", "--dump-params",
                         dir / "p.safetensors", "--log", dir / "log.jsonl"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");

  // The loop: Step is 1 for the first step, Seed is --seed.
  ASSERT_EQ(gSeen.steps.size(), 60u);
  for (int i = 0; i < 60; ++i) {
    EXPECT_EQ(gSeen.steps[i], i + 1);
    EXPECT_EQ(gSeen.seeds[i], 7);
  }
  // Updates are double-buffered: the parameter alternates between two
  // buffers, never copied.
  EXPECT_NE(gSeen.wArgs[0], gSeen.wArgs[1]);
  EXPECT_EQ(gSeen.wArgs[0], gSeen.wArgs[2]);

  // Progress lines.
  std::vector<std::string> out = lines(r.out);
  std::regex line(
      R"(step (\d+)/60 \| loss [0-9.]+ \| lr 5\.00e-03 \| )"
      R"(grad norm [0-9.]+ \| \d+ samples/s \| mem [0-9.]+ [KMG]?i?B )"
      R"(\| elapsed \w+( \| eta \w+)?)");
  int stepLines = 0;
  for (const std::string &l : out)
    if (l.rfind("step ", 0) == 0) {
      EXPECT_TRUE(std::regex_match(l, line)) << l;
      ++stepLines;
    }
  EXPECT_EQ(stepLines, 60);
  EXPECT_TRUE(contains(r.out, "step 1/60 | loss 229.5000 | lr 5.00e-03 | "
                              "grad norm 153.000 | "))
      << r.out;
  EXPECT_TRUE(contains(r.out, "global batch 8 = 4 x 2")) << r.out;
  EXPECT_TRUE(contains(r.out, "init: random (seed 7)")) << r.out;
  EXPECT_TRUE(contains(r.out, "done: 60 steps")) << r.out;

  // The first step's gradient: mean(2 (0 - 3x) x) = -6 mean(x^2) = -153.
  io::SafetensorsFile g;
  ASSERT_TRUE(g.read(dir / "g.safetensors").ok());
  ASSERT_EQ(g.names(), (std::vector<std::string>{"w"}));
  Tensor gw;
  ASSERT_TRUE(g.get("w", gw).ok());
  EXPECT_FLOAT_EQ(gw.as<float>()[0], -153.0f);

  // Parameters and buffers at the end: w converged to 3, 60 updates counted.
  io::SafetensorsFile p;
  ASSERT_TRUE(p.read(dir / "p.safetensors").ok());
  EXPECT_EQ(p.names().size(), 2u);
  Tensor w, count;
  ASSERT_TRUE(p.get("w", w).ok());
  ASSERT_TRUE(p.get("bn.num_batches_tracked", count).ok());
  EXPECT_NEAR(w.as<float>()[0], 3.0f, 1e-3);
  EXPECT_EQ(count.dtype, DType::I64);
  EXPECT_EQ(*count.as<int64_t>(), 60);
  EXPECT_FALSE(p.contains("w/momentum_buffer"));

  // One JSON object per step.
  std::vector<std::string> log = lines(readFile(dir / "log.jsonl"));
  ASSERT_EQ(log.size(), 60u);
  EXPECT_EQ(log[0].rfind("{\"step\":1,\"loss\":229.5,\"lr\":0.00499999989,"
                         "\"grad_norm\":153,\"step_time_s\":",
                         0),
            0u)
      << log[0];
  EXPECT_TRUE(contains(log[59], "\"step\":60,")) << log[59];
  EXPECT_TRUE(contains(log[59], "\"samples_per_s\":")) << log[59];
  EXPECT_EQ(log[59].back(), '}');
}

/// The linear spec with the parameter, its momentum and the counter
/// computed in place (ResultSpec::inPlaceOf), as dsc-in-place-updates marks
/// them: linearStep reads each before it writes its update.
const ResultSpec kLinInPlaceResults[] = {
    kLinResults[0],
    {ResultRole::Param, "w", {DType::F32, 1, {1}}, -1, W},
    {ResultRole::OptState, "w/momentum_buffer", {DType::F32, 1, {1}}, -1, MOM},
    {ResultRole::BufferUpdate,
     "bn.num_batches_tracked",
     {DType::I64, 0, {}},
     -1,
     COUNT},
    kLinResults[4],
    kLinResults[5],
    kLinResults[6],
};

TEST_F(LinearFixture, InPlaceUpdatesShareTheirArgumentsStorage) {
  ProgramSpec spec = linearSpec();
  spec.results = kLinInPlaceResults;
  RunResult r =
      runWith(spec, {"--steps", "60", "--lr", "0.005", "--momentum=0.5",
                     "--seed", "7", "--batch", batch, "--init", "random",
                     "--dump-params", dir / "p.safetensors"});
  ASSERT_EQ(r.rc, 0) << r.err;
  // One buffer for the parameter, never swapped; the same training as the
  // double-buffered program's.
  ASSERT_EQ(gSeen.wArgs.size(), 60u);
  for (const void *w : gSeen.wArgs)
    EXPECT_EQ(w, gSeen.wArgs[0]);
  EXPECT_TRUE(contains(r.out, "step 1/60 | loss 229.5000 | lr 5.00e-03 | "
                              "grad norm 153.000 | "))
      << r.out;
  io::SafetensorsFile p;
  ASSERT_TRUE(p.read(dir / "p.safetensors").ok());
  Tensor w, count;
  ASSERT_TRUE(p.get("w", w).ok());
  ASSERT_TRUE(p.get("bn.num_batches_tracked", count).ok());
  EXPECT_NEAR(w.as<float>()[0], 3.0f, 1e-3);
  EXPECT_EQ(*count.as<int64_t>(), 60);

  // An in-place result must update the argument it names.
  ResultSpec bad[7];
  std::copy(std::begin(kLinInPlaceResults), std::end(kLinInPlaceResults), bad);
  bad[W_NEW].inPlaceOf = MOM;
  spec.results = bad;
  expectOneErrorLine(runWith(spec, {"--help"}),
                     "is computed in place of argument 1, not of its own (0)");
  bad[W_NEW].inPlaceOf = W;
  bad[LOSS].inPlaceOf = W;
  expectOneErrorLine(runWith(spec, {"--help"}),
                     "is computed in place of an argument but updates none");
}

TEST_F(LinearFixture, InitFromSafetensorsAndResumeFromDump) {
  std::vector<float> w1 = {1.0f};
  int64_t count = 5;
  std::string init = dir / "init.safetensors";
  ASSERT_TRUE(
      io::writeSafetensors(init, {{"w", Tensor::of(w1.data(), DType::F32, {1})},
                                  {"bn.num_batches_tracked",
                                   Tensor::of(&count, DType::I64, {})}})
          .ok());
  RunResult r = runWith(linearSpec(),
                        {"--batch", batch, "--init", init, "--steps", "1",
                         "--dump-grads", dir / "g.safetensors", "--dump-params",
                         dir / "p.safetensors", "--quiet"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, ""); // --quiet
  io::SafetensorsFile g, p;
  ASSERT_TRUE(g.read(dir / "g.safetensors").ok());
  Tensor gw;
  ASSERT_TRUE(g.get("w", gw).ok());
  EXPECT_FLOAT_EQ(gw.as<float>()[0], -102.0f); // mean(2 (x - 3x) x)
  ASSERT_TRUE(p.read(dir / "p.safetensors").ok());
  Tensor c;
  ASSERT_TRUE(p.get("bn.num_batches_tracked", c).ok());
  EXPECT_EQ(*c.as<int64_t>(), 6);

  // --dump-params feeds --init.
  r = runWith(linearSpec(),
              {"--batch", batch, "--init", dir / "p.safetensors", "--steps",
               "0", "--dump-params", dir / "q.safetensors", "--quiet"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(readFile(dir / "p.safetensors").size(),
            readFile(dir / "q.safetensors").size());
  io::SafetensorsFile q;
  ASSERT_TRUE(q.read(dir / "q.safetensors").ok());
  Tensor pw, qw;
  ASSERT_TRUE(p.get("w", pw).ok());
  ASSERT_TRUE(q.get("w", qw).ok());
  EXPECT_EQ(pw.as<float>()[0], qw.as<float>()[0]);
}

TEST_F(LinearFixture, InitSafetensorsMissingParameterOrBuffer) {
  std::vector<float> w1 = {1.0f};
  std::string onlyW = dir / "w.safetensors";
  ASSERT_TRUE(io::writeSafetensors(
                  onlyW, {{"w", Tensor::of(w1.data(), DType::F32, {1})}})
                  .ok());
  RunResult r = runWith(linearSpec(), {"--batch", batch, "--init", onlyW});
  expectOneErrorLine(r, "bn.num_batches_tracked");
  EXPECT_TRUE(contains(r.err, "/nonexistent/linear.onnx")) << r.err;
  int64_t count = 0;
  std::string noW = dir / "now.safetensors";
  ASSERT_TRUE(io::writeSafetensors(noW, {{"bn.num_batches_tracked",
                                          Tensor::of(&count, DType::I64, {})}})
                  .ok());
  r = runWith(linearSpec(), {"--batch", batch, "--init", noW});
  expectOneErrorLine(r, "has no tensor for parameter 'w'");
  EXPECT_TRUE(gSeen.steps.empty());
}

TEST_F(LinearFixture, DefaultInitNeedsTheModel) {
  RunResult r = runWith(linearSpec(), {"--batch", batch});
  expectOneErrorLine(r, "/nonexistent/linear.onnx");
  EXPECT_TRUE(contains(r.err, "--init random")) << r.err;
}

TEST_F(LinearFixture, HelpExplainsOptionsAndTensors) {
  RunResult r = runWith(linearSpec(), {"--help"});
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char *part : {"usage: train [options]",
                           "--steps N",
                           "--seed S",
                           "--batch FILE",
                           "--data FILE",
                           "--data-dtype",
                           "--init SOURCE",
                           "random[:SEED]",
                           "--dump-grads",
                           "--dump-params",
                           "--log FILE.jsonl",
                           "--quiet",
                           "--lr X",
                           "learning rate; default 0.01",
                           "--momentum X",
                           "SGD momentum; default 0.9",
                           "inputs: 2 tensors",
                           "parameters: 1 tensors",
                           "buffers: 1 tensors",
                           "bn.num_batches_tracked",
                           "i64[]",
                           "f32[8]",
                           "global batch of 8 examples = micro-batch 4 x 2",
                           "Model: /nonexistent/linear.onnx"})
    EXPECT_TRUE(contains(r.out, part)) << part << "\n" << r.out;
  EXPECT_FALSE(contains(r.out, "--weight-decay")) << r.out;
  EXPECT_TRUE(gSeen.steps.empty());
}

TEST_F(LinearFixture, BadOptionsAreOneErrorLine) {
  auto spec = linearSpec();
  expectOneErrorLine(runWith(spec, {"--batch", batch, "--bogus"}),
                     "unknown option '--bogus'");
  expectOneErrorLine(runWith(spec, {"--batch", batch, "--weight-decay", "1"}),
                     "compiled without it");
  expectOneErrorLine(runWith(spec, {"--batch", batch, "--steps", "ten"}),
                     "--steps expects a count");
  expectOneErrorLine(runWith(spec, {"--batch", batch, "--steps"}),
                     "--steps needs a value");
  expectOneErrorLine(runWith(spec, {"--batch", batch, "--lr", "-1"}),
                     "--lr must be >= 0");
  expectOneErrorLine(runWith(spec, {"--batch", batch, "--lr", "1x"}),
                     "--lr expects a number");
  expectOneErrorLine(runWith(spec, {"--batch", batch, "--seed", "-3"}),
                     "--seed expects an integer");
  expectOneErrorLine(runWith(spec, {"--batch", batch, "extra"}),
                     "unexpected argument 'extra'");
  expectOneErrorLine(runWith(spec, {}), "give --batch FILE.safetensors or "
                                        "--data FILE");
  expectOneErrorLine(runWith(spec, {"--batch", batch, "--data", "t.bin"}),
                     "exclude each other");
  expectOneErrorLine(runWith(spec, {"--batch", batch, "--data-dtype", "int32"}),
                     "--data-dtype applies to --data");
  expectOneErrorLine(
      runWith(spec, {"--batch", batch, "--init", "random", "--dump-params",
                     dir / "no/such/dir/p.safetensors"}),
      "no/such/dir' does not exist");
  expectOneErrorLine(runWith(spec, {"--batch", batch, "--init", "random:x"}),
                     "random:SEED expects an integer");
  expectOneErrorLine(
      runWith(spec, {"--batch", batch, "--init", dir / "none.safetensors"}),
      "--init");
  expectOneErrorLine(
      runWith(spec, {"--batch", batch, "--init", "random", "--steps", "0",
                     "--dump-grads", dir / "g.safetensors"}),
      "--dump-grads needs at least one step");
  expectOneErrorLine(runWith(spec, {"--batch", dir / "absent.safetensors",
                                    "--init", "random"}),
                     "--batch");
  EXPECT_TRUE(gSeen.steps.empty()); // nothing ran
}

// Output paths are checked before the first step (docs/reliability.md, "The
// compiled program's files"); every refusal is one error line and no step.
TEST_F(LinearFixture, OutputPathsAreCheckedBeforeTraining) {
  auto spec = linearSpec();
  auto refused = [&](std::vector<std::string> args, const std::string &part) {
    gSeen = Seen();
    args.insert(args.begin(), {"--batch", batch, "--init", "random"});
    expectOneErrorLine(runWith(spec, args), part);
    EXPECT_TRUE(gSeen.steps.empty()) << part; // nothing ran
  };
  writeFile(dir / "file", "x");
  refused({"--dump-params", dir / "file/p.safetensors"},
          "--dump-params " + dir / "file/p.safetensors" + ": '" + dir / "file" +
              "' is a file, not a directory");
  refused({"--dump-params", "/dev/zero"},
          "error: --dump-params /dev/zero: is a character device; refusing "
          "to replace it (pass --overwrite-special to write through it)");
  refused({"--log", dir.path()}, "--log " + dir.path() + ": is a directory");
  refused({"--log", dir.path(), "--overwrite-special"}, "is a directory");
  ASSERT_EQ(::symlink((dir / "real.safetensors").c_str(),
                      (dir / "link.safetensors").c_str()),
            0);
  refused({"--dump-grads", dir / "link.safetensors"},
          "is a symbolic link; refusing to replace it");
  refused(
      {"--dump-params", dir / "p.safetensors", "--log", dir / "p.safetensors"},
      "--log " + dir / "p.safetensors" +
          ": --dump-params writes the same file");
  refused({"--dump-params", dir / "missing/p.safetensors", "--log",
           dir / "log.jsonl"},
          "does not exist");
  // The log is created only by a run that passed every check.
  EXPECT_NE(::access((dir / "log.jsonl").c_str(), F_OK), 0);
}

TEST_F(LinearFixture, OverwriteSpecialWritesThroughLinksAndDevices) {
  auto spec = linearSpec();
  ASSERT_EQ(::symlink("real.safetensors", (dir / "link.safetensors").c_str()),
            0);
  RunResult r = runWith(spec, {"--batch", batch, "--init", "random", "--steps",
                               "2", "--overwrite-special", "--dump-params",
                               dir / "link.safetensors", "--dump-grads",
                               "/dev/zero", "--log", "/dev/zero", "--quiet"});
  ASSERT_EQ(r.rc, 0) << r.err;
  // The link stays a link; the file it names holds the dump.
  struct stat st;
  ASSERT_EQ(::lstat((dir / "link.safetensors").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  io::SafetensorsFile p;
  ASSERT_TRUE(p.read(dir / "real.safetensors").ok());
  EXPECT_TRUE(p.contains("w"));
  ASSERT_EQ(::lstat("/dev/zero", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST_F(LinearFixture, AStaleTemporaryIsRemovedWithANote) {
  writeFile(dir / "p.safetensors.tmp.Ab12Cd", std::string(4096, 'x'));
  writeFile(dir / "p.safetensors.tmp.keep", "not mkstemp's pattern");
  RunResult r =
      runWith(linearSpec(), {"--batch", batch, "--init", "random", "--steps",
                             "1", "--dump-params", dir / "p.safetensors"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "note: removed " + dir / "p.safetensors.tmp.Ab12Cd" +
                       ", a temporary file left by an interrupted run\n");
  EXPECT_NE(::access((dir / "p.safetensors.tmp.Ab12Cd").c_str(), F_OK), 0);
  EXPECT_EQ(::access((dir / "p.safetensors.tmp.keep").c_str(), F_OK), 0);

  // Through a followed link, the temporaries are those of the file it names.
  ASSERT_EQ(::symlink("p.safetensors", (dir / "link.safetensors").c_str()), 0);
  writeFile(dir / "p.safetensors.tmp.Zz98Yx", "killed");
  r = runWith(linearSpec(), {"--batch", batch, "--init", "random", "--steps",
                             "1", "--overwrite-special", "--dump-params",
                             dir / "link.safetensors"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "p.safetensors.tmp.Zz98Yx, a temporary"))
      << r.err;
  EXPECT_NE(::access((dir / "p.safetensors.tmp.Zz98Yx").c_str(), F_OK), 0);
}

TEST_F(LinearFixture, NonFiniteLossWarnsOnce) {
  RunResult r = runWith(linearSpec(), {"--batch", batch, "--init", "random",
                                       "--lr", "1e30", "--steps", "6"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<std::string> err = lines(r.err);
  ASSERT_EQ(err.size(), 2u) << r.err;
  EXPECT_EQ(err[0].rfind("warning: step ", 0), 0u) << r.err;
  EXPECT_TRUE(contains(err[0], "lower --lr")) << r.err;
  EXPECT_TRUE(contains(err[1], "steps had a non-finite loss")) << r.err;
}

Status failingStep(const RankContext &, const Tensor *, const Tensor *) {
  return Status::error(StatusCode::InvalidArgument,
                       "matmul(lhs=f32[2,3], rhs=f32[4,5]): inner dims 3 vs 4");
}

TEST_F(LinearFixture, AFailingStepIsAnErrorNamingTheStep) {
  ProgramSpec spec = linearSpec();
  spec.trainStep = failingStep;
  RunResult r = runWith(spec, {"--batch", batch, "--init", "random"});
  expectOneErrorLine(r, "step 1: matmul(lhs=f32[2,3], rhs=f32[4,5])");
}

TEST_F(LinearFixture, AnInconsistentSpecIsAnErrorNotACrash) {
  ProgramSpec spec = linearSpec();
  spec.numResults = 1;
  spec.results = &kLinResults[1]; // no loss
  expectOneErrorLine(runWith(spec, {"--help"}), "program spec: no loss");
  ResultSpec bad[] = {kLinResults[0],
                      {ResultRole::Param, "w", {DType::F32, 1, {2}}}};
  spec.numResults = 2;
  spec.results = bad;
  expectOneErrorLine(runWith(spec, {"--help"}),
                     "'w' is f32[2] but its argument is f32[1]");
  spec = linearSpec();
  spec.trainStep = nullptr;
  expectOneErrorLine(runWith(spec, {}), "no train step");
}

TEST_F(LinearFixture, OnlyTheFirstOutputIsTheLoss) {
  ResultSpec more[8];
  std::copy(std::begin(kLinResults), std::end(kLinResults), more);
  more[7] = {ResultRole::Loss, "logits", {DType::F32, 1, {8}}};
  ProgramSpec spec = linearSpec();
  spec.numResults = 8;
  spec.results = more;
  RunResult r =
      runWith(spec, {"--batch", batch, "--init", "random", "--steps", "1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "step 1/1 | loss 229.5000")) << r.out;
}

//===----------------------------------------------------------------------===//
// The MLP fixture's parameters: --init from the model (the default) and random
//===----------------------------------------------------------------------===//

const std::string kMlpPath = fixture("models/mlp_opset17.onnx");
const ArgSpec kMlpArgs[] = {
    {ArgRole::Param, "net.0.weight", {DType::F32, 2, {128, 64}}},
    {ArgRole::Param, "net.0.bias", {DType::F32, 1, {128}}},
    {ArgRole::Param, "net.2.weight", {DType::F32, 2, {10, 128}}},
    {ArgRole::Param, "net.2.bias", {DType::F32, 1, {10}}},
    {ArgRole::Input, "x", {DType::F32, 2, {4, 64}}},
    {ArgRole::Input, "y", {DType::I64, 1, {4}}},
};
const ResultSpec kMlpResults[] = {
    {ResultRole::Loss, "loss", {DType::F32, 0, {}}},
    {ResultRole::Param, "net.0.weight", {DType::F32, 2, {128, 64}}},
    {ResultRole::Param, "net.0.bias", {DType::F32, 1, {128}}},
    {ResultRole::Param, "net.2.weight", {DType::F32, 2, {10, 128}}},
    {ResultRole::Param, "net.2.bias", {DType::F32, 1, {10}}},
};

/// Leaves the parameters as they are; the loss is mean(y), to see the batch.
Status identityStep(const RankContext &, const Tensor *a, const Tensor *r) {
  for (int i = 0; i < 4; ++i)
    std::memcpy(r[i + 1].data, a[i].data, a[i].nbytes());
  float sum = 0;
  for (int i = 0; i < 4; ++i)
    sum += float(a[5].as<int64_t>()[i]);
  *r[0].as<float>() = sum / 4;
  return Status();
}

ProgramSpec mlpSpec() {
  ProgramSpec spec{};
  spec.modelPath = kMlpPath.c_str();
  spec.optimizer = "adamw";
  spec.microBatch = 4;
  spec.accumSteps = 1;
  spec.tokensPerExample = 1;
  spec.numArgs = 6;
  spec.args = kMlpArgs;
  spec.numResults = 5;
  spec.results = kMlpResults;
  spec.trainStep = identityStep;
  return spec;
}

TEST(ProgramInit, DefaultIsTheModelsInitializers) {
  TempDir dir;
  RunResult r = runWith(
      mlpSpec(), {"--batch", fixture("ref/mlp/batch.safetensors"), "--steps",
                  "3", "--dump-params", dir / "p.safetensors"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "init: " + kMlpPath)) << r.out;
  io::SafetensorsFile got, ref;
  ASSERT_TRUE(got.read(dir / "p.safetensors").ok());
  ASSERT_TRUE(ref.read(fixture("ref/mlp/params.safetensors")).ok());
  EXPECT_EQ(got.names().size(), 4u);
  for (const std::string &name : ref.names()) {
    Tensor a, b;
    ASSERT_TRUE(got.get(name, a).ok()) << name;
    ASSERT_TRUE(ref.get(name, b).ok());
    ASSERT_EQ(a.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes()), 0) << name;
  }
}

TEST(ProgramInit, RandomFollowsTheDocumentedScheme) {
  TempDir dir;
  auto runRandom = [&](const std::string &init, const std::string &seed,
                       const std::string &out) {
    RunResult r =
        runWith(mlpSpec(), {"--batch", fixture("ref/mlp/batch.safetensors"),
                            "--init", init, "--seed", seed, "--steps", "0",
                            "--dump-params", dir / out, "--quiet"});
    EXPECT_EQ(r.rc, 0) << r.err;
    return readFile(dir / out);
  };
  std::string a = runRandom("random", "0", "a.safetensors");
  std::string b = runRandom("random", "0", "b.safetensors");
  std::string c = runRandom("random", "1", "c.safetensors");
  std::string d = runRandom("random:1", "0", "d.safetensors");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(c, d); // random:SEED overrides --seed

  io::SafetensorsFile f;
  ASSERT_TRUE(f.read(dir / "a.safetensors").ok());
  Tensor w, bias;
  ASSERT_TRUE(f.get("net.0.weight", w).ok());
  ASSERT_TRUE(f.get("net.0.bias", bias).ok());
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    sum += w.as<float>()[i];
    sq += double(w.as<float>()[i]) * w.as<float>()[i];
  }
  double mean = sum / double(w.numel());
  double stdev = std::sqrt(sq / double(w.numel()) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(stdev, 0.02, 0.001);
  for (int64_t i = 0; i < bias.numel(); ++i)
    EXPECT_EQ(bias.as<float>()[i], 0.0f);
}

TEST(ProgramInit, RandomRule) {
  TensorSpec mat{DType::F32, 2, {4, 4}}, vec{DType::F32, 1, {4}};
  TensorSpec ivec{DType::I64, 1, {4}}, scalar{DType::I64, 0, {}};
  EXPECT_EQ(randomInitRule(ArgRole::Param, "h.0.attn.c_attn.weight", mat),
            RandomInit::Normal);
  EXPECT_EQ(randomInitRule(ArgRole::Param, "wte.weight", mat),
            RandomInit::Normal);
  EXPECT_EQ(randomInitRule(ArgRole::Param, "h.0.attn.c_attn.bias", vec),
            RandomInit::Zeros);
  EXPECT_EQ(randomInitRule(ArgRole::Param, "h.0.ln_1.weight", vec),
            RandomInit::Ones);
  EXPECT_EQ(randomInitRule(ArgRole::Param, "net.1.weight", vec),
            RandomInit::Ones); // a BatchNorm named by its index
  EXPECT_EQ(randomInitRule(ArgRole::Param, "norm.scale", vec),
            RandomInit::Ones);
  EXPECT_EQ(randomInitRule(ArgRole::Param, "pos_offset", vec),
            RandomInit::Zeros);
  EXPECT_EQ(randomInitRule(ArgRole::Param, "table", ivec), RandomInit::Zeros);
  EXPECT_EQ(randomInitRule(ArgRole::Buffer, "net.1.running_var", vec),
            RandomInit::Ones);
  EXPECT_EQ(randomInitRule(ArgRole::Buffer, "net.1.running_mean", vec),
            RandomInit::Zeros);
  EXPECT_EQ(
      randomInitRule(ArgRole::Buffer, "net.1.num_batches_tracked", scalar),
      RandomInit::Zeros);
  EXPECT_EQ(randomInitRule(ArgRole::Buffer, "h.0.attn.bias", mat),
            RandomInit::FromModel); // a causal mask is a constant
}

//===----------------------------------------------------------------------===//
// Tokens: --data feeds windows and next-token targets
//===----------------------------------------------------------------------===//

const ArgSpec kTokArgs[] = {
    {ArgRole::Input, "idx", {DType::I64, 2, {4, 8}}},
    {ArgRole::Input, "targets", {DType::I64, 2, {4, 8}}},
};
const ResultSpec kTokResults[] = {
    {ResultRole::Loss, "loss", {DType::F32, 0, {}}},
};

Status tokenStep(const RankContext &, const Tensor *a, const Tensor *r) {
  for (int i = 0; i < 32; ++i)
    if (a[1].as<int64_t>()[i] != a[0].as<int64_t>()[i] + 1)
      return Status::error(StatusCode::InvalidArgument,
                           "targets are not idx + 1");
  *r[0].as<float>() = float(a[0].as<int64_t>()[0]);
  return Status();
}

ProgramSpec tokenSpec() {
  ProgramSpec spec{};
  spec.modelPath = "/nonexistent/lm.onnx";
  spec.optimizer = "adamw";
  spec.microBatch = 2;
  spec.accumSteps = 2;
  spec.tokensPerExample = 8;
  spec.numArgs = 2;
  spec.args = kTokArgs;
  spec.numResults = 1;
  spec.results = kTokResults;
  spec.trainStep = tokenStep;
  return spec;
}

TEST(ProgramData, TokenFileFeedsWindowsAndTargets) {
  TempDir dir;
  std::string tokens;
  for (int32_t k = 0; k < 300; ++k)
    tokens.append(reinterpret_cast<const char *>(&k), 4);
  writeFile(dir / "train.bin", tokens);
  RunResult r = runWith(tokenSpec(),
                        {"--data", dir / "train.bin", "--data-dtype", "int32",
                         "--steps", "4", "--log", dir / "log.jsonl"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "global batch 4 = 2 x 2 x 8 tokens")) << r.out;
  EXPECT_TRUE(contains(r.out, "int32, 300 tokens")) << r.out;
  std::regex line(R"(step \d/4 \| loss [0-9.]+ \| \d+ tok/s \| mem .+ )"
                  R"(\| elapsed \w+( \| eta \w+)?)");
  int n = 0;
  for (const std::string &l : lines(r.out))
    if (l.rfind("step ", 0) == 0) {
      EXPECT_TRUE(std::regex_match(l, line)) << l;
      ++n;
    }
  EXPECT_EQ(n, 4);
  EXPECT_TRUE(contains(readFile(dir / "log.jsonl"), "\"tokens_per_s\":"));

  // The same seed gives the same windows (the loss is the first token).
  RunResult again =
      runWith(tokenSpec(), {"--data", dir / "train.bin", "--data-dtype",
                            "int32", "--steps", "4"});
  auto losses = [](const std::string &out) {
    std::string s;
    for (const std::string &l : lines(out))
      if (l.rfind("step ", 0) == 0)
        s += l.substr(0, l.find(" | ", l.find("loss")));
    return s;
  };
  EXPECT_EQ(losses(r.out), losses(again.out));
  RunResult other =
      runWith(tokenSpec(), {"--data", dir / "train.bin", "--data-dtype",
                            "int32", "--steps", "4", "--seed", "9"});
  EXPECT_NE(losses(r.out), losses(other.out));
}

TEST(ProgramData, FloatInputsCannotComeFromATokenFile) {
  TempDir dir;
  writeFile(dir / "train.bin", std::string(2000, '\0'));
  RunResult r = runWith(mlpSpec(), {"--data", dir / "train.bin"});
  expectOneErrorLine(r, "input 'x' is f32[4,64]");
}

// The compile's run-time defaults (spec.runDefaults, from ds_config's
// steps_per_print and monitors) come before argv, which overrides them;
// '...' quotes a word.
TEST_F(LinearFixture, RunDefaultsAreOverriddenByArgv) {
  ProgramSpec spec = linearSpec();
  std::string tb = dir / "tb dir";
  std::string defaults = "--print-every 2 --tensorboard '" + tb + "' --steps 4";
  spec.runDefaults = defaults.c_str();
  RunResult r = runWith(
      spec, {"--batch", batch, "--init", "random", "--print-every", "3"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<std::string> steps;
  for (const std::string &l : lines(r.out))
    if (l.rfind("step ", 0) == 0)
      steps.push_back(l.substr(0, l.find(' ', 5)));
  EXPECT_EQ(steps,
            (std::vector<std::string>{"step 1/4", "step 3/4", "step 4/4"}))
      << r.out;
  EXPECT_TRUE(std::filesystem::is_directory(tb)) << r.out;
}

// --save-dir checks: a folder under a file is refused before training;
// --save-every and --keep-last need it.
TEST_F(LinearFixture, SaveDirIsCheckedBeforeTraining) {
  writeFile(dir / "file", "x");
  RunResult r = runWith(linearSpec(), {"--batch", batch, "--init", "random",
                                       "--save-dir", dir / "file/ck"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "--save-dir")) << r.err;
  EXPECT_FALSE(contains(r.out, "step 1/")) << r.out;
  RunResult e = runWith(linearSpec(), {"--batch", batch, "--keep-last", "2"});
  EXPECT_EQ(e.rc, 1);
  EXPECT_TRUE(contains(e.err, "--keep-last needs --save-dir DIR")) << e.err;
}

// A checkpoint keeps the hyperparameters in force: a resume without --lr
// takes the saved one; with --lr it says that it overrides it.
TEST_F(LinearFixture, ResumeKeepsOrOverridesTheHyperparameters) {
  RunResult a = runWith(linearSpec(),
                        {"--batch", batch, "--init", "random", "--steps", "2",
                         "--lr", "0.005", "--save-dir", dir / "ck", "--quiet"});
  ASSERT_EQ(a.rc, 0) << a.err;
  RunResult b = runWith(
      linearSpec(), {"--batch", batch, "--steps", "3", "--resume", dir / "ck"});
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_TRUE(contains(b.out, "step 3/3 | loss")) << b.out;
  EXPECT_TRUE(contains(b.out, "lr 5.00e-03")) << b.out;
  RunResult c = runWith(linearSpec(), {"--batch", batch, "--steps", "3",
                                       "--resume", dir / "ck", "--lr", "0.02"});
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_TRUE(contains(c.err, "note: --lr 0.02 overrides the checkpoint's "
                              "0.005"))
      << c.err;
  EXPECT_TRUE(contains(c.out, "lr 2.00e-02")) << c.out;
}

} // namespace
