//===- HalfEmulationTest.cpp - f16/bf16 matmul, gemm and conv on the CPU --===//
//
// The CPU backend runs 16-bit products as the f32 kernel on the widened
// operands, rounding each result once: exactly that, for every kernel
// dsc-mixed-precision puts in 16-bit, and errors for mixed dtypes.

#include "GradCheck.h"
#include "cpu/kernels.h"
#include "cpu/step_kernels.h"

#include <random>
#include <vector>

using namespace dsc;
using namespace dsc::cpu;

namespace {

/// A 16-bit tensor of random values and its exact f32 twin.
struct Pair {
  std::vector<uint16_t> h;
  std::vector<float> f;
  std::vector<int64_t> shape;
  DType dtype;
  Pair(DType dt, std::vector<int64_t> s, uint32_t seed) : shape(s), dtype(dt) {
    int64_t n = 1;
    for (int64_t d : s)
      n *= d;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    f.resize(size_t(n));
    h.resize(size_t(n));
    for (float &x : f)
      x = u(rng);
    DSC_EXPECT_OK(cast(wide(), half()));
    DSC_EXPECT_OK(cast(half(), wide())); // now exactly the 16-bit values
  }
  Tensor half() { return Tensor::of(h.data(), dtype, shape); }
  Tensor wide() { return Tensor::of(f.data(), DType::F32, shape); }
};

/// The f32 result rounded once to `dt`.
std::vector<uint16_t> rounded(std::vector<float> v, DType dt,
                              std::vector<int64_t> shape) {
  std::vector<uint16_t> out(v.size());
  DSC_EXPECT_OK(cast(Tensor::of(v.data(), DType::F32, shape),
                     Tensor::of(out.data(), dt, shape)));
  return out;
}

int64_t numel(const std::vector<int64_t> &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

} // namespace

TEST(HalfEmulation, MatmulAndGemmRoundOnce) {
  for (DType dt : {DType::BF16, DType::F16}) {
    Pair a(dt, {2, 5, 7}, 1), b(dt, {7, 3}, 2), bias(dt, {3}, 3);
    std::vector<int64_t> os = {2, 5, 3};
    std::vector<float> want(size_t(numel(os)));
    std::vector<uint16_t> got(want.size());
    DSC_ASSERT_OK(
        matmul(a.wide(), b.wide(), Tensor::of(want.data(), DType::F32, os)));
    DSC_ASSERT_OK(matmul(a.half(), b.half(), Tensor::of(got.data(), dt, os)));
    EXPECT_EQ(got, rounded(want, dt, os)) << dtypeName(dt);

    Pair x(dt, {5, 7}, 4);
    GemmAttrs attrs;
    attrs.alpha = 0.5;
    attrs.transB = false;
    std::vector<float> gw(15);
    std::vector<uint16_t> gg(15);
    DSC_ASSERT_OK(gemm(x.wide(), b.wide(), bias.wide(), attrs,
                       Tensor::of(gw.data(), DType::F32, {5, 3})));
    DSC_ASSERT_OK(gemm(x.half(), b.half(), bias.half(), attrs,
                       Tensor::of(gg.data(), dt, {5, 3})));
    EXPECT_EQ(gg, rounded(gw, dt, {5, 3})) << dtypeName(dt);
  }
}

TEST(HalfEmulation, ConvAndItsGradientsRoundOnce) {
  ConvAttrs attrs;
  attrs.pads = {1, 1, 1, 1};
  for (DType dt : {DType::BF16, DType::F16}) {
    Pair x(dt, {2, 3, 5, 5}, 5), w(dt, {4, 3, 3, 3}, 6), bias(dt, {4}, 7);
    Pair dy(dt, {2, 4, 5, 5}, 8);
    std::vector<int64_t> ys = {2, 4, 5, 5}, xs = {2, 3, 5, 5},
                         ws = {4, 3, 3, 3};
    std::vector<float> yw(size_t(numel(ys))), dxw(size_t(numel(xs))),
        dww(size_t(numel(ws)));
    std::vector<uint16_t> yh(yw.size()), dxh(dxw.size()), dwh(dww.size());
    DSC_ASSERT_OK(conv(x.wide(), w.wide(), bias.wide(), attrs,
                       Tensor::of(yw.data(), DType::F32, ys)));
    DSC_ASSERT_OK(conv(x.half(), w.half(), bias.half(), attrs,
                       Tensor::of(yh.data(), dt, ys)));
    EXPECT_EQ(yh, rounded(yw, dt, ys));
    DSC_ASSERT_OK(convBackwardInput(dy.wide(), w.wide(), attrs,
                                    Tensor::of(dxw.data(), DType::F32, xs)));
    DSC_ASSERT_OK(convBackwardInput(dy.half(), w.half(), attrs,
                                    Tensor::of(dxh.data(), dt, xs)));
    EXPECT_EQ(dxh, rounded(dxw, dt, xs));
    DSC_ASSERT_OK(convBackwardWeight(dy.wide(), x.wide(), attrs,
                                     Tensor::of(dww.data(), DType::F32, ws)));
    DSC_ASSERT_OK(convBackwardWeight(dy.half(), x.half(), attrs,
                                     Tensor::of(dwh.data(), dt, ws)));
    EXPECT_EQ(dwh, rounded(dww, dt, ws));
  }
}

TEST(HalfEmulation, MixedDtypesAreErrors) {
  Pair a(DType::BF16, {2, 3}, 1), b(DType::F16, {3, 2}, 2);
  std::vector<uint16_t> out(4);
  Status st =
      matmul(a.half(), b.half(), Tensor::of(out.data(), DType::BF16, {2, 2}));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("matmul: expects operands and result of one "
                              "dtype, got f16 beside bf16"),
            std::string::npos)
      << st.message();
  std::vector<double> o64(4);
  st = matmul(a.half(), a.half(), Tensor::of(o64.data(), DType::F64, {2, 2}));
  EXPECT_FALSE(st.ok());
}

// 16-bit operands into an f32 result (dsc-fuse-elementwise's widened
// product): the f32 product of the widened values, not rounded.
TEST(HalfEmulation, WidenedProductIsNotRounded) {
  for (DType dt : {DType::BF16, DType::F16}) {
    Pair a(dt, {2, 7, 5}, 11), b(dt, {3, 7}, 12);
    std::vector<int64_t> os = {2, 5, 3};
    std::vector<float> want(size_t(numel(os))), got(want.size());
    DSC_ASSERT_OK(matmulTransposed(a.wide(), true, b.wide(), true,
                                   Tensor::of(want.data(), DType::F32, os)));
    DSC_ASSERT_OK(matmulTransposed(a.half(), true, b.half(), true,
                                   Tensor::of(got.data(), DType::F32, os)));
    EXPECT_EQ(got, want) << dtypeName(dt);
  }
}
