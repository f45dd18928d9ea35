//===- LinalgConvTest.cpp - CUDA matmul, gemm, conv and pooling -----------===//
//
// Each case runs the CPU reference on the host views and the CUDA kernel on
// the device views of the same random data. f32 tolerances scale with the
// reduction length (different summation orders); pooling is exact, since
// the CUDA kernels visit windows in the CPU's order.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <cmath>
#include <iostream>
#include <random>
#include <string>

using namespace dsc;
using dsc::cuda::test::DevTensor;
using dsc::cuda::test::expectClose;

namespace {

DevTensor rnd(DType dtype, std::vector<int64_t> shape, uint32_t seed) {
  DevTensor t(dtype, std::move(shape));
  t.random(-1, 1, seed);
  return t;
}

/// Small integers, so windows have ties.
DevTensor ints(DType dtype, std::vector<int64_t> shape, uint32_t seed) {
  DevTensor t(dtype, shape);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(-3, 3);
  std::vector<double> v(size_t(t.host().numel()));
  for (double &x : v)
    x = u(rng);
  t.values(v);
  return t;
}

/// An f32 copy of a tensor's (rounded) values, for the CPU reference.
DevTensor widen(const DevTensor &t) {
  DevTensor w(DType::F32, t.host().dims());
  std::vector<double> v(size_t(t.host().numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = DevTensor::get(t.host(), int64_t(i));
  w.values(v);
  return w;
}

/// f32 results of a reduction of `len` products of values in [-1, 1].
double rtolF32() { return cuda::allowTf32() ? 1e-2 : 1e-5; }
double atolF32(int64_t len) {
  return (cuda::allowTf32() ? 1e-3 : 1e-6) * double(std::max<int64_t>(len, 1));
}

void expectMatmul(DType dtype, std::vector<int64_t> a, std::vector<int64_t> b,
                  std::vector<int64_t> out, int64_t k) {
  DevTensor x = rnd(dtype, a, 1), y = rnd(dtype, b, 2);
  DevTensor want(dtype, out), got(dtype, out);
  DSC_ASSERT_OK(cpu::matmul(x.host(), y.host(), want.host()));
  DSC_ASSERT_OK(cuda::matmul(x.dev(), y.dev(), got.dev()));
  std::string what =
      "matmul " + describe(x.host()) + " x " + describe(y.host());
  if (dtype == DType::F64)
    expectClose(want, got, 1e-12, 1e-13 * double(k), what);
  else
    expectClose(want, got, rtolF32(), atolF32(k), what);
}

/// matmulTransposed against the CPU matmul of explicitly transposed copies.
void expectMatmulTransposed(DType dtype, std::vector<int64_t> a, bool tl,
                            std::vector<int64_t> b, bool tr,
                            std::vector<int64_t> out, int64_t k) {
  DevTensor x = rnd(dtype, a, 3), y = rnd(dtype, b, 4);
  auto swapped = [](const DevTensor &t) {
    std::vector<int64_t> shape = t.host().dims();
    std::vector<int64_t> perm(shape.size());
    for (size_t i = 0; i < perm.size(); ++i)
      perm[i] = int64_t(i);
    std::swap(perm[perm.size() - 2], perm[perm.size() - 1]);
    std::swap(shape[shape.size() - 2], shape[shape.size() - 1]);
    DevTensor r(t.host().dtype, shape);
    EXPECT_TRUE(cpu::transpose(t.host(), perm, r.host()).ok());
    return r;
  };
  DevTensor xt = tl ? swapped(x) : DevTensor(),
            yt = tr ? swapped(y) : DevTensor();
  const Tensor &xl = tl ? xt.host() : x.host(), &yr = tr ? yt.host() : y.host();
  DevTensor want(dtype, out), got(dtype, out);
  DSC_ASSERT_OK(cpu::matmul(xl, yr, want.host()));
  DSC_ASSERT_OK(cuda::matmulTransposed(x.dev(), tl, y.dev(), tr, got.dev()));
  std::string what = "matmulTransposed " + describe(x.host()) +
                     (tl ? "^T" : "") + " x " + describe(y.host()) +
                     (tr ? "^T" : "");
  if (dtype == DType::F64)
    expectClose(want, got, 1e-12, 1e-13 * double(k), what);
  else
    expectClose(want, got, rtolF32(), atolF32(k), what);
}

} // namespace

TEST(CudaMatmul, TransposedOperands) {
  DSC_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::F64}) {
    expectMatmulTransposed(dt, {5, 7}, true, {5, 9}, false, {7, 9}, 5);
    expectMatmulTransposed(dt, {7, 5}, false, {9, 5}, true, {7, 9}, 5);
    expectMatmulTransposed(dt, {5, 7}, true, {9, 5}, true, {7, 9}, 5);
    // Batched, both full; rhs shared (no folding into M when lhs is
    // transposed); lhs shared.
    expectMatmulTransposed(dt, {2, 3, 16, 8}, true, {2, 3, 16, 4}, false,
                           {2, 3, 8, 4}, 16);
    expectMatmulTransposed(dt, {2, 3, 5, 4}, true, {5, 6}, false, {2, 3, 4, 6},
                           5);
    expectMatmulTransposed(dt, {2, 3, 4, 5}, false, {6, 5}, true, {2, 3, 4, 6},
                           5);
    expectMatmulTransposed(dt, {5, 4}, true, {3, 6, 5}, true, {3, 4, 6}, 5);
  }
  DevTensor v(DType::F32, {5}), m(DType::F32, {5, 3}), o(DType::F32, {3});
  Status s = cuda::matmulTransposed(v.dev(), true, m.dev(), false, o.dev());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank >= 2"), std::string::npos) << s.message();
}

TEST(CudaMatmul, TwoD) {
  DSC_REQUIRE_GPU();
  expectMatmul(DType::F32, {7, 5}, {5, 9}, {7, 9}, 5);
  expectMatmul(DType::F64, {7, 5}, {5, 9}, {7, 9}, 5);
  expectMatmul(DType::F32, {64, 130}, {130, 33}, {64, 33}, 130);
  expectMatmul(DType::F32, {1, 1}, {1, 1}, {1, 1}, 1);
}

TEST(CudaMatmul, OneDOperands) {
  DSC_REQUIRE_GPU();
  expectMatmul(DType::F32, {5}, {5, 6}, {6}, 5);
  expectMatmul(DType::F32, {4, 5}, {5}, {4}, 5);
  expectMatmul(DType::F64, {5}, {5}, {}, 5);
  expectMatmul(DType::F32, {5}, {3, 5, 6}, {3, 6}, 5);
  expectMatmul(DType::F64, {2, 3, 4, 5}, {5}, {2, 3, 4}, 5);
}

TEST(CudaMatmul, BatchedAndBroadcast) {
  DSC_REQUIRE_GPU();
  // Neither operand full nor all-broadcast: a loop of strided batches.
  expectMatmul(DType::F32, {2, 1, 4, 5}, {3, 5, 6}, {2, 3, 4, 6}, 5);
  expectMatmul(DType::F64, {2, 1, 4, 5}, {3, 5, 6}, {2, 3, 4, 6}, 5);
  expectMatmul(DType::F32, {3, 1, 4, 5}, {1, 2, 5, 6}, {3, 2, 4, 6}, 5);
  // Both full.
  expectMatmul(DType::F32, {6, 8, 16}, {6, 16, 8}, {6, 8, 8}, 16);
  expectMatmul(DType::F32, {2, 3, 8, 4}, {2, 3, 4, 8}, {2, 3, 8, 8}, 4);
  // rhs shared: folded into M.
  expectMatmul(DType::F32, {2, 3, 4, 5}, {5, 6}, {2, 3, 4, 6}, 5);
  // lhs shared: stride-0 batch.
  expectMatmul(DType::F32, {4, 5}, {3, 5, 6}, {3, 4, 6}, 5);
  expectMatmul(DType::F64, {1, 4, 5}, {3, 5, 6}, {3, 4, 6}, 5);
}

TEST(CudaMatmul, EmptyAndZeroK) {
  DSC_REQUIRE_GPU();
  DevTensor x(DType::F32, {3, 0}), y(DType::F32, {0, 4});
  DevTensor got = rnd(DType::F32, {3, 4}, 3), want(DType::F32, {3, 4});
  DSC_ASSERT_OK(cpu::matmul(x.host(), y.host(), want.host()));
  DSC_ASSERT_OK(cuda::matmul(x.dev(), y.dev(), got.dev()));
  expectClose(want, got, 0, 0, "k = 0");
  DevTensor e(DType::F32, {0, 5}), f(DType::F32, {5, 2}), o(DType::F32, {0, 2});
  DSC_ASSERT_OK(cuda::matmul(e.dev(), f.dev(), o.dev()));
}

TEST(CudaMatmul, Bf16AgainstF32) {
  DSC_REQUIRE_GPU();
  for (auto dtype : {DType::BF16, DType::F16}) {
    DevTensor a = rnd(dtype, {3, 17, 32}, 4), b = rnd(dtype, {32, 24}, 5);
    // The CPU reference on the rounded values, in f32.
    DevTensor a32 = widen(a), b32 = widen(b);
    DevTensor want(DType::F32, {3, 17, 24}), got(dtype, {3, 17, 24});
    DSC_ASSERT_OK(cpu::matmul(a32.host(), b32.host(), want.host()));
    DSC_ASSERT_OK(cuda::matmul(a.dev(), b.dev(), got.dev()));
    expectClose(want, got, 1e-2, 2e-2, dtypeName(dtype));
  }
}

// An f32 result of 16-bit operands is the GEMM's accumulator, not rounded:
// as close to the f32 reference as an f32 product, batched and transposed.
TEST(CudaMatmul, WidenedResult) {
  DSC_REQUIRE_GPU();
  for (auto dtype : {DType::BF16, DType::F16}) {
    DevTensor a = rnd(dtype, {3, 64, 40}, 14), b = rnd(dtype, {3, 48, 64}, 15);
    DevTensor a32 = widen(a), b32 = widen(b);
    DevTensor want(DType::F32, {3, 40, 48}), got(DType::F32, {3, 40, 48});
    DSC_ASSERT_OK(
        cpu::matmulTransposed(a32.host(), true, b32.host(), true, want.host()));
    DSC_ASSERT_OK(
        cuda::matmulTransposed(a.dev(), true, b.dev(), true, got.dev()));
    expectClose(want, got, 1e-5, 1e-5, dtypeName(dtype));
    DevTensor x = rnd(dtype, {1000, 64}, 16), y = rnd(dtype, {1000, 96}, 17);
    DevTensor x32 = widen(x), y32 = widen(y);
    DevTensor w2(DType::F32, {64, 96}), g2(DType::F32, {64, 96});
    DSC_ASSERT_OK(
        cpu::matmulTransposed(x32.host(), true, y32.host(), false, w2.host()));
    DSC_ASSERT_OK(
        cuda::matmulTransposed(x.dev(), true, y.dev(), false, g2.dev()));
    expectClose(w2, g2, 1e-4, 2e-4,
                std::string("weight gradient ") + dtypeName(dtype));
  }
}

// dsc.matmul_bias_grad: the weight gradient (f32 accumulator for 16-bit
// operands) and the bias gradient (f32 column sums: the runtime's 16-byte
// kernels, cuBLASLt's BGRADB epilogue with DSC_BIAS_GRAD_EPILOGUE=1 or
// where the kernels cannot, else a reduction) against the CPU on the
// rounded values; rows of an odd count and C not a multiple of 8 too.
TEST(CudaMatmul, BiasGradEpilogue) {
  DSC_REQUIRE_GPU();
  struct Case {
    int64_t t, c, k;
  };
  const Case cases[] = {{1024, 96, 64}, {4096, 768, 256}, {37, 10, 12}};
  for (auto dtype : {DType::BF16, DType::F16, DType::F32})
    for (const Case &cs : cases)
      for (bool sumRhs : {false, true}) {
        // The summed gradient g [T, C] is the lhs, or the rhs of x^T g.
        DevTensor g = rnd(dtype, {cs.t, cs.c}, 21),
                  x = rnd(dtype, {cs.t, cs.k}, 22);
        DevTensor &l = sumRhs ? x : g, &r = sumRhs ? g : x;
        DevTensor l32 = widen(l), r32 = widen(r);
        std::vector<int64_t> out = {l.host().shape[1], r.host().shape[1]};
        DevTensor want(DType::F32, out), got(DType::F32, out);
        DevTensor wantB(DType::F32, {cs.c}), gotB(DType::F32, {cs.c});
        DSC_ASSERT_OK(cpu::matmulBiasGrad(l32.host(), r32.host(), sumRhs,
                                          want.host(), wantB.host()));
        DSC_ASSERT_OK(cuda::matmulBiasGrad(l.dev(), r.dev(), sumRhs, got.dev(),
                                           gotB.dev()));
        std::string what =
            std::string(dtypeName(dtype)) + " T=" + std::to_string(cs.t) +
            " C=" + std::to_string(cs.c) + (sumRhs ? " rhs" : " lhs");
        double tol = dtype == DType::F32 ? rtolF32() : 1e-5;
        expectClose(want, got, tol, 1e-6 * double(cs.t), "weight " + what);
        expectClose(wantB, gotB, 1e-5, 1e-6 * double(cs.t), "bias " + what);
        // A 16-bit weight gradient, rounded from the same accumulator.
        if (dtype != DType::F32) {
          DevTensor half(dtype, out);
          DSC_ASSERT_OK(cuda::matmulBiasGrad(l.dev(), r.dev(), sumRhs,
                                             half.dev(), gotB.dev()));
          expectClose(want, half, 1e-2, 1e-2, "16-bit weight " + what);
          expectClose(wantB, gotB, 1e-5, 1e-6 * double(cs.t),
                      "bias beside a 16-bit weight " + what);
        }
      }
  DevTensor g(DType::F32, {8, 4}), x(DType::F32, {8, 3});
  DevTensor w(DType::F32, {4, 3}), bad(DType::F32, {5});
  EXPECT_EQ(cuda::matmulBiasGrad(g.dev(), x.dev(), false, w.dev(), bad.dev())
                .message(),
            cpu::matmulBiasGrad(g.host(), x.host(), false, w.host(), bad.host())
                .message());
}

namespace {

/// A GELU epilogue case: a [M, K] @ op(b) ([K, N], or [N, K] transposed).
struct GeluCase {
  DType dtype;
  int64_t m, n, k;
  bool transB;
  std::vector<int64_t> bShape() const {
    return transB ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
  }
  std::string what() const {
    return std::string(dtypeName(dtype)) + " M=" + std::to_string(m) +
           " N=" + std::to_string(n) + " K=" + std::to_string(k) +
           (transB ? " b^T" : "");
  }
};

/// The largest |got - want| in ulps of got's dtype at max(|want|, 2^-6),
/// failing a 16-bit element beyond 2 such ulps plus 1e-2 (the summation
/// order, and the fallback's extra rounding of s, where |gelu'| is small
/// against |gelu|); f32 against the TF32-aware tolerance.
double expectGelu(const DevTensor &want, const DevTensor &got, int64_t k,
                  const std::string &what) {
  std::vector<char> bytes = got.download();
  Tensor g = got.host();
  g.data = bytes.data();
  int digits = g.dtype == DType::BF16 ? 8 : g.dtype == DType::F16 ? 11 : 24;
  double worst = 0;
  int reported = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    double w = DevTensor::get(want.host(), i), d = DevTensor::get(g, i);
    int e = 0;
    std::frexp(std::max(std::fabs(w), 1.0 / 64), &e);
    double ulp = std::ldexp(1.0, e - digits), err = std::fabs(d - w);
    worst = std::max(worst, err / ulp);
    double tol = g.dtype == DType::F32 ? atolF32(k) + rtolF32() * std::fabs(w)
                                       : 2 * ulp + 1e-2;
    if (!(err <= tol) && reported++ < 5)
      ADD_FAILURE() << what << " element " << i << ": cpu " << w << ", cuda "
                    << d;
  }
  std::cout << "[ gelu ulps ] " << what << ": " << worst << "\n";
  return worst;
}

/// cuda::gemmGelu against cpu::gemmGelu in f32 on the rounded operands.
void expectGemmGelu(const GeluCase &c, bool withBias) {
  DevTensor a = rnd(c.dtype, {c.m, c.k}, 31), b = rnd(c.dtype, c.bShape(), 32);
  DevTensor bias = rnd(c.dtype, {c.n}, 33);
  DevTensor a32 = widen(a), b32 = widen(b), bias32 = widen(bias);
  DevTensor want(DType::F32, {c.m, c.n}), wantPre(DType::F32, {c.m, c.n});
  DevTensor got(c.dtype, {c.m, c.n}), gotPre(c.dtype, {c.m, c.n});
  DSC_ASSERT_OK(cpu::gemmGelu(a32.host(), b32.host(), c.transB,
                              withBias ? bias32.host() : Tensor(), want.host(),
                              wantPre.host()));
  DSC_ASSERT_OK(cuda::gemmGelu(a.dev(), b.dev(), c.transB,
                               withBias ? bias.dev() : Tensor(), got.dev(),
                               gotPre.dev()));
  std::string what = c.what() + (withBias ? " bias" : "");
  expectGelu(wantPre, gotPre, c.k, "gemm_gelu pre " + what);
  expectGelu(want, got, c.k, "gemm_gelu out " + what);
}

/// cuda::matmulGeluGrad against cpu::matmulGeluGrad in f32 on the rounded
/// operands.
void expectMatmulGeluGrad(const GeluCase &c) {
  DevTensor a = rnd(c.dtype, {c.m, c.k}, 34), b = rnd(c.dtype, c.bShape(), 35);
  DevTensor pre(c.dtype, {c.m, c.n});
  pre.random(-3, 3, 36);
  DevTensor a32 = widen(a), b32 = widen(b), pre32 = widen(pre);
  DevTensor want(DType::F32, {c.m, c.n}), got(c.dtype, {c.m, c.n});
  DSC_ASSERT_OK(cpu::matmulGeluGrad(a32.host(), b32.host(), c.transB,
                                    pre32.host(), want.host()));
  DSC_ASSERT_OK(
      cuda::matmulGeluGrad(a.dev(), b.dev(), c.transB, pre.dev(), got.dev()));
  expectGelu(want, got, c.k, "matmul_gelu_grad " + c.what());
}

} // namespace

// dsc.gemm_gelu and dsc.matmul_gelu_grad: cuBLASLt's GELU_AUX(_BIAS) and
// DGELU epilogues (N = 10 is no multiple of 8: the product, then a GELU
// kernel) against the CPU on the same rounded values. Prints each result's
// largest error in ulps of its dtype.
TEST(CudaMatmul, GeluEpilogues) {
  DSC_REQUIRE_GPU();
  // {M, N, K}: GPT-2's MLP widths (N 3072, K 768) on 512 rows, which keep
  // the double CPU reference short (4096 rows took 39 s on an H100).
  const int64_t shapes[][3] = {
      {1024, 768, 256}, {512, 3072, 768}, {37, 10, 12}};
  for (auto dtype : {DType::BF16, DType::F16, DType::F32})
    for (const auto &s : shapes)
      for (bool transB : {false, true}) {
        GeluCase c{dtype, s[0], s[1], s[2], transB};
        expectGemmGelu(c, false);
        expectGemmGelu(c, true);
        expectMatmulGeluGrad(c);
      }
  DevTensor a(DType::F32, {8, 4}), b(DType::F32, {4, 16});
  DevTensor out(DType::F32, {8, 16}), pre(DType::F32, {8, 16});
  DevTensor badBias(DType::F32, {15}), badPre(DType::F32, {8, 15});
  EXPECT_EQ(cuda::gemmGelu(a.dev(), b.dev(), false, badBias.dev(), out.dev(),
                           pre.dev())
                .message(),
            cpu::gemmGelu(a.host(), b.host(), false, badBias.host(), out.host(),
                          pre.host())
                .message());
  EXPECT_EQ(
      cuda::matmulGeluGrad(a.dev(), b.dev(), true, badPre.dev(), out.dev())
          .message(),
      cpu::matmulGeluGrad(a.host(), b.host(), true, badPre.host(), out.host())
          .message());
  DevTensor d(DType::F64, {8, 4}), e(DType::F64, {4, 16});
  DevTensor o(DType::F64, {8, 16}), p(DType::F64, {8, 16});
  EXPECT_EQ(cuda::gemmGelu(d.dev(), e.dev(), false, Tensor(), o.dev(), p.dev())
                .code(),
            StatusCode::Unimplemented);
}

TEST(CudaMatmul, HalfUnalignedRowsStaged) {
  DSC_REQUIRE_GPU();
  // Rows of 1001 16-bit elements are not 16-byte aligned: products this
  // large run from copies with padded rows (lhs; then rhs and result).
  struct Case {
    std::vector<int64_t> a, b, out;
  };
  const Case cases[] = {{{512, 1001}, {1001, 264}, {512, 264}},
                        {{264, 512}, {512, 1001}, {264, 1001}},
                        {{2, 132, 512}, {512, 1001}, {2, 132, 1001}}};
  for (DType dtype : {DType::BF16, DType::F16})
    for (const Case &c : cases) {
      DevTensor a = rnd(dtype, c.a, 6), b = rnd(dtype, c.b, 7);
      DevTensor a32 = widen(a), b32 = widen(b);
      DevTensor want(DType::F32, c.out), got(dtype, c.out);
      DSC_ASSERT_OK(cpu::matmul(a32.host(), b32.host(), want.host()));
      DSC_ASSERT_OK(cuda::matmul(a.dev(), b.dev(), got.dev()));
      expectClose(want, got, 1e-2, 5e-2,
                  std::string(dtypeName(dtype)) + " " + describe(a.host()) +
                      " x " + describe(b.host()));
    }
}

TEST(CudaMatmul, Errors) {
  DSC_REQUIRE_GPU();
  DevTensor a(DType::F32, {2, 1, 3, 4}), b(DType::F32, {5, 4, 6});
  DevTensor bad(DType::F32, {2, 5, 3, 7});
  Status st = cuda::matmul(a.dev(), b.dev(), bad.dev());
  EXPECT_EQ(st.message(),
            cpu::matmul(a.host(), b.host(), bad.host()).message());
  DevTensor c(DType::F32, {5, 3, 6});
  st = cuda::matmul(a.dev(), c.dev(), bad.dev());
  EXPECT_EQ(st.message(),
            cpu::matmul(a.host(), c.host(), bad.host()).message());
  DevTensor i(DType::I64, {3, 4}), j(DType::I64, {4, 2}), o(DType::I64, {3, 2});
  EXPECT_FALSE(cuda::matmul(i.dev(), j.dev(), o.dev()).ok());
}

TEST(CudaGemm, TransposesAlphaBetaAndC) {
  DSC_REQUIRE_GPU();
  const int64_t m = 5, n = 7, k = 6;
  const std::vector<std::vector<int64_t>> cShapes = {{},     {n},    {1, n},
                                                     {m, 1}, {m, n}, {1}};
  for (DType dtype : {DType::F32, DType::F64})
    for (int mode = 0; mode < 4; ++mode)
      for (size_t ci = 0; ci <= cShapes.size(); ++ci)
        for (double beta : {1.0, -0.5, 0.0}) {
          cpu::GemmAttrs attrs;
          attrs.transA = mode & 1;
          attrs.transB = mode & 2;
          attrs.alpha = mode == 3 ? 1.0 : 0.75;
          attrs.beta = beta;
          DevTensor a = rnd(dtype,
                            attrs.transA ? std::vector<int64_t>{k, m}
                                         : std::vector<int64_t>{m, k},
                            uint32_t(10 + mode));
          DevTensor b = rnd(dtype,
                            attrs.transB ? std::vector<int64_t>{n, k}
                                         : std::vector<int64_t>{k, n},
                            uint32_t(20 + mode));
          DevTensor c;
          bool hasC = ci < cShapes.size();
          if (hasC)
            c = rnd(dtype, cShapes[ci], uint32_t(30 + ci));
          Tensor ch = hasC ? c.host() : Tensor(),
                 cd = hasC ? c.dev() : Tensor();
          DevTensor want(dtype, {m, n}), got(dtype, {m, n});
          DSC_ASSERT_OK(cpu::gemm(a.host(), b.host(), ch, attrs, want.host()));
          DSC_ASSERT_OK(cuda::gemm(a.dev(), b.dev(), cd, attrs, got.dev()));
          std::string what = std::string("gemm ") + dtypeName(dtype) +
                             " mode " + std::to_string(mode) + " c " +
                             describe(ch) + " beta " + std::to_string(beta);
          if (dtype == DType::F64)
            expectClose(want, got, 1e-12, 1e-13 * k, what);
          else
            expectClose(want, got, rtolF32(), atolF32(k), what);
        }
}

TEST(CudaGemm, LargerWithBias) {
  DSC_REQUIRE_GPU();
  // A linear layer: x @ w^T + b, the bias-epilogue path.
  cpu::GemmAttrs attrs;
  attrs.transB = true;
  DevTensor x = rnd(DType::F32, {96, 80}, 1), w = rnd(DType::F32, {120, 80}, 2);
  DevTensor bias = rnd(DType::F32, {120}, 3);
  DevTensor want(DType::F32, {96, 120}), got(DType::F32, {96, 120});
  DSC_ASSERT_OK(cpu::gemm(x.host(), w.host(), bias.host(), attrs, want.host()));
  DSC_ASSERT_OK(cuda::gemm(x.dev(), w.dev(), bias.dev(), attrs, got.dev()));
  expectClose(want, got, rtolF32(), atolF32(80), "linear");
}

TEST(CudaGemm, HalfUnalignedStaged) {
  DSC_REQUIRE_GPU();
  // M, N and K of 1001 (rows not 16-byte aligned) in turn, under every
  // transpose: the product runs on copies with rounded-up extents. c is read
  // through the staged result, added as a bias, or broadcast first.
  const int64_t dims[3][3] = {
      {1001, 264, 512}, {264, 1001, 512}, {264, 512, 1001}};
  int variant = 0;
  for (int mode = 0; mode < 4; ++mode)
    for (const auto &mnk : dims) {
      const int64_t m = mnk[0], n = mnk[1], k = mnk[2];
      cpu::GemmAttrs attrs;
      attrs.transA = mode & 1;
      attrs.transB = mode & 2;
      attrs.alpha = 0.5;
      DType dtype = variant % 2 ? DType::F16 : DType::BF16;
      DevTensor a = rnd(dtype,
                        attrs.transA ? std::vector<int64_t>{k, m}
                                     : std::vector<int64_t>{m, k},
                        uint32_t(variant));
      DevTensor b = rnd(dtype,
                        attrs.transB ? std::vector<int64_t>{n, k}
                                     : std::vector<int64_t>{k, n},
                        uint32_t(variant + 100));
      const std::pair<std::vector<int64_t>, double> cs[] = {
          {{}, 0.0}, {{m, n}, 0.5}, {{n}, 1.0}, {{m, 1}, 1.0}, {{n}, -2.0}};
      const auto &[cshape, beta] = cs[variant % 5];
      attrs.beta = beta;
      bool hasC = beta != 0;
      DevTensor c = rnd(dtype, cshape, uint32_t(variant + 200));
      DevTensor a32 = widen(a), b32 = widen(b), c32 = widen(c);
      DevTensor want(DType::F32, {m, n}), got(dtype, {m, n});
      DSC_ASSERT_OK(cpu::gemm(a32.host(), b32.host(),
                              hasC ? c32.host() : Tensor(), attrs,
                              want.host()));
      DSC_ASSERT_OK(cuda::gemm(a.dev(), b.dev(), hasC ? c.dev() : Tensor(),
                               attrs, got.dev()));
      expectClose(want, got, 1e-2, 5e-2,
                  std::string(dtypeName(dtype)) + " mode " +
                      std::to_string(mode) + " a " + describe(a.host()) +
                      " b " + describe(b.host()) + " c " + describe(c.host()) +
                      " beta " + std::to_string(beta));
      ++variant;
    }
}

TEST(CudaGemm, Errors) {
  DSC_REQUIRE_GPU();
  DevTensor a(DType::F32, {3, 4}), b(DType::F32, {5, 6}), o(DType::F32, {3, 6});
  cpu::GemmAttrs attrs;
  EXPECT_EQ(cuda::gemm(a.dev(), b.dev(), Tensor(), attrs, o.dev()).message(),
            cpu::gemm(a.host(), b.host(), Tensor(), attrs, o.host()).message());
  DevTensor b2(DType::F32, {4, 6}), c(DType::F32, {2, 6});
  EXPECT_EQ(
      cuda::gemm(a.dev(), b2.dev(), c.dev(), attrs, o.dev()).message(),
      cpu::gemm(a.host(), b2.host(), c.host(), attrs, o.host()).message());
}

namespace {

struct ConvCase {
  std::vector<int64_t> input, weight;
  cpu::ConvAttrs attrs;
  bool bias;
};

std::vector<int64_t> convOut(const ConvCase &c) {
  int dims = int(c.input.size()) - 2;
  std::vector<int64_t> out = {c.input[0], c.weight[0]};
  for (int d = 0; d < dims; ++d) {
    int64_t s = c.attrs.strides.empty() ? 1 : c.attrs.strides[d];
    int64_t dl = c.attrs.dilations.empty() ? 1 : c.attrs.dilations[d];
    int64_t pb = c.attrs.pads.empty() ? 0 : c.attrs.pads[d];
    int64_t pe = c.attrs.pads.empty() ? 0 : c.attrs.pads[d + dims];
    int64_t span = dl * (c.weight[d + 2] - 1) + 1;
    out.push_back((c.input[d + 2] + pb + pe - span) / s + 1);
  }
  return out;
}

std::vector<ConvCase> convCases() {
  std::vector<ConvCase> cases;
  auto attrs = [](std::vector<int64_t> s, std::vector<int64_t> p,
                  std::vector<int64_t> d, int64_t g) {
    cpu::ConvAttrs a;
    a.strides = std::move(s), a.pads = std::move(p), a.dilations = std::move(d);
    a.group = g;
    return a;
  };
  // 2-D: plain, stride/pad/dilation, groups, depthwise, asymmetric pads.
  cases.push_back({{2, 3, 9, 8}, {4, 3, 3, 3}, attrs({}, {}, {}, 1), true});
  cases.push_back({{2, 4, 11, 10},
                   {6, 4, 3, 2},
                   attrs({2, 1}, {1, 2, 1, 2}, {1, 2}, 1),
                   true});
  cases.push_back({{1, 6, 8, 8},
                   {4, 3, 3, 3},
                   attrs({1, 2}, {1, 1, 1, 1}, {2, 1}, 2),
                   false});
  cases.push_back(
      {{2, 4, 7, 7}, {4, 1, 3, 3}, attrs({1, 1}, {1, 1, 1, 1}, {}, 4), true});
  cases.push_back(
      {{2, 3, 9, 10}, {5, 3, 3, 3}, attrs({2, 2}, {0, 1, 2, 0}, {}, 1), true});
  // 1-D (cuDNN sees 2-D) with asymmetric pads, 3-D.
  cases.push_back({{2, 3, 12}, {4, 3, 3}, attrs({2}, {2, 1}, {1}, 1), true});
  cases.push_back({{1, 2, 5, 6, 4},
                   {3, 2, 2, 3, 2},
                   attrs({1, 2, 1}, {1, 1, 0, 1, 1, 0}, {1, 1, 2}, 1),
                   true});
  return cases;
}

int64_t convReduction(const ConvCase &c) {
  int64_t r = 1;
  for (size_t d = 1; d < c.weight.size(); ++d)
    r *= c.weight[d];
  return r;
}

} // namespace

TEST(CudaConv, ForwardMatchesCpu) {
  DSC_REQUIRE_GPU();
  int i = 0;
  for (const ConvCase &c : convCases())
    for (DType dtype : {DType::F32, DType::F64}) {
      ++i;
      DevTensor x = rnd(dtype, c.input, 40 + i),
                w = rnd(dtype, c.weight, 50 + i);
      DevTensor b = rnd(dtype, {c.weight[0]}, 60 + i);
      Tensor bh = c.bias ? b.host() : Tensor(),
             bd = c.bias ? b.dev() : Tensor();
      std::vector<int64_t> os = convOut(c);
      DevTensor want(dtype, os), got(dtype, os);
      DSC_ASSERT_OK(cpu::conv(x.host(), w.host(), bh, c.attrs, want.host()));
      DSC_ASSERT_OK(cuda::conv(x.dev(), w.dev(), bd, c.attrs, got.dev()));
      std::string what = "conv " + describe(x.host()) + " " +
                         describe(w.host()) + " pads " +
                         describe(I64s(c.attrs.pads));
      int64_t len = convReduction(c) + 1;
      if (dtype == DType::F64)
        expectClose(want, got, 1e-12, 1e-13 * double(len), what);
      else
        expectClose(want, got, rtolF32(), atolF32(len), what);
    }
}

TEST(CudaConv, BackwardMatchesCpu) {
  DSC_REQUIRE_GPU();
  int i = 0;
  for (const ConvCase &c : convCases())
    for (DType dtype : {DType::F32, DType::F64}) {
      ++i;
      std::vector<int64_t> os = convOut(c);
      DevTensor x = rnd(dtype, c.input, 70 + i),
                w = rnd(dtype, c.weight, 80 + i);
      DevTensor g = rnd(dtype, os, 90 + i);
      DevTensor wantIn(dtype, c.input), gotIn(dtype, c.input);
      DevTensor wantW(dtype, c.weight), gotW(dtype, c.weight);
      DSC_ASSERT_OK(
          cpu::convBackwardInput(g.host(), w.host(), c.attrs, wantIn.host()));
      DSC_ASSERT_OK(
          cuda::convBackwardInput(g.dev(), w.dev(), c.attrs, gotIn.dev()));
      DSC_ASSERT_OK(
          cpu::convBackwardWeight(g.host(), x.host(), c.attrs, wantW.host()));
      DSC_ASSERT_OK(
          cuda::convBackwardWeight(g.dev(), x.dev(), c.attrs, gotW.dev()));
      std::string what = "conv backward " + describe(x.host()) + " " +
                         describe(w.host()) + " pads " +
                         describe(I64s(c.attrs.pads));
      // Input gradients sum over filters and kernel taps, weight gradients
      // over the batch and output positions.
      int64_t lenIn = c.weight[0] * convReduction(c) / c.weight[1];
      int64_t lenW = 1;
      for (size_t d = 0; d < os.size(); ++d)
        lenW *= d == 1 ? 1 : os[d];
      if (dtype == DType::F64) {
        expectClose(wantIn, gotIn, 1e-12, 1e-13 * double(lenIn), what);
        expectClose(wantW, gotW, 1e-12, 1e-13 * double(lenW), what);
      } else {
        expectClose(wantIn, gotIn, rtolF32(), atolF32(lenIn), what + " input");
        expectClose(wantW, gotW, rtolF32(), atolF32(lenW), what + " weight");
      }
    }
}

TEST(CudaConv, HalfPrecisionAgainstF32) {
  DSC_REQUIRE_GPU();
  cpu::ConvAttrs attrs;
  attrs.pads = {1, 1, 1, 1};
  DevTensor x = rnd(DType::BF16, {2, 8, 6, 6}, 1);
  DevTensor w = rnd(DType::BF16, {8, 8, 3, 3}, 2);
  DevTensor x32 = widen(x), w32 = widen(w);
  DevTensor want(DType::F32, {2, 8, 6, 6}), got(DType::BF16, {2, 8, 6, 6});
  DSC_ASSERT_OK(
      cpu::conv(x32.host(), w32.host(), Tensor(), attrs, want.host()));
  DSC_ASSERT_OK(cuda::conv(x.dev(), w.dev(), Tensor(), attrs, got.dev()));
  expectClose(want, got, 1e-2, 5e-2, "bf16 conv");
}

// The kernels dsc-mixed-precision runs in 16-bit, against the CPU backend's
// emulation of the same call (f32 math on the widened operands, one
// rounding): the GPU's fp32-accumulated results may differ by the rounding
// of a different summation order, one unit in the last place at most.
TEST(CudaHalf, ProductsMatchCpuEmulation) {
  DSC_REQUIRE_GPU();
  for (DType dt : {DType::BF16, DType::F16}) {
    double ulp = dt == DType::BF16 ? 1.0 / 128 : 1.0 / 1024;
    std::string name = dtypeName(dt);
    DevTensor a = rnd(dt, {4, 33, 64}, 11), b = rnd(dt, {64, 40}, 12);
    DevTensor want(dt, {4, 33, 40}), got(dt, {4, 33, 40});
    DSC_ASSERT_OK(cpu::matmul(a.host(), b.host(), want.host()));
    DSC_ASSERT_OK(cuda::matmul(a.dev(), b.dev(), got.dev()));
    expectClose(want, got, ulp, ulp, name + " matmul");

    DevTensor x = rnd(dt, {48, 64}, 13), w = rnd(dt, {40, 64}, 14),
              bias = rnd(dt, {40}, 15);
    cpu::GemmAttrs ga;
    ga.transB = true;
    DevTensor gw(dt, {48, 40}), gg(dt, {48, 40});
    DSC_ASSERT_OK(cpu::gemm(x.host(), w.host(), bias.host(), ga, gw.host()));
    DSC_ASSERT_OK(cuda::gemm(x.dev(), w.dev(), bias.dev(), ga, gg.dev()));
    expectClose(gw, gg, ulp, ulp, name + " gemm with bias");

    cpu::ConvAttrs ca;
    ca.pads = {1, 1, 1, 1};
    DevTensor cx = rnd(dt, {2, 8, 6, 6}, 16), cw = rnd(dt, {8, 8, 3, 3}, 17),
              dy = rnd(dt, {2, 8, 6, 6}, 18);
    DevTensor yw(dt, {2, 8, 6, 6}), yg(dt, {2, 8, 6, 6});
    DSC_ASSERT_OK(cpu::conv(cx.host(), cw.host(), Tensor(), ca, yw.host()));
    DSC_ASSERT_OK(cuda::conv(cx.dev(), cw.dev(), Tensor(), ca, yg.dev()));
    expectClose(yw, yg, ulp, ulp, name + " conv");
    DevTensor dxw(dt, {2, 8, 6, 6}), dxg(dt, {2, 8, 6, 6});
    DSC_ASSERT_OK(cpu::convBackwardInput(dy.host(), cw.host(), ca, dxw.host()));
    DSC_ASSERT_OK(cuda::convBackwardInput(dy.dev(), cw.dev(), ca, dxg.dev()));
    expectClose(dxw, dxg, ulp, ulp, name + " conv_backward_input");
    DevTensor dww(dt, {8, 8, 3, 3}), dwg(dt, {8, 8, 3, 3});
    DSC_ASSERT_OK(
        cpu::convBackwardWeight(dy.host(), cx.host(), ca, dww.host()));
    DSC_ASSERT_OK(cuda::convBackwardWeight(dy.dev(), cx.dev(), ca, dwg.dev()));
    // A sum of 2 x 36 products per weight: the widest accumulation here.
    expectClose(dww, dwg, ulp, 4 * ulp, name + " conv_backward_weight");
  }
}

TEST(CudaConv, Errors) {
  DSC_REQUIRE_GPU();
  cpu::ConvAttrs attrs;
  attrs.group = 2;
  DevTensor x(DType::F32, {1, 3, 5, 5}), w(DType::F32, {4, 3, 3, 3});
  DevTensor o(DType::F32, {1, 4, 3, 3});
  EXPECT_EQ(cuda::conv(x.dev(), w.dev(), Tensor(), attrs, o.dev()).message(),
            cpu::conv(x.host(), w.host(), Tensor(), attrs, o.host()).message());
  attrs.group = 1;
  DevTensor bad(DType::F32, {1, 4, 4, 3});
  EXPECT_EQ(
      cuda::conv(x.dev(), w.dev(), Tensor(), attrs, bad.dev()).message(),
      cpu::conv(x.host(), w.host(), Tensor(), attrs, bad.host()).message());
  EXPECT_EQ(
      cuda::convBackwardInput(bad.dev(), w.dev(), attrs, x.dev()).message(),
      cpu::convBackwardInput(bad.host(), w.host(), attrs, x.host()).message());
}

namespace {

std::vector<int64_t> poolShape(const DevTensor &x, const cpu::PoolAttrs &a) {
  std::vector<int64_t> s;
  Status st = cpu::poolOutputShape(x.host(), a, s);
  EXPECT_TRUE(st.ok()) << st.message();
  return s;
}

std::vector<cpu::PoolAttrs> poolCases() {
  auto make = [](std::vector<int64_t> k, std::vector<int64_t> s,
                 std::vector<int64_t> p, std::vector<int64_t> d, bool ceil,
                 bool include) {
    cpu::PoolAttrs a;
    a.kernelShape = std::move(k), a.strides = std::move(s);
    a.pads = std::move(p), a.dilations = std::move(d);
    a.ceilMode = ceil, a.countIncludePad = include;
    return a;
  };
  return {
      make({2, 2}, {2, 2}, {}, {}, false, false),
      make({3, 3}, {1, 1}, {1, 1, 1, 1}, {}, false, true),
      make({3, 3}, {2, 2}, {1, 0, 1, 0}, {}, true, false),
      make({3, 2}, {2, 3}, {1, 1, 1, 1}, {}, true, true),
      make({2, 3}, {1, 2}, {0, 1, 1, 0}, {2, 1}, true, false),
      make({3, 3}, {2, 2}, {1, 1, 2, 2}, {}, true, true), // end-pad windows
  };
}

} // namespace

TEST(CudaPool, MaxPoolWithIndicesAndBackward) {
  DSC_REQUIRE_GPU();
  int seed = 0;
  for (const cpu::PoolAttrs &a : poolCases())
    for (DType dtype : {DType::F32, DType::F64}) {
      DevTensor x = ints(dtype, {2, 3, 9, 8}, uint32_t(++seed));
      std::vector<int64_t> os = poolShape(x, a);
      std::string what = "max_pool " + describe(I64s(a.kernelShape)) +
                         " pads " + describe(I64s(a.pads)) +
                         (a.ceilMode ? " ceil" : "");
      DevTensor want(dtype, os), got(dtype, os);
      DevTensor wantIdx(DType::I64, os), gotIdx(DType::I64, os);
      DSC_ASSERT_OK(cpu::maxPool(x.host(), a, want.host(), wantIdx.host()));
      DSC_ASSERT_OK(cuda::maxPool(x.dev(), a, got.dev(), gotIdx.dev()));
      expectClose(want, got, 0, 0, what);
      expectClose(wantIdx, gotIdx, 0, 0, what + " indices");
      DevTensor plain(dtype, os);
      DSC_ASSERT_OK(cuda::maxPool(x.dev(), a, plain.dev()));
      expectClose(want, plain, 0, 0, what + " without indices");

      DevTensor g = rnd(dtype, os, uint32_t(100 + seed));
      DevTensor wantG(dtype, x.host().dims()), gotG(dtype, x.host().dims());
      DSC_ASSERT_OK(cpu::maxPoolBackward(x.host(), a, g.host(), wantG.host()));
      DSC_ASSERT_OK(cuda::maxPoolBackward(x.dev(), a, g.dev(), gotG.dev()));
      expectClose(wantG, gotG, 0, 0, what + " backward");
    }
}

TEST(CudaPool, AvgPoolAndBackward) {
  DSC_REQUIRE_GPU();
  int seed = 0;
  for (const cpu::PoolAttrs &a : poolCases())
    for (DType dtype : {DType::F32, DType::F64}) {
      DevTensor x = rnd(dtype, {2, 3, 9, 8}, uint32_t(++seed));
      std::vector<int64_t> os = poolShape(x, a);
      std::string what = "avg_pool " + describe(I64s(a.kernelShape)) +
                         " pads " + describe(I64s(a.pads)) +
                         (a.ceilMode ? " ceil" : "") +
                         (a.countIncludePad ? " include_pad" : "");
      DevTensor want(dtype, os), got(dtype, os);
      DSC_ASSERT_OK(cpu::avgPool(x.host(), a, want.host()));
      DSC_ASSERT_OK(cuda::avgPool(x.dev(), a, got.dev()));
      expectClose(want, got, 0, 0, what);
      DevTensor g = rnd(dtype, os, uint32_t(200 + seed));
      DevTensor wantG(dtype, x.host().dims()), gotG(dtype, x.host().dims());
      DSC_ASSERT_OK(cpu::avgPoolBackward(x.host(), a, g.host(), wantG.host()));
      DSC_ASSERT_OK(cuda::avgPoolBackward(x.dev(), a, g.dev(), gotG.dev()));
      expectClose(wantG, gotG, 0, 0, what + " backward");
    }
}

TEST(CudaPool, OneAndThreeSpatialDims) {
  DSC_REQUIRE_GPU();
  cpu::PoolAttrs a1;
  a1.kernelShape = {3}, a1.strides = {2}, a1.pads = {1, 1}, a1.ceilMode = true;
  cpu::PoolAttrs a3;
  a3.kernelShape = {2, 2, 2}, a3.strides = {1, 2, 2};
  a3.pads = {0, 1, 0, 1, 0, 1}, a3.countIncludePad = true;
  const std::pair<std::vector<int64_t>, cpu::PoolAttrs> cases[] = {
      {{2, 3, 11}, a1}, {{1, 2, 4, 5, 6}, a3}};
  for (const auto &[shape, a] : cases) {
    DevTensor x = ints(DType::F32, shape, 7);
    std::vector<int64_t> os = poolShape(x, a);
    DevTensor want(DType::F32, os), got(DType::F32, os);
    DSC_ASSERT_OK(cpu::maxPool(x.host(), a, want.host()));
    DSC_ASSERT_OK(cuda::maxPool(x.dev(), a, got.dev()));
    expectClose(want, got, 0, 0, "max_pool " + describe(x.host()));
    DSC_ASSERT_OK(cpu::avgPool(x.host(), a, want.host()));
    DSC_ASSERT_OK(cuda::avgPool(x.dev(), a, got.dev()));
    expectClose(want, got, 0, 0, "avg_pool " + describe(x.host()));
    DevTensor g = rnd(DType::F32, os, 8);
    DevTensor wantG(DType::F32, shape), gotG(DType::F32, shape);
    DSC_ASSERT_OK(cpu::maxPoolBackward(x.host(), a, g.host(), wantG.host()));
    DSC_ASSERT_OK(cuda::maxPoolBackward(x.dev(), a, g.dev(), gotG.dev()));
    expectClose(wantG, gotG, 0, 0, "max_pool_backward " + describe(x.host()));
    DSC_ASSERT_OK(cpu::avgPoolBackward(x.host(), a, g.host(), wantG.host()));
    DSC_ASSERT_OK(cuda::avgPoolBackward(x.dev(), a, g.dev(), gotG.dev()));
    expectClose(wantG, gotG, 0, 0, "avg_pool_backward " + describe(x.host()));
  }
}

TEST(CudaPool, GlobalPools) {
  DSC_REQUIRE_GPU();
  for (DType dtype : {DType::F32, DType::F64})
    for (std::vector<int64_t> shape :
         {std::vector<int64_t>{2, 3, 7, 7}, {3, 2, 40, 31}, {1, 4, 5}}) {
      DevTensor x = rnd(dtype, shape, 9);
      std::vector<int64_t> os(shape.size(), 1);
      os[0] = shape[0], os[1] = shape[1];
      int64_t size = x.host().numel() / (shape[0] * shape[1]);
      DevTensor want(dtype, os), got(dtype, os);
      DSC_ASSERT_OK(cpu::globalAvgPool(x.host(), want.host()));
      DSC_ASSERT_OK(cuda::globalAvgPool(x.dev(), got.dev()));
      double tol = dtype == DType::F32 ? 1e-6 : 1e-14;
      expectClose(want, got, tol * 10, tol * double(size),
                  "global_avg_pool " + describe(x.host()));
      DSC_ASSERT_OK(cpu::globalMaxPool(x.host(), want.host()));
      DSC_ASSERT_OK(cuda::globalMaxPool(x.dev(), got.dev()));
      expectClose(want, got, 0, 0, "global_max_pool " + describe(x.host()));
    }
}

TEST(CudaPool, Errors) {
  DSC_REQUIRE_GPU();
  cpu::PoolAttrs a;
  a.kernelShape = {3};
  DevTensor x(DType::F32, {1, 2, 5, 5}), o(DType::F32, {1, 2, 3, 3});
  EXPECT_EQ(cuda::maxPool(x.dev(), a, o.dev()).message(),
            cpu::maxPool(x.host(), a, o.host()).message());
  a.kernelShape = {3, 3};
  DevTensor bad(DType::F32, {1, 2, 2, 3});
  EXPECT_EQ(cuda::avgPool(x.dev(), a, bad.dev()).message(),
            cpu::avgPool(x.host(), a, bad.host()).message());
  DevTensor i(DType::I64, {1, 2, 5, 5}), io(DType::I64, {1, 2, 3, 3});
  Status st = cuda::maxPool(i.dev(), a, io.dev());
  EXPECT_EQ(st.message(), cpu::maxPool(i.host(), a, io.host()).message());
  EXPECT_EQ(st.code(), StatusCode::Unimplemented);
}
