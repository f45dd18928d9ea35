//===- GraphTest.cpp - Device::replayStep and the checks it defers --------===//
//
// A step's first run with a set of buffers is direct, its second is
// captured, every later one replays the graph without calling the host
// code; the replay reads the buffers as they are then. The label, index and
// division checks of a replayed step fail the next synchronize() with the
// eager call's message; a step that synchronizes or draws dropout seeds on
// the host is never captured, says why, and leaves the stream usable.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "cpu/step_kernels.h"
#include "cuda/device.h"

#include <functional>

namespace dsc::cuda::test {
namespace {

using Shape = std::vector<int64_t>;

/// One step through Device::replayStep: runs `enqueue` when the device did
/// not, then synchronizes. Returns the synchronize status. Each Stepper is a
/// different step: its key starts with a tag of its own, as the shell's
/// starts with the program's step function (buffers freed by one test are
/// handed to the next at the same addresses).
struct Stepper {
  std::function<Status()> enqueue;
  std::vector<const void *> key;
  int hostRuns = 0;
  std::string why;
  const void *tag = nextTag();

  static const void *nextTag() {
    static char tags[64];
    static int used = 0;
    return &tags[used++ % 64];
  }

  Status step(bool &replayed) {
    if (key.empty() || key.front() != tag)
      key.insert(key.begin(), tag);
    auto counted = [this] {
      ++hostRuns;
      return enqueue();
    };
    bool ran = false;
    std::string reason;
    if (Status s = device()->replayStep(key, counted, ran, reason); !s.ok())
      return s;
    if (!reason.empty())
      why = reason;
    replayed = ran;
    if (!ran)
      if (Status s = counted(); !s.ok())
        return s;
    return device()->synchronize();
  }
};

std::vector<float> floatsOf(const DevTensor &t) {
  std::vector<char> bytes = t.download();
  std::vector<float> v(size_t(t.host().numel()));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

TEST(CudaGraph, CapturesOnTheSecondStepAndReplaysAfter) {
  DSC_REQUIRE_GPU();
  DSC_ASSERT_OK(device()->bindRank(0, 0));
  DevTensor data(DType::F32, {5, 3}), idx(DType::I64, {4}),
      out(DType::F32, {4, 3});
  data.random(-1, 1, 7);
  idx.values({4, 0, 2, 2});
  Stepper st;
  st.key = {data.dev().data, idx.dev().data, out.dev().data};
  st.enqueue = [&] {
    return cuda::gather(data.dev(), idx.dev(), 0, out.dev());
  };
  bool replayed = true;
  DSC_ASSERT_OK(st.step(replayed));
  EXPECT_FALSE(replayed);
  DSC_ASSERT_OK(st.step(replayed));
  EXPECT_TRUE(replayed);
  EXPECT_EQ(st.hostRuns, 2); // direct, then once while captured
  DSC_ASSERT_OK(st.step(replayed));
  EXPECT_TRUE(replayed);
  EXPECT_EQ(st.hostRuns, 2);
  EXPECT_TRUE(st.why.empty()) << st.why;

  // The replay reads what the buffers hold now.
  idx.values({1, 1, 3, 0});
  DSC_ASSERT_OK(st.step(replayed));
  std::vector<float> got = floatsOf(out);
  const float *d = data.host().as<float>();
  int64_t rows[4] = {1, 1, 3, 0};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(got[size_t(3 * i + j)], d[3 * rows[i] + j]);

  // A bad index of a replayed step: the eager call's error, after it.
  idx.values({1, 9, 3, 0});
  Status eager = cuda::gather(data.dev(), idx.dev(), 0, out.dev());
  ASSERT_FALSE(eager.ok());
  Status replayedError = st.step(replayed);
  EXPECT_TRUE(replayed);
  ASSERT_FALSE(replayedError.ok());
  EXPECT_EQ(replayedError.message(), eager.message());
  EXPECT_EQ(replayedError.code(), eager.code());
  // And good indices pass again: the flag is reset inside the graph.
  idx.values({0, 1, 2, 3});
  DSC_ASSERT_OK(st.step(replayed));
  EXPECT_EQ(st.hostRuns, 2);
}

TEST(CudaGraph, ALabelOutOfRangeFailsTheReplayedStep) {
  DSC_REQUIRE_GPU();
  DSC_ASSERT_OK(device()->bindRank(0, 0));
  DevTensor scores(DType::F32, {6, 10}), labels(DType::I64, {6}),
      loss(DType::F32, {});
  scores.random(-2, 2, 3);
  labels.values({0, 9, 3, 3, 1, 5});
  Stepper st;
  st.key = {scores.dev().data, labels.dev().data, loss.dev().data};
  st.enqueue = [&] {
    return cuda::softmaxCrossEntropy(scores.dev(), labels.dev(), Tensor(),
                                     cpu::Reduction::Mean, std::nullopt,
                                     loss.dev());
  };
  bool replayed = false;
  DSC_ASSERT_OK(st.step(replayed));
  DSC_ASSERT_OK(st.step(replayed));
  ASSERT_TRUE(replayed) << st.why;
  float first = floatsOf(loss)[0];
  DSC_ASSERT_OK(st.step(replayed));
  EXPECT_EQ(floatsOf(loss)[0], first);

  labels.values({0, 9, 3, 10, 1, 5});
  Status eager = st.enqueue();
  ASSERT_FALSE(eager.ok());
  EXPECT_NE(eager.message().find("label 10 at 3 outside [0, 10)"),
            std::string::npos)
      << eager.message();
  Status replayedError = st.step(replayed);
  EXPECT_TRUE(replayed);
  ASSERT_FALSE(replayedError.ok());
  EXPECT_EQ(replayedError.message(), eager.message());
  EXPECT_EQ(st.hostRuns, 2);
}

TEST(CudaGraph, IntegerDivisionByZeroFailsTheReplayedStep) {
  DSC_REQUIRE_GPU();
  DSC_ASSERT_OK(device()->bindRank(0, 0));
  DevTensor a(DType::I64, {8}), b(DType::I64, {8}), q(DType::I64, {8});
  a.values({8, 9, 10, 11, 12, 13, 14, 15});
  b.values({1, 2, 3, 4, 5, 6, 7, 8});
  Stepper st;
  st.key = {a.dev().data, b.dev().data, q.dev().data};
  st.enqueue = [&] {
    return cuda::binary(cpu::BinaryOp::Div, a.dev(), b.dev(), q.dev());
  };
  bool replayed = false;
  DSC_ASSERT_OK(st.step(replayed));
  DSC_ASSERT_OK(st.step(replayed));
  ASSERT_TRUE(replayed) << st.why;
  b.values({1, 2, 3, 0, 5, 6, 7, 8});
  Status eager = st.enqueue();
  ASSERT_FALSE(eager.ok());
  Status replayedError = st.step(replayed);
  ASSERT_FALSE(replayedError.ok());
  EXPECT_EQ(replayedError.message(), eager.message());
}

TEST(CudaGraph, AStepThatNeedsTheHostRunsDirectlyAndSaysWhy) {
  DSC_REQUIRE_GPU();
  DSC_ASSERT_OK(device()->bindRank(0, 0));
  DevTensor x(DType::F32, {64}), y(DType::F32, {64});
  x.random(-1, 1, 5);
  // Dropout draws its seed on the host each step.
  Stepper drop;
  drop.key = {x.dev().data, y.dev().data};
  int64_t step = 0;
  drop.enqueue = [&] {
    uint64_t seed = cpu::dropoutSeed(1, ++step, 0, 0);
    return cuda::dropout(x.dev(), 0.5, seed, y.dev(), Tensor());
  };
  bool replayed = true;
  for (int i = 0; i < 4; ++i) {
    DSC_ASSERT_OK(drop.step(replayed));
    EXPECT_FALSE(replayed);
  }
  EXPECT_NE(drop.why.find("dropout"), std::string::npos) << drop.why;
  EXPECT_EQ(drop.hostRuns, 5); // and the failed capture ran nothing

  // A host synchronization inside the step.
  Stepper sync;
  sync.key = {x.dev().data, y.dev().data};
  sync.enqueue = [&] {
    if (Status s = cuda::unary(cpu::UnaryOp::Neg, x.dev(), y.dev()); !s.ok())
      return s;
    return check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  };
  for (int i = 0; i < 3; ++i) {
    DSC_ASSERT_OK(sync.step(replayed));
    EXPECT_FALSE(replayed);
  }
  EXPECT_FALSE(sync.why.empty());
  std::vector<float> got = floatsOf(y);
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(got[size_t(i)], -x.host().as<float>()[i]);
}

} // namespace
} // namespace dsc::cuda::test
