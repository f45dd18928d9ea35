//===- CommTest.cpp - The in-process communicator: ranks as threads -------===//
//
// Collectives on 1, 2, 4, 8 ranks and on a 2 x 2 grid with every axes mask;
// determinism (bitwise equal across ranks and runs, in the order of the
// group); manifest and peer mismatches, timeouts and failures that abort
// the world with an error naming the collective and the ranks.
//
//===----------------------------------------------------------------------===//

#include "comm/inprocess.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <tuple>

using namespace dsc;
using namespace dsc::comm;

namespace {

bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

/// Runs body(rank, comm) on one thread per rank, as the runner does; a rank
/// whose body fails aborts the world. Returns each rank's status.
std::vector<Status>
runRanks(InProcessWorld &world,
         const std::function<Status(int, Communicator &)> &body) {
  world.beginStep();
  std::vector<Status> st(size_t(world.size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < world.size(); ++r)
    threads.emplace_back([&, r] {
      st[size_t(r)] = body(r, *world.comm(r));
      if (!st[size_t(r)].ok())
        world.abort(r, st[size_t(r)].message());
      else
        world.finishStep(r);
    });
  for (auto &t : threads)
    t.join();
  return st;
}

/// A value per (rank, element) whose float sum depends on the order.
float value(int rank, int64_t i) {
  return float(std::pow(10.0, (rank * 7 + i) % 9 - 4)) * (1 + 0.1f * rank) +
         float(i) * 0.001f;
}

class CollectivesOnWorld : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesOnWorld, AllReduceAllGatherReduceScatter) {
  const int W = GetParam();
  const int64_t N = 24 * 8; // divisible by every group size here
  InProcessWorld world(W, W, nullptr, 0, 30);
  std::vector<std::vector<float>> sum(static_cast<size_t>(W),
                                      std::vector<float>(N));
  std::vector<std::vector<float>> gathered(size_t(W),
                                           std::vector<float>(size_t(W) * 5));
  std::vector<std::vector<float>> scattered(size_t(W),
                                            std::vector<float>(N / W));
  std::vector<Status> st = runRanks(world, [&](int r, Communicator &c) {
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.size(), W);
    EXPECT_EQ(c.groupRank({2}), r);
    EXPECT_EQ(c.groupSize({2}), W);
    EXPECT_EQ(c.groupSize({1}), 1);
    std::vector<float> in(N), small(5);
    for (int64_t i = 0; i < N; ++i)
      in[i] = value(r, i);
    for (int i = 0; i < 5; ++i)
      small[i] = float(r * 100 + i);
    Tensor tin = Tensor::of(in.data(), DType::F32, {N});
    if (Status s = c.allReduce(tin, Tensor::of(sum[r].data(), DType::F32, {N}),
                               {2}, "sum");
        !s.ok())
      return s;
    if (Status s = c.allGather(
            Tensor::of(small.data(), DType::F32, {5}),
            Tensor::of(gathered[r].data(), DType::F32, {int64_t(W) * 5}), {2},
            "gather");
        !s.ok())
      return s;
    return c.reduceScatter(tin,
                           Tensor::of(scattered[r].data(), DType::F32, {N / W}),
                           {2}, "scatter");
  });
  for (int r = 0; r < W; ++r)
    ASSERT_TRUE(st[r].ok()) << st[r].message();
  for (int64_t i = 0; i < N; ++i) {
    float expect = value(0, i);
    for (int r = 1; r < W; ++r)
      expect += value(r, i); // rank order, in f32
    for (int r = 0; r < W; ++r) {
      uint32_t a, b;
      std::memcpy(&a, &sum[r][i], 4);
      std::memcpy(&b, &expect, 4);
      ASSERT_EQ(a, b) << "rank " << r << " element " << i;
      if (i / (N / W) == r) {
        std::memcpy(&a, &scattered[r][i % (N / W)], 4);
        ASSERT_EQ(a, b) << "reduce_scatter rank " << r << " element " << i;
      }
    }
  }
  for (int r = 0; r < W; ++r)
    for (int k = 0; k < W; ++k)
      for (int i = 0; i < 5; ++i)
        EXPECT_EQ(gathered[r][k * 5 + i], float(k * 100 + i));
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesOnWorld,
                         ::testing::Values(1, 2, 4, 8));

TEST(InProcessComm, HybridGridEveryMask) {
  // 2 replicas x groups of 2: ranks 0 1 | 2 3.
  InProcessWorld world(4, 2, nullptr, 0, 30);
  EXPECT_EQ(world.groupOf(3, 0), (std::vector<int>{3}));
  EXPECT_EQ(world.groupOf(3, 1), (std::vector<int>{1, 3}));
  EXPECT_EQ(world.groupOf(3, 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(world.groupOf(3, 3), (std::vector<int>{0, 1, 2, 3}));
  std::vector<std::array<int64_t, 4>> got(4);
  std::vector<int64_t> gathered(4 * 2);
  std::vector<Status> st = runRanks(world, [&](int r, Communicator &c) {
    EXPECT_EQ(c.groupRank({1}), r / 2);
    EXPECT_EQ(c.groupRank({2}), r % 2);
    EXPECT_EQ(c.groupRank({3}), r);
    EXPECT_EQ(c.groupSize({0}), 1);
    int64_t in = int64_t(1) << (r * 4);
    for (uint32_t mask = 0; mask < 4; ++mask) {
      int64_t out = 0;
      if (Status s =
              c.allReduce(Tensor::of(&in, DType::I64, {1}),
                          Tensor::of(&out, DType::I64, {1}), {mask}, "mask");
          !s.ok())
        return s;
      got[r][mask] = out;
    }
    // Gather along the group axis, then reduce-scatter across replicas.
    int64_t pair[2];
    if (Status s = c.allGather(Tensor::of(&in, DType::I64, {1}),
                               Tensor::of(pair, DType::I64, {2}), {2}, "g");
        !s.ok())
      return s;
    int64_t half = 0;
    if (Status s =
            c.reduceScatter(Tensor::of(pair, DType::I64, {2}),
                            Tensor::of(&half, DType::I64, {1}), {1}, "rs");
        !s.ok())
      return s;
    gathered[r * 2] = pair[0];
    gathered[r * 2 + 1] = half;
    return Status();
  });
  for (int r = 0; r < 4; ++r)
    ASSERT_TRUE(st[r].ok()) << st[r].message();
  auto bit = [](int r) { return int64_t(1) << (r * 4); };
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(got[r][0], bit(r));
    EXPECT_EQ(got[r][1], bit(r % 2) + bit(r % 2 + 2)) << r;
    EXPECT_EQ(got[r][2], bit(r / 2 * 2) + bit(r / 2 * 2 + 1)) << r;
    EXPECT_EQ(got[r][3], bit(0) + bit(1) + bit(2) + bit(3));
    EXPECT_EQ(gathered[r * 2], bit(r / 2 * 2));
    // pair = {bit(2g), bit(2g+1)}; summed over replicas, element r/2... :
    // replica position p = r / 2 takes element p of the sum.
    int p = r / 2;
    EXPECT_EQ(gathered[r * 2 + 1], bit(p) + bit(p + 2));
  }
}

TEST(InProcessComm, DeterministicAcrossRanksAndRuns) {
  const int W = 8;
  const int64_t N = 4096;
  auto once = [&] {
    InProcessWorld world(W, W, nullptr, 0, 30);
    std::vector<std::vector<float>> out(W, std::vector<float>(N));
    std::vector<std::vector<double>> out64(W, std::vector<double>(N));
    std::vector<std::vector<uint16_t>> outBf(W, std::vector<uint16_t>(N));
    runRanks(world, [&](int r, Communicator &c) {
      // Random timing: ranks arrive in a different order every run.
      std::this_thread::sleep_for(std::chrono::microseconds((r * 37) % 300));
      std::vector<float> in(N);
      std::vector<double> in64(N);
      std::vector<uint16_t> inBf(N);
      for (int64_t i = 0; i < N; ++i) {
        in[i] = value(r, i) * ((i + r) % 2 ? 1.f : -1.f);
        in64[i] = std::sin(double(r * N + i)) * 1e8;
        inBf[i] = floatToBfloat16(in[i]);
      }
      if (Status s = c.allReduce(Tensor::of(in.data(), DType::F32, {N}),
                                 Tensor::of(out[r].data(), DType::F32, {N}),
                                 {2}, "f32");
          !s.ok())
        return s;
      if (Status s = c.allReduce(Tensor::of(in64.data(), DType::F64, {N}),
                                 Tensor::of(out64[r].data(), DType::F64, {N}),
                                 {2}, "f64");
          !s.ok())
        return s;
      return c.allReduce(Tensor::of(inBf.data(), DType::BF16, {N}),
                         Tensor::of(outBf[r].data(), DType::BF16, {N}), {2},
                         "bf16");
    });
    for (int r = 1; r < W; ++r) {
      EXPECT_EQ(std::memcmp(out[0].data(), out[r].data(), N * 4), 0);
      EXPECT_EQ(std::memcmp(out64[0].data(), out64[r].data(), N * 8), 0);
      EXPECT_EQ(std::memcmp(outBf[0].data(), outBf[r].data(), N * 2), 0);
    }
    return std::make_tuple(out[0], out64[0], outBf[0]);
  };
  auto first = once();
  for (int k = 0; k < 5; ++k)
    EXPECT_TRUE(once() == first) << "run " << k;
}

TEST(InProcessComm, InPlaceAllReduce) {
  InProcessWorld world(4, 4, nullptr, 0, 30);
  std::vector<std::vector<float>> buf(4, std::vector<float>(100));
  std::vector<Status> st = runRanks(world, [&](int r, Communicator &c) {
    for (int i = 0; i < 100; ++i)
      buf[r][i] = float(r + i);
    Tensor t = Tensor::of(buf[r].data(), DType::F32, {100});
    return c.allReduce(t, t, {2}, "in place");
  });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].message();
    for (int i = 0; i < 100; ++i)
      ASSERT_EQ(buf[r][i], float(6 + 4 * i));
  }
}

TEST(InProcessComm, ManifestIsCheckedAndStepsRestartIt) {
  const CollectiveSpec manifest[] = {
      {"all_reduce", "bucket 0 gradients", DType::F32, 8, 8, 2},
      {"all_gather", "bucket 0 params", DType::F32, 4, 8, 2},
  };
  InProcessWorld world(2, 2, manifest, 2, 30);
  auto good = [&](int, Communicator &c) {
    float a[8] = {}, b[8] = {};
    if (Status s = c.allReduce(Tensor::of(a, DType::F32, {8}),
                               Tensor::of(b, DType::F32, {8}), {2},
                               "bucket 0 gradients");
        !s.ok())
      return s;
    return c.allGather(Tensor::of(a, DType::F32, {4}),
                       Tensor::of(b, DType::F32, {8}), {2}, "bucket 0 params");
  };
  for (int step = 0; step < 3; ++step)
    for (const Status &s : runRanks(world, good))
      ASSERT_TRUE(s.ok()) << s.message();

  // Rank 1 issues a reduce_scatter where the manifest has an all_gather.
  std::vector<Status> st = runRanks(world, [&](int r, Communicator &c) {
    float a[8] = {}, b[8] = {};
    if (Status s = c.allReduce(Tensor::of(a, DType::F32, {8}),
                               Tensor::of(b, DType::F32, {8}), {2},
                               "bucket 0 gradients");
        !s.ok())
      return s;
    if (r == 1)
      return c.reduceScatter(Tensor::of(a, DType::F32, {8}),
                             Tensor::of(b, DType::F32, {4}), {2},
                             "bucket 0 grads");
    return c.allGather(Tensor::of(a, DType::F32, {4}),
                       Tensor::of(b, DType::F32, {8}), {2}, "bucket 0 params");
  });
  ASSERT_FALSE(st[1].ok());
  EXPECT_EQ(st[1].message(),
            "rank 1: collective #1 is reduce_scatter of 8 -> 4 f32 over the "
            "group axis (\"bucket 0 grads\") but the manifest says all_gather "
            "of 4 -> 8 f32 over the group axis (\"bucket 0 params\")");
  ASSERT_FALSE(st[0].ok());
  EXPECT_TRUE(contains(st[0].message(), "rank 0: collective #1"))
      << st[0].message();
  EXPECT_TRUE(contains(st[0].message(), "rank 1 failed: collective #1 is "
                                        "reduce_scatter"))
      << st[0].message();
  EXPECT_EQ(world.failedRank(), 1);
}

TEST(InProcessComm, ExtraCollectiveBeyondTheManifest) {
  const CollectiveSpec manifest[] = {
      {"all_reduce", "loss", DType::F32, 1, 1, 2},
  };
  InProcessWorld world(2, 2, manifest, 1, 30);
  std::vector<Status> st = runRanks(world, [&](int, Communicator &c) {
    float a = 1, b = 0;
    for (int k = 0; k < 2; ++k)
      if (Status s = c.allReduce(Tensor::of(&a, DType::F32, {1}),
                                 Tensor::of(&b, DType::F32, {1}), {2}, "loss");
          !s.ok())
        return s;
    return Status();
  });
  ASSERT_FALSE(st[0].ok());
  EXPECT_TRUE(contains(st[0].message() + st[1].message(),
                       "is one more than the manifest's 1 collectives"))
      << st[0].message();
}

TEST(InProcessComm, PeersDisagreeWithoutManifest) {
  InProcessWorld world(2, 2, nullptr, 0, 30);
  std::vector<Status> st = runRanks(world, [&](int r, Communicator &c) {
    float a[4] = {}, b[4] = {};
    if (r == 1)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return c.allReduce(Tensor::of(a, DType::F32, {int64_t(r + 2)}),
                       Tensor::of(b, DType::F32, {int64_t(r + 2)}), {2}, "x");
  });
  ASSERT_FALSE(st[1].ok());
  EXPECT_TRUE(contains(st[1].message(),
                       "rank 1: collective #0 (all_reduce of 3 f32 over the "
                       "group axis (\"x\")) does not match rank 0's "
                       "collective #0 (all_reduce of 2 f32"))
      << st[1].message();
  ASSERT_FALSE(st[0].ok());
  EXPECT_TRUE(contains(st[0].message(), "rank 1 failed")) << st[0].message();
}

TEST(InProcessComm, TimeoutNamesTheMissingRank) {
  const CollectiveSpec manifest[] = {
      {"all_reduce", "bucket 0 gradients", DType::F32, 4, 4, 3},
  };
  InProcessWorld world(4, 2, manifest, 1, 0.2);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Status> st = runRanks(world, [&](int r, Communicator &c) {
    float a[4] = {}, b[4] = {};
    if (r == 2) // late: arrives after the others have given up
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
    return c.allReduce(Tensor::of(a, DType::F32, {4}),
                       Tensor::of(b, DType::F32, {4}), {3},
                       "bucket 0 gradients");
  });
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_LT(secs, 5.0);
  int failed = world.failedRank();
  ASSERT_NE(failed, 2);
  ASSERT_GE(failed, 0);
  const std::string &m = st[size_t(failed)].message();
  EXPECT_TRUE(contains(m, "collective #0 (all_reduce of 4 f32 over all ranks "
                          "(\"bucket 0 gradients\")): timed out after 0.2 s "
                          "waiting for rank 2 of the group (ranks 0, 1, 2, "
                          "3); rank 2 is computing"))
      << m;
  for (int r = 0; r < 4; ++r)
    EXPECT_FALSE(st[r].ok()) << r;
  EXPECT_TRUE(contains(st[2].message(), "rank 2: collective #0"))
      << st[2].message();
  EXPECT_TRUE(contains(st[2].message(), "failed: collective #0"))
      << st[2].message();
}

TEST(InProcessComm, TimeoutFromTheEnvironment) {
  ::setenv("DSC_COLLECTIVE_TIMEOUT", "12.5", 1);
  EXPECT_EQ(collectiveTimeoutFromEnv(), 12.5);
  EXPECT_EQ(InProcessWorld(2, 2).timeoutSeconds(), 12.5);
  ::setenv("DSC_COLLECTIVE_TIMEOUT", "soon", 1);
  std::string warning;
  EXPECT_EQ(collectiveTimeoutFromEnv(&warning), 300);
  EXPECT_TRUE(contains(warning, "DSC_COLLECTIVE_TIMEOUT='soon'")) << warning;
  ::unsetenv("DSC_COLLECTIVE_TIMEOUT");
  EXPECT_EQ(collectiveTimeoutFromEnv(), 300);
}

TEST(InProcessComm, AFailingRankAbortsTheWaitingOnes) {
  InProcessWorld world(4, 4, nullptr, 0, 60);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Status> st = runRanks(world, [&](int r, Communicator &c) {
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return Status::error(StatusCode::InvalidArgument,
                           "matmul(lhs=f32[2,3], rhs=f32[4,5]): inner dims");
    }
    float a = 1, b = 0;
    return c.allReduce(Tensor::of(&a, DType::F32, {1}),
                       Tensor::of(&b, DType::F32, {1}), {2}, "loss");
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                .count(),
            5.0);
  for (int r : {0, 2, 3}) {
    ASSERT_FALSE(st[r].ok());
    EXPECT_TRUE(contains(st[r].message(),
                         "rank " + std::to_string(r) +
                             ": collective #0 (all_reduce of 1 f32 over the "
                             "group axis (\"loss\")): rank 1 failed: matmul("))
        << st[r].message();
  }
  EXPECT_EQ(world.failedRank(), 1);
}

TEST(InProcessComm, APeerThatSkipsACollectiveIsAnErrorNotAHang) {
  InProcessWorld world(2, 2, nullptr, 0, 60);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Status> st = runRanks(world, [&](int r, Communicator &c) {
    if (r == 1)
      return Status(); // returns without the collective
    float a = 1, b = 0;
    return c.allReduce(Tensor::of(&a, DType::F32, {1}),
                       Tensor::of(&b, DType::F32, {1}), {2}, "loss");
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                .count(),
            5.0);
  ASSERT_FALSE(st[0].ok());
  EXPECT_TRUE(contains(st[0].message(), "rank 1 finished its step after 0 "
                                        "collectives without joining"))
      << st[0].message();
}

TEST(InProcessComm, BadShapesAreErrors) {
  InProcessWorld world(2, 2, nullptr, 0, 30);
  std::vector<Status> st = runRanks(world, [&](int, Communicator &c) {
    float a[4] = {}, b[4] = {};
    return c.allGather(Tensor::of(a, DType::F32, {4}),
                       Tensor::of(b, DType::F32, {4}), {2}, "params");
  });
  ASSERT_FALSE(st[0].ok());
  EXPECT_TRUE(contains(st[0].message() + st[1].message(),
                       "do not fit a group of 2 ranks (output = group x "
                       "input)"));
}

} // namespace

//===----------------------------------------------------------------------===//
// The manifest checker both communicators use (comm/manifest.h)
//===----------------------------------------------------------------------===//

TEST(ManifestChecker, EveryStepStartsAtEntryZeroAndAnExtraCallIsAnError) {
  const CollectiveSpec manifest[] = {
      {"all_reduce", "bucket 0 gradients", DType::F32, 8, 8, 2},
      {"all_gather", "bucket 0 params", DType::BF16, 4, 8, 3},
  };
  ManifestChecker c(manifest, 2);
  int64_t index = -1;
  for (int step = 0; step < 3; ++step) {
    c.beginStep();
    ASSERT_TRUE(c.check("all_reduce", DType::F32, 8, 8, 2, "g", index).ok());
    EXPECT_EQ(index, 0);
    ASSERT_TRUE(c.check("all_gather", DType::BF16, 4, 8, 3, "p", index).ok());
    EXPECT_EQ(index, 1);
    EXPECT_EQ(c.calls(), 2);
  }
  // A third call is not entry 0 again (what indexing modulo the manifest's
  // length would make it).
  Status s = c.check("all_reduce", DType::F32, 8, 8, 2, "g", index);
  EXPECT_EQ(index, 2);
  EXPECT_EQ(s.message(), "collective #2 (all_reduce of 8 f32 over the group "
                         "axis (\"g\")) is one more than the manifest's 2 "
                         "collectives per step");
}

TEST(ManifestChecker, AMismatchNamesTheIndexTheCallAndTheEntry) {
  const CollectiveSpec manifest[] = {
      {"all_reduce", "loss", DType::F32, 1, 1, 3},
      {"reduce_scatter", "bucket 1 gradients", DType::F32, 16, 4, 2},
  };
  ManifestChecker c(manifest, 2);
  int64_t index = -1;
  ASSERT_TRUE(c.check("all_reduce", DType::F32, 1, 1, 3, "loss", index).ok());
  for (auto [kind, dtype, in, out, mask] :
       {std::make_tuple("all_gather", DType::F32, 16, 4, 2u),
        std::make_tuple("reduce_scatter", DType::F16, 16, 4, 2u),
        std::make_tuple("reduce_scatter", DType::F32, 8, 4, 2u),
        std::make_tuple("reduce_scatter", DType::F32, 16, 2, 2u),
        std::make_tuple("reduce_scatter", DType::F32, 16, 4, 1u)}) {
    ManifestChecker d = c; // at entry 1
    Status s = d.check(kind, dtype, in, out, mask, "grads", index);
    ASSERT_FALSE(s.ok()) << kind;
    EXPECT_EQ(index, 1);
    EXPECT_EQ(s.message().rfind("collective #1 is ", 0), 0u) << s.message();
    EXPECT_TRUE(contains(s.message(),
                         " but the manifest says reduce_scatter of 16 -> 4 "
                         "f32 over the group axis (\"bucket 1 gradients\")"))
        << s.message();
  }
  // Without a manifest calls are counted, never refused.
  ManifestChecker none;
  EXPECT_TRUE(none.check("all_reduce", DType::F32, 3, 3, 0, "", index).ok());
  EXPECT_TRUE(none.check("all_gather", DType::F32, 3, 9, 3, "", index).ok());
  EXPECT_EQ(index, 1);
  EXPECT_FALSE(none.enabled());
  EXPECT_EQ(describeCollective("all_gather", 3, 9, DType::BF16, 1, "w"),
            "all_gather of 3 -> 9 bf16 over the replicas axis (\"w\")");
}
