//===- CommTest.cpp - The device, staged and NCCL communicators -----------===//

#include "TestUtil.h"
#include "comm/inprocess.h"
#include "cuda/device.h"

#include <thread>

namespace dsc::cuda::test {
namespace {

TEST(CudaDevice, AllocateCopyAndAccount) {
  DSC_REQUIRE_GPU();
  Device *d = device();
  DSC_ASSERT_OK(d->bindRank(0));
  EXPECT_NE(d->describe().find("GPU"), std::string::npos);
  void *p = nullptr;
  DSC_ASSERT_OK(d->allocate(1000, &p));
  std::vector<float> in(250), out(250, -1.f);
  for (int i = 0; i < 250; ++i)
    in[size_t(i)] = float(i) * 0.5f;
  DSC_ASSERT_OK(d->toHost(out.data(), p, 1000)); // zero-filled
  EXPECT_EQ(out[7], 0.f);
  DSC_ASSERT_OK(d->toDevice(p, in.data(), 1000));
  DSC_ASSERT_OK(d->toHost(out.data(), p, 1000));
  EXPECT_EQ(out, in);
  size_t now = 0, peak = 0;
  DSC_ASSERT_OK(d->memoryInUse(now, peak));
  EXPECT_GE(now, size_t(1000));
  EXPECT_GE(peak, now);
  d->release(p);
}

TEST(CudaDevice, ErrorsNameTheCallAndRank) {
  DSC_REQUIRE_GPU();
  DSC_ASSERT_OK(bindRank(3, 0));
  Status s = check(cudaErrorInvalidValue, "cudaMemcpyAsync");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cudaMemcpyAsync failed on rank 3 (GPU 0)"),
            std::string::npos)
      << s.message();
  DSC_ASSERT_OK(bindRank(0, 0));
}

// Two in-process ranks on one GPU: each staged collective equals the host
// one (the sums are the in-process world's, in rank order).
TEST(StagedComm, TwoRanksOnOneGpu) {
  DSC_REQUIRE_GPU();
  comm::InProcessWorld world(2, 2);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < 2; ++r)
    comms.push_back(device()->wrapInProcess(world.comm(r)));
  std::vector<std::vector<float>> reduced(2), gathered(2), scattered(2);
  auto body = [&](int r) {
    ASSERT_TRUE(bindRank(r, 0).ok());
    DevTensor in(DType::F32, {4}), sum(DType::F32, {4}), all(DType::F32, {8}),
        part(DType::F32, {2});
    in.values({1.f + r, 2.f + r, 3.f + r, 4.f + r});
    Communicator &c = *comms[size_t(r)];
    EXPECT_TRUE(c.allReduce(in.dev(), sum.dev(), GridAxes{3u}, "sum").ok());
    EXPECT_TRUE(c.allGather(in.dev(), all.dev(), GridAxes{3u}, "gather").ok());
    EXPECT_TRUE(
        c.reduceScatter(in.dev(), part.dev(), GridAxes{3u}, "scatter").ok());
    EXPECT_TRUE(c.wait(sum.dev(), "sum").ok());
    auto read = [](const DevTensor &t) {
      std::vector<char> b = t.download();
      const float *f = reinterpret_cast<const float *>(b.data());
      return std::vector<float>(f, f + t.host().numel());
    };
    reduced[size_t(r)] = read(sum);
    gathered[size_t(r)] = read(all);
    scattered[size_t(r)] = read(part);
  };
  std::thread other(body, 1);
  body(0);
  other.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(reduced[size_t(r)], (std::vector<float>{3, 5, 7, 9}));
    EXPECT_EQ(gathered[size_t(r)],
              (std::vector<float>{1, 2, 3, 4, 2, 3, 4, 5}));
  }
  EXPECT_EQ(scattered[0], (std::vector<float>{3, 5}));
  EXPECT_EQ(scattered[1], (std::vector<float>{7, 9}));
}

// NCCL with one rank: the collectives run on the communication stream and
// wait() orders the compute stream after them; a call that differs from the
// manifest is an error naming it.
TEST(NcclComm, WorldOfOne) {
  DSC_REQUIRE_GPU();
  const CollectiveSpec manifest[] = {
      {"all_reduce", "loss", DType::F32, 4, 4, 3u},
      {"all_gather", "bucket0 parameters", DType::F32, 4, 4, 2u},
  };
  DistributedInit init;
  init.manifest = manifest;
  init.numCollectives = 2;
  init.exchangeId = [](std::vector<uint8_t> &) { return Status(); };
  std::unique_ptr<Communicator> c;
  DSC_ASSERT_OK(device()->createDistributed(init, c));
  DevTensor in(DType::F32, {4}), out(DType::F32, {4});
  in.values({1, 2, 3, 4});
  DSC_ASSERT_OK(c->allReduce(in.dev(), out.dev(), GridAxes{3u}, "loss"));
  DSC_ASSERT_OK(c->wait(out.dev(), "loss"));
  // Collective #1 of the step is an all_gather in the manifest (a device
  // synchronize would end the step and start again at #0).
  Status bad = c->allReduce(in.dev(), out.dev(), GridAxes{3u}, "oops");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("manifest"), std::string::npos) << bad.message();
  DSC_ASSERT_OK(device()->synchronize());
  expectClose(in, out, 0, 0, "all_reduce over one rank");
}

} // namespace
} // namespace dsc::cuda::test
