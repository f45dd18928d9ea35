//===- OffloadTest.cpp - Copies to host memory and host tasks -------------===//
//
// offloadCopy there and back through pinned host memory; a host task that
// reads what was copied to the host just before it and writes what is
// copied back after it, the compute stream waiting for that copy; a host
// task that waits only for the copies it reads (the compute stream held
// by a StreamGate until it runs), and a copy to the device that waits for
// the host task that wrote its source in place, and a host task that
// rewrites a copy up's source waiting for it; the same two orders where
// the later value lies over part of the earlier one at another address
// (the memory plan reuses the host frame); a host task's failure
// reported by Device::synchronize (and its later tasks skipped until
// then); the same step captured by Device::replayStep and replayed, its
// host task run again by every replay on the values in memory then; a call
// site used twice in one step, which runs directly.
//
//===----------------------------------------------------------------------===//

#include "StreamGate.h"
#include "TestUtil.h"

#include "cuda/device.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

namespace dsc::cuda::test {
namespace {

/// Zero-filled pinned host memory from the device, freed with it.
struct Pinned {
  void *p = nullptr;
  explicit Pinned(size_t bytes) {
    EXPECT_TRUE(device()->allocateHost(bytes, &p).ok());
  }
  Pinned(const Pinned &) = delete;
  Pinned &operator=(const Pinned &) = delete;
  ~Pinned() { device()->releaseHost(p); }
  float *f() const { return static_cast<float *>(p); }
  Tensor t(int64_t n) const { return Tensor::of(p, DType::F32, {n}); }
};

std::vector<float> floatsOf(const DevTensor &t) {
  std::vector<char> bytes = t.download();
  std::vector<float> v(size_t(t.host().numel()));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

TEST(CudaOffload, ACopyToPinnedHostMemoryAndBack) {
  DSC_REQUIRE_GPU();
  DSC_ASSERT_OK(device()->bindRank(0, 0));
  const int64_t n = 1000;
  DevTensor x(DType::F32, {n}), y(DType::F32, {n});
  x.random(-1, 1, 11);
  Pinned host(n * sizeof(float));
  DSC_ASSERT_OK(cuda::offloadCopy(x.dev(), host.t(n), true, "x to host"));
  DSC_ASSERT_OK(cuda::offloadCopy(host.t(n), y.dev(), false, "x back"));
  DSC_ASSERT_OK(cuda::offloadWait(y.dev(), "x back"));
  DSC_ASSERT_OK(cuda::offloadJoin());
  DSC_ASSERT_OK(device()->synchronize());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(host.f()[i], x.host().as<float>()[i]) << i;
  EXPECT_EQ(floatsOf(y), floatsOf(x));

  // The checks: the CPU's messages, and which memory each side is.
  Status s = cuda::offloadCopy(x.dev(), y.dev(), true, "bad");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("dst is not pinned host memory"),
            std::string::npos)
      << s.message();
  std::vector<float> pageable(static_cast<size_t>(n));
  s = cuda::offloadCopy(x.dev(), Tensor::of(pageable.data(), DType::F32, {n}),
                        true, "pageable");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("dst is not pinned host memory"),
            std::string::npos)
      << s.message();
  s = cuda::offloadCopy(host.t(n), y.dev(), true, "backwards");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("src is not device memory"), std::string::npos)
      << s.message();
  Tensor half = Tensor::of(host.p, DType::F16, {n});
  s = cuda::offloadCopy(x.dev(), half, true, "grad w");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "offload_copy(what=grad w, src=f32[1000], "
                         "dst=f16[1000], to=host): dtypes differ (f32 vs f16)");
  DevTensor never(DType::F32, {3});
  s = cuda::offloadWait(never.dev(), "master w");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "offload_wait(what=master w, dst=f32[3]): no "
                         "offload_copy into this tensor was issued");
  DSC_ASSERT_OK(device()->synchronize());
}

/// The offloaded step: y = -x on the compute stream, y to the host, there
/// z = 2 * y + bias (bias read from pinned memory when the task runs), z
/// back to the device, then w = -z on the compute stream after it: w = 2x -
/// bias. `runs` counts the host task's runs.
struct OffloadStep {
  int64_t n;
  DevTensor x, y, z, w;
  Pinned hostY, hostZ, bias;
  std::atomic<int> runs{0};
  int site = 0;
  bool twice = false; // the host task's site used twice

  explicit OffloadStep(int64_t n, int site)
      : n(n), x(DType::F32, {n}), y(DType::F32, {n}), z(DType::F32, {n}),
        w(DType::F32, {n}), hostY(n * sizeof(float)), hostZ(n * sizeof(float)),
        bias(sizeof(float)), site(site) {}

  Status hostPart() {
    float *hy = hostY.f(), *hz = hostZ.f(), *b = bias.f();
    std::atomic<int> *count = &runs;
    int64_t size = n;
    return cuda::hostTask(site,
                          [hy, hz, b, count, size] {
                            ++*count;
                            if (*b < 0)
                              return Status::error(StatusCode::InvalidArgument,
                                                   "a negative bias");
                            for (int64_t i = 0; i < size; ++i)
                              hz[i] = 2 * hy[i] + *b;
                            return Status();
                          },
                          "scale", {hostY.t(n)}, {hostZ.t(n)});
  }

  Status enqueue() {
    if (Status s = cuda::unary(cpu::UnaryOp::Neg, x.dev(), y.dev()); !s.ok())
      return s;
    if (Status s = cuda::offloadCopy(y.dev(), hostY.t(n), true, "y"); !s.ok())
      return s;
    if (Status s = hostPart(); !s.ok())
      return s;
    if (twice)
      if (Status s = hostPart(); !s.ok())
        return s;
    if (Status s = cuda::offloadCopy(hostZ.t(n), z.dev(), false, "z"); !s.ok())
      return s;
    if (Status s = cuda::offloadWait(z.dev(), "z"); !s.ok())
      return s;
    if (Status s = cuda::unary(cpu::UnaryOp::Neg, z.dev(), w.dev()); !s.ok())
      return s;
    return cuda::offloadJoin();
  }

  void expectResult(const std::string &when) {
    std::vector<float> got = floatsOf(w);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[size_t(i)], -(2 * -x.host().as<float>()[i] + *bias.f()))
          << when << ", element " << i;
  }
};

TEST(CudaOffload, AHostTaskRunsBetweenItsCopies) {
  DSC_REQUIRE_GPU();
  DSC_ASSERT_OK(device()->bindRank(0, 0));
  OffloadStep st(1 << 16, 1);
  st.x.random(-4, 4, 3);
  *st.bias.f() = 0.5f;
  DSC_ASSERT_OK(st.enqueue());
  DSC_ASSERT_OK(device()->synchronize());
  EXPECT_EQ(st.runs.load(), 1);
  st.expectResult("direct");
  // Again on the same site, new values: the task's function is replaced.
  st.x.random(-4, 4, 4);
  *st.bias.f() = 2;
  DSC_ASSERT_OK(st.enqueue());
  DSC_ASSERT_OK(device()->synchronize());
  EXPECT_EQ(st.runs.load(), 2);
  st.expectResult("again");
}

/// Whether the pinned floats equal the device tensor's host values.
bool sameFloats(const float *p, const DevTensor &t) {
  return std::memcmp(p, t.host().data, size_t(t.host().nbytes())) == 0;
}

bool allZero(const float *p, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (p[i] != 0)
      return false;
  return true;
}

TEST(CudaOffload, AHostTaskWaitsOnlyForTheCopiesItReads) {
  DSC_REQUIRE_GPU();
  DSC_ASSERT_OK(device()->bindRank(0, 0));
  const int64_t n = 1 << 14;
  DevTensor a(DType::F32, {n}), b(DType::F32, {n});
  a.random(1, 2, 31);
  b.random(1, 2, 32);
  Pinned hostA(n * sizeof(float)), hostB(n * sizeof(float));
  StreamGate gate;
  // a goes down now; b after the compute stream passes the gate, which
  // only the host task reading a opens.
  DSC_ASSERT_OK(cuda::offloadCopy(a.dev(), hostA.t(n), true, "a"));
  DSC_ASSERT_OK(gate.hold(stream(), 10));
  DSC_ASSERT_OK(cuda::offloadCopy(b.dev(), hostB.t(n), true, "b"));
  std::atomic<bool> sawA{false}, bNotYet{false}, sawB{false};
  float *pa = hostA.f(), *pb = hostB.f();
  DSC_ASSERT_OK(cuda::hostTask(11,
                               [&] {
                                 sawA = sameFloats(pa, a);
                                 bNotYet = allZero(pb, n);
                                 gate.open();
                                 return Status();
                               },
                               "reads a", {hostA.t(n)}, {}));
  DSC_ASSERT_OK(cuda::hostTask(12,
                               [&] {
                                 sawB = sameFloats(pb, b);
                                 return Status();
                               },
                               "reads b", {hostB.t(n)}, {}));
  DSC_ASSERT_OK(cuda::offloadJoin());
  DSC_ASSERT_OK(device()->synchronize());
  EXPECT_FALSE(gate.timedOut())
      << "the host task reading a waited for the copy into b";
  EXPECT_TRUE(sawA.load());
  EXPECT_TRUE(bNotYet.load());
  EXPECT_TRUE(sawB.load());
}

TEST(CudaOffload, ACopyUpWaitsForTheHostTaskThatWroteItsSource) {
  DSC_REQUIRE_GPU();
  DSC_ASSERT_OK(device()->bindRank(0, 0));
  const int64_t n = 1 << 14;
  DevTensor a(DType::F32, {n}), back(DType::F32, {n}), w(DType::F32, {n});
  a.random(-3, 3, 41);
  Pinned hostA(n * sizeof(float));
  float *pa = hostA.f();
  for (int step = 1; step <= 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    // hostA is a copy's destination and, in place, the host task's output:
    // its copy event and its host-write event are two.
    DSC_ASSERT_OK(cuda::offloadCopy(a.dev(), hostA.t(n), true, "a"));
    DSC_ASSERT_OK(cuda::hostTask(13,
                                 [=] {
                                   // Slow, so a copy up that did not wait would
                                   // read a's values.
                                   std::this_thread::sleep_for(
                                       std::chrono::milliseconds(50));
                                   for (int64_t i = 0; i < n; ++i)
                                     pa[i] = 2 * pa[i];
                                   return Status();
                                 },
                                 "double a", {hostA.t(n)}, {hostA.t(n)}));
    DSC_ASSERT_OK(cuda::offloadCopy(hostA.t(n), back.dev(), false, "2a"));
    DSC_ASSERT_OK(cuda::offloadWait(back.dev(), "2a"));
    DSC_ASSERT_OK(cuda::unary(cpu::UnaryOp::Neg, back.dev(), w.dev()));
    DSC_ASSERT_OK(cuda::offloadJoin());
    DSC_ASSERT_OK(device()->synchronize());
    std::vector<float> got = floatsOf(w);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[size_t(i)], -2 * a.host().as<float>()[i]) << i;
  }
}

/// A host tensor x (values 0..n-1) is copied up behind a gate (the copy
/// forks from the compute stream); a host task that reads nothing copied
/// then writes n floats at x + `at`, so only the copy up out of x can hold
/// it: x itself (at 0: a parameter shard that the host AdamW rewrites after
/// backward's gather copied it up) or a later value over part of x at
/// another address (the memory plan reuses the host frame).
void expectHostWriteWaitsForCopyUp(int site, int64_t at) {
  DSC_REQUIRE_GPU();
  DSC_ASSERT_OK(device()->bindRank(0, 0));
  const int64_t n = 1 << 14;
  DevTensor up(DType::F32, {n});
  Pinned frame(size_t(n + at) * sizeof(float));
  float *px = frame.f();
  for (int64_t i = 0; i < n; ++i)
    px[i] = float(i);
  StreamGate gate;
  DSC_ASSERT_OK(gate.hold(stream(), 10));
  DSC_ASSERT_OK(cuda::offloadCopy(frame.t(n), up.dev(), false, "x up"));
  Tensor y = Tensor::of(px + at, DType::F32, {n});
  DSC_ASSERT_OK(cuda::hostTask(site,
                               [=] {
                                 for (int64_t i = 0; i < n; ++i)
                                   px[at + i] = -1;
                                 return Status();
                               },
                               "write over x", {}, {y}));
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.open();
  });
  // Nothing may return before the opener is joined.
  Status waited = cuda::offloadWait(up.dev(), "x up");
  Status joined = cuda::offloadJoin();
  Status done = device()->synchronize();
  opener.join();
  DSC_ASSERT_OK(waited);
  DSC_ASSERT_OK(joined);
  DSC_ASSERT_OK(done);
  EXPECT_FALSE(gate.timedOut());
  std::vector<float> got = floatsOf(up);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(got[size_t(i)], float(i)) << i;
  EXPECT_EQ(px[at], -1.0f);
}

TEST(CudaOffload, AHostTaskThatOverwritesASourceWaitsForItsCopyUp) {
  expectHostWriteWaitsForCopyUp(14, 0);
}

TEST(CudaOffload, AHostTaskWritingAReusedRangeWaitsForTheCopyUpReadingIt) {
  expectHostWriteWaitsForCopyUp(16, (1 << 14) / 2);
}

TEST(CudaOffload, ACopyIntoAReusedHostRangeWaitsForTheHostTaskReadingIt) {
  DSC_REQUIRE_GPU();
  DSC_ASSERT_OK(device()->bindRank(0, 0));
  const int64_t n = 1 << 14;
  DevTensor a(DType::F32, {n}), b(DType::F32, {n});
  a.random(-3, 3, 43);
  b.random(5, 9, 44);
  // A frame of 1.5 n floats: a's gradient at 0, then b's at n / 2, over
  // a's upper half once a's host task is done with it.
  Pinned frame(size_t(n + n / 2) * sizeof(float));
  Pinned result(size_t(n) * sizeof(float));
  float *pa = frame.f(), *pr = result.f();
  Tensor hostA = frame.t(n);
  Tensor hostB = Tensor::of(frame.f() + n / 2, DType::F32, {n});
  DSC_ASSERT_OK(cuda::offloadCopy(a.dev(), hostA, true, "a"));
  DSC_ASSERT_OK(cuda::hostTask(15,
                               [=] {
                                 // Slow, so a copy that did not wait would
                                 // have overwritten a's upper half.
                                 std::this_thread::sleep_for(
                                     std::chrono::milliseconds(50));
                                 for (int64_t i = 0; i < n; ++i)
                                   pr[i] = pa[i];
                                 return Status();
                               },
                               "read a", {hostA}, {result.t(n)}));
  DSC_ASSERT_OK(cuda::offloadCopy(b.dev(), hostB, true, "b"));
  DSC_ASSERT_OK(cuda::offloadJoin());
  DSC_ASSERT_OK(device()->synchronize());
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(pr[i], a.host().as<float>()[i]) << i;
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(pa[n / 2 + i], b.host().as<float>()[i]) << i;
}

TEST(CudaOffload, AFailedHostTaskIsReportedBySynchronize) {
  DSC_REQUIRE_GPU();
  DSC_ASSERT_OK(device()->bindRank(0, 0));
  OffloadStep st(256, 2);
  st.x.random(-1, 1, 5);
  *st.bias.f() = -1;
  DSC_ASSERT_OK(st.enqueue()); // issued fine; it fails on the host later
  std::atomic<int> later{0};
  DSC_ASSERT_OK(cuda::hostTask(3,
                               [&later] {
                                 ++later;
                                 return Status();
                               },
                               "later", {}, {}));
  Status s = device()->synchronize();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "host task scale: a negative bias");
  EXPECT_EQ(later.load(), 0); // skipped once one failed
  // Reported once; the rank's host tasks run again after.
  DSC_ASSERT_OK(device()->synchronize());
  *st.bias.f() = 1;
  DSC_ASSERT_OK(st.enqueue());
  DSC_ASSERT_OK(device()->synchronize());
  st.expectResult("after the failure");
}

/// One step through Device::replayStep, as the program shell runs it.
Status stepOf(const void *tag, OffloadStep &st, bool &replayed,
              std::string &why, int &hostRuns) {
  std::vector<const void *> key = {tag, st.x.dev().data, st.w.dev().data};
  auto enqueue = [&] {
    ++hostRuns;
    return st.enqueue();
  };
  bool ran = false;
  if (Status s = device()->replayStep(key, enqueue, ran, why); !s.ok())
    return s;
  replayed = ran;
  if (!ran)
    if (Status s = enqueue(); !s.ok())
      return s;
  return device()->synchronize();
}

TEST(CudaOffload, TheStepIsCapturedAndReplayedWithItsHostTask) {
  DSC_REQUIRE_GPU();
  DSC_ASSERT_OK(device()->bindRank(0, 0));
  static const char tag = 0;
  OffloadStep st(4096, 4);
  std::string why;
  int hostRuns = 0;
  for (int step = 1; step <= 5; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    st.x.random(-2, 2, uint32_t(10 + step)); // new values each step
    *st.bias.f() = float(step);
    bool replayed = false;
    DSC_ASSERT_OK(stepOf(&tag, st, replayed, why, hostRuns));
    EXPECT_EQ(replayed, step >= 2) << why;
    EXPECT_EQ(st.runs.load(), step); // the host task ran in every step
    st.expectResult("step " + std::to_string(step));
  }
  EXPECT_TRUE(why.empty()) << why;
  EXPECT_EQ(hostRuns, 2); // direct, then once while captured

  // A replayed host task's failure: the next synchronize's error.
  *st.bias.f() = -3;
  bool replayed = false;
  Status s = stepOf(&tag, st, replayed, why, hostRuns);
  EXPECT_TRUE(replayed);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "host task scale: a negative bias");
  *st.bias.f() = 1;
  DSC_ASSERT_OK(stepOf(&tag, st, replayed, why, hostRuns));
  EXPECT_TRUE(replayed);
  st.expectResult("after the replayed failure");
  EXPECT_EQ(hostRuns, 2);
}

TEST(CudaOffload, ASiteUsedTwiceInAStepIsNeverCaptured) {
  DSC_REQUIRE_GPU();
  DSC_ASSERT_OK(device()->bindRank(0, 0));
  static const char tag = 0;
  OffloadStep st(512, 5);
  st.twice = true;
  std::string why;
  int hostRuns = 0;
  for (int step = 1; step <= 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    st.x.random(-2, 2, uint32_t(20 + step));
    *st.bias.f() = 0.25f * float(step);
    bool replayed = true;
    DSC_ASSERT_OK(stepOf(&tag, st, replayed, why, hostRuns));
    EXPECT_FALSE(replayed);
    st.expectResult("step " + std::to_string(step));
  }
  EXPECT_NE(why.find("runs twice in one captured step"), std::string::npos)
      << why;
  // The failed capture ran nothing: every step ran directly once.
  EXPECT_EQ(hostRuns, 5);
  EXPECT_EQ(st.runs.load(), 8);
}

} // namespace
} // namespace dsc::cuda::test
