//===- DimsTest.cu - Broadcast index math of the CUDA kernels -------------===//
//
// Host-side checks (they run without a GPU): the simplified strides give
// every element the offset the full ones give, in 32- and 64-bit math.

#include "cuda/common.cuh"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace dsc::cuda::detail {
namespace {

TEST(CudaDims, SimplifiedGivesTheSameOffsets) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    int rank = 1 + int(rng() % 5);
    std::vector<int64_t> out(static_cast<size_t>(rank));
    std::vector<int64_t> in;
    for (int64_t &d : out)
      d = 1 + int64_t(rng() % 5);
    // An operand of the trailing dims, each kept or broadcast (size 1).
    int inRank = int(rng() % (rank + 1));
    for (int d = rank - inRank; d < rank; ++d)
      in.push_back(rng() % 3 == 0 ? 1 : out[size_t(d)]);
    Tensor o = Tensor::of(nullptr, DType::F32, out);
    Tensor i = Tensor::of(nullptr, DType::F32, in);
    Dims full = broadcastDims(i, o), simple = simplified(full);
    EXPECT_LE(simple.rank, full.rank);
    for (int64_t k = 0; k < o.numel(); ++k) {
      ASSERT_EQ(offsetOf(k, full), offsetOf(k, simple)) << "trial " << trial;
      ASSERT_EQ(offsetOf(k, full), offsetOf32(uint32_t(k), simple));
    }
  }
}

TEST(CudaDims, BiasAndMaskAreOneDivision) {
  Tensor out = Tensor::of(nullptr, DType::F32, {16, 1024, 3072});
  Tensor bias = Tensor::of(nullptr, DType::F32, {3072});
  Dims b = simplified(broadcastDims(bias, out));
  ASSERT_EQ(b.rank, 1);
  EXPECT_EQ(b.size[0], 3072);
  EXPECT_EQ(b.stride[0], 1);
  Tensor scores = Tensor::of(nullptr, DType::F32, {16, 12, 1024, 1024});
  Tensor mask = Tensor::of(nullptr, DType::Bool, {1, 1, 1024, 1024});
  Dims m = simplified(broadcastDims(mask, scores));
  ASSERT_EQ(m.rank, 1);
  EXPECT_EQ(m.size[0], 1024 * 1024);
  Tensor scalar = Tensor::of(nullptr, DType::F32, {1, 1});
  EXPECT_EQ(simplified(broadcastDims(scalar, scores)).rank, 0);
}

} // namespace
} // namespace dsc::cuda::detail
