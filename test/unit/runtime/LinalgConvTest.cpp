//===- LinalgConvTest.cpp - matmul, gemm, conv and pooling kernels --------===//

#include "GradCheck.h"
#include "cpu/kernels.h"

#include <string>

using namespace dsc;
using namespace dsc::cpu;
using namespace dsc::test;

TEST(Matmul, BatchBroadcastAgainstNaive) {
  std::mt19937_64 rng(1);
  D a = randD({2, 1, 3, 4}, rng), b = randD({5, 4, 6}, rng);
  D y = zerosD({2, 5, 3, 6});
  DSC_ASSERT_OK(matmul(a.t(), b.t(), y.t(), 3));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 5; ++j)
      for (int m = 0; m < 3; ++m)
        for (int n = 0; n < 6; ++n) {
          double acc = 0;
          for (int k = 0; k < 4; ++k)
            acc += a[(i * 3 + m) * 4 + k] * b[(j * 4 + k) * 6 + n];
          EXPECT_NEAR(y[((i * 5 + j) * 3 + m) * 6 + n], acc, 1e-14);
        }
  // 1-D operands: the promoted dim is dropped.
  D v = randD({4}, rng), mv = zerosD({5, 6});
  DSC_ASSERT_OK(matmul(v.t(), b.t(), mv.t()));
  D w = zerosD({2, 1, 3});
  DSC_ASSERT_OK(matmul(a.t(), v.t(), w.t()));
  D bad = zerosD({2, 5, 3, 7});
  Status st = matmul(a.t(), b.t(), bad.t());
  EXPECT_EQ(st.message(), "matmul(lhs=f64[2,1,3,4], rhs=f64[5,4,6], "
                          "out=f64[2,5,3,7]): result shape must be "
                          "[2,5,3,6]");
}

TEST(Matmul, DeterministicAcrossThreadCounts) {
  std::mt19937_64 rng(2);
  F a({64, 48}, DType::F32), b({48, 40}, DType::F32);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float &x : a.v)
    x = u(rng);
  for (float &x : b.v)
    x = u(rng);
  F y1({64, 40}, DType::F32), y4({64, 40}, DType::F32);
  DSC_ASSERT_OK(matmul(a.t(), b.t(), y1.t(), 1));
  DSC_ASSERT_OK(matmul(a.t(), b.t(), y4.t(), 4));
  EXPECT_EQ(y1.v, y4.v);
}

TEST(Matmul, BackwardFiniteDifferences) {
  struct Case {
    std::vector<int64_t> a, b, out;
  };
  const Case cases[] = {{{3, 4}, {4, 2}, {3, 2}},
                        {{2, 1, 3, 4}, {5, 4, 2}, {2, 5, 3, 2}},
                        {{4}, {2, 4, 3}, {2, 3}},
                        {{2, 3, 4}, {4}, {2, 3}}};
  for (const Case &c : cases) {
    std::mt19937_64 rng(c.out.size());
    std::vector<D> in = {randD(c.a, rng), randD(c.b, rng)};
    gradCheck(
        in, c.out,
        [](auto &x, const Tensor &o) { return matmul(x[0], x[1], o, 2); },
        [](auto &x, const Tensor &g, auto &gr) {
          return matmulBackward(x[0], x[1], g, gr[0], gr[1], 2);
        },
        {0, 1});
  }
}

// dsc.matmul_bias_grad on the CPU: the weight gradient and the column sums,
// bit for bit what matmulTransposed and reduce give one after the other;
// the f32 sums against a naive double loop; shape errors name the op.
TEST(MatmulBiasGrad, MatmulThenColumnSums) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  F g({37, 12}, DType::F32), x({37, 20}, DType::F32);
  for (float &v : g.v)
    v = u(rng);
  for (float &v : x.v)
    v = u(rng);
  F w({12, 20}, DType::F32), b({12}, DType::F32);
  DSC_ASSERT_OK(matmulBiasGrad(g.t(), x.t(), false, w.t(), b.t()));
  F w2({12, 20}, DType::F32), b2({12}, DType::F32);
  DSC_ASSERT_OK(matmulTransposed(g.t(), true, x.t(), false, w2.t()));
  DSC_ASSERT_OK(reduce(ReduceOp::Sum, g.t(), {int64_t(0)}, false, b2.t()));
  EXPECT_EQ(w.v, w2.v);
  EXPECT_EQ(b.v, b2.v);
  // The gradient as rhs (a weight stored [in, out]): x^T g, sums of g.
  F wr({20, 12}, DType::F32), br({12}, DType::F32), wr2({20, 12}, DType::F32);
  DSC_ASSERT_OK(matmulBiasGrad(x.t(), g.t(), true, wr.t(), br.t()));
  DSC_ASSERT_OK(matmulTransposed(x.t(), true, g.t(), false, wr2.t()));
  EXPECT_EQ(wr.v, wr2.v);
  EXPECT_EQ(br.v, b2.v);
  for (int c = 0; c < 12; ++c) {
    double acc = 0;
    for (int t = 0; t < 37; ++t)
      acc += g[t * 12 + c];
    EXPECT_NEAR(b[c], acc, 1e-5);
  }
  F bad({13}, DType::F32);
  EXPECT_EQ(matmulBiasGrad(g.t(), x.t(), false, w.t(), bad.t()).message(),
            "matmul_bias_grad(lhs=f32[37,12], rhs=f32[37,20], "
            "out=f32[12,20], bias_grad=f32[13]): bias_grad must be f32 [M] "
            "for lhs [T, M]");
  EXPECT_TRUE(matmulBiasGrad(x.t(), g.t(), true, wr.t(), b2.t()).ok());
  EXPECT_FALSE(matmulBiasGrad(x.t(), g.t(), true, wr.t(), bad.t()).ok());
  F rows({36, 20}, DType::F32);
  EXPECT_FALSE(matmulBiasGrad(g.t(), rows.t(), false, w.t(), b.t()).ok());
}

namespace {

/// A matrix of `dt` (f32 or bf16), and its stored values as doubles for the
/// naive references.
struct Mat {
  std::vector<float> f;
  std::vector<uint16_t> h;
  std::vector<double> d;
  std::vector<int64_t> shape;
  DType dt;
  Mat(DType dtype, std::vector<int64_t> s) : shape(std::move(s)), dt(dtype) {
    size_t n = 1;
    for (int64_t x : shape)
      n *= size_t(x);
    f.assign(n, 0);
    h.assign(n, 0);
    d.assign(n, 0);
  }
  /// Uniform values in [lo, hi), rounded to dt.
  Mat &random(std::mt19937_64 &rng, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    for (size_t i = 0; i < f.size(); ++i) {
      f[i] = u(rng);
      h[i] = floatToBfloat16(f[i]);
    }
    return read();
  }
  /// d from the stored values (after a kernel wrote them).
  Mat &read() {
    for (size_t i = 0; i < d.size(); ++i)
      d[i] = dt == DType::BF16 ? bfloat16ToFloat(h[i]) : f[i];
    return *this;
  }
  Tensor t() {
    void *p = dt == DType::BF16 ? static_cast<void *>(h.data()) : f.data();
    return Tensor::of(p, dt, shape);
  }
};

double geluRef(double x) {
  return 0.5 * x *
         (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

double geluRefDerivative(double x) {
  const double c = 0.7978845608028654;
  double t = std::tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
}

/// sum_k a(m, k) op(b)(k, n) in double.
double naiveProduct(const Mat &a, const Mat &b, bool transB, int64_t m,
                    int64_t n) {
  int64_t k = a.shape[1], cols = b.shape[1];
  double acc = 0;
  for (int64_t kk = 0; kk < k; ++kk)
    acc += a.d[size_t(m * k + kk)] *
           b.d[size_t(transB ? n * cols + kk : kk * cols + n)];
  return acc;
}

/// An f32 result within the error of a short f32 sum; a bf16 one within
/// half an ulp of its exact value (rounded once) and that error.
double tolerance(DType dt, double want, int64_t k) {
  double rel = dt == DType::BF16 ? std::ldexp(1.0, -8) : 1e-6;
  return rel * std::fabs(want) + 1e-5 * double(std::max<int64_t>(k, 1));
}

struct GeluCase {
  int64_t m, n, k;
  DType dt;
  bool transB;
  std::string what() const {
    return std::string(dtypeName(dt)) + " M=" + std::to_string(m) +
           " N=" + std::to_string(n) + " K=" + std::to_string(k) +
           (transB ? " b^T" : "");
  }
};

void expectGemmGelu(const GeluCase &c, bool withBias) {
  std::mt19937_64 rng(uint64_t(c.m * c.k + c.n));
  Mat a(c.dt, {c.m, c.k}), b(c.dt, c.transB ? std::vector<int64_t>{c.n, c.k}
                                            : std::vector<int64_t>{c.k, c.n});
  Mat bias(c.dt, {c.n}), out(c.dt, {c.m, c.n}), pre(c.dt, {c.m, c.n});
  a.random(rng, -1, 1);
  b.random(rng, -1, 1);
  bias.random(rng, -1, 1);
  DSC_ASSERT_OK(gemmGelu(a.t(), b.t(), c.transB, withBias ? bias.t() : Tensor(),
                         out.t(), pre.t(), 2));
  out.read();
  pre.read();
  std::string what = c.what() + (withBias ? " bias" : "");
  for (int64_t m = 0; m < c.m; ++m)
    for (int64_t n = 0; n < c.n; ++n) {
      double s = naiveProduct(a, b, c.transB, m, n) +
                 (withBias ? bias.d[size_t(n)] : 0.0);
      size_t i = size_t(m * c.n + n);
      ASSERT_NEAR(pre.d[i], s, tolerance(c.dt, s, c.k)) << what;
      ASSERT_NEAR(out.d[i], geluRef(s), tolerance(c.dt, geluRef(s), c.k))
          << what;
    }
}

void expectMatmulGeluGrad(const GeluCase &c) {
  std::mt19937_64 rng(uint64_t(c.m + c.n * c.k));
  Mat a(c.dt, {c.m, c.k}), b(c.dt, c.transB ? std::vector<int64_t>{c.n, c.k}
                                            : std::vector<int64_t>{c.k, c.n});
  Mat pre(c.dt, {c.m, c.n}), out(c.dt, {c.m, c.n});
  a.random(rng, -1, 1);
  b.random(rng, -1, 1);
  pre.random(rng, -3, 3);
  DSC_ASSERT_OK(matmulGeluGrad(a.t(), b.t(), c.transB, pre.t(), out.t(), 2));
  out.read();
  for (int64_t m = 0; m < c.m; ++m)
    for (int64_t n = 0; n < c.n; ++n) {
      size_t i = size_t(m * c.n + n);
      double want =
          naiveProduct(a, b, c.transB, m, n) * geluRefDerivative(pre.d[i]);
      ASSERT_NEAR(out.d[i], want, tolerance(c.dt, want, c.k)) << c.what();
    }
}

/// A failure whose message starts with `prefix` (the call and its args)
/// and ends with `reason`.
void expectError(const Status &st, const std::string &prefix,
                 const std::string &reason) {
  ASSERT_FALSE(st.ok()) << prefix;
  const std::string &msg = st.message();
  EXPECT_EQ(msg.rfind(prefix, 0), 0u) << msg;
  EXPECT_TRUE(msg.size() >= reason.size() &&
              msg.compare(msg.size() - reason.size(), reason.size(), reason) ==
                  0)
      << msg;
}

} // namespace

// dsc.gemm_gelu and dsc.matmul_gelu_grad on the CPU against naive double
// loops: the product summed unrounded, bias added, each result rounded
// once (f32 and bf16, b stored either way).
TEST(GemmGelu, AgainstNaiveLoops) {
  const int64_t shapes[][3] = {{7, 12, 5}, {33, 40, 17}};
  for (const auto &s : shapes)
    for (DType dt : {DType::F32, DType::BF16})
      for (bool transB : {false, true}) {
        GeluCase c{s[0], s[1], s[2], dt, transB};
        expectGemmGelu(c, false);
        expectGemmGelu(c, true);
        expectMatmulGeluGrad(c);
      }
}

// K == 0: s is the bias (or 0); M == 0: nothing to do.
TEST(GemmGelu, EmptyProducts) {
  Mat a(DType::F32, {3, 0}), b(DType::F32, {0, 4}), bias(DType::F32, {4});
  Mat out(DType::F32, {3, 4}), pre(DType::F32, {3, 4});
  std::mt19937_64 rng(3);
  bias.random(rng, -2, 2);
  DSC_ASSERT_OK(gemmGelu(a.t(), b.t(), false, bias.t(), out.t(), pre.t()));
  for (size_t i = 0; i < out.f.size(); ++i) {
    EXPECT_EQ(pre.f[i], bias.f[i % 4]);
    EXPECT_NEAR(out.f[i], geluRef(bias.f[i % 4]), 1e-6);
  }
  Mat g(DType::F32, {3, 4});
  g.random(rng, -1, 1);
  DSC_ASSERT_OK(matmulGeluGrad(a.t(), b.t(), false, pre.t(), g.t()));
  for (float v : g.f)
    EXPECT_EQ(v, 0.0f);
  Mat e(DType::F32, {0, 5}), f(DType::F32, {5, 4}), o(DType::F32, {0, 4});
  DSC_EXPECT_OK(gemmGelu(e.t(), f.t(), false, Tensor(), o.t(), o.t()));
  DSC_EXPECT_OK(matmulGeluGrad(e.t(), f.t(), false, o.t(), o.t()));
}

TEST(GemmGelu, ArgumentErrors) {
  Mat a(DType::F32, {7, 5}), b(DType::F32, {5, 12}), bias(DType::F32, {12});
  Mat out(DType::F32, {7, 12}), pre(DType::F32, {7, 12});
  Mat badBias(DType::F32, {13}), badPre(DType::F32, {7, 13});
  Mat halfB(DType::BF16, {5, 12}), halfBias(DType::BF16, {12});
  EXPECT_EQ(
      gemmGelu(a.t(), b.t(), false, badBias.t(), out.t(), pre.t()).message(),
      "gemm_gelu(a=f32[7,5], b=f32[5,12], trans_b=false, "
      "bias=f32[13], out=f32[7,12], pre=f32[7,12]): bias must be "
      "f32[12] or absent");
  expectError(gemmGelu(a.t(), b.t(), false, halfBias.t(), out.t(), pre.t()),
              "gemm_gelu(a=f32[7,5]", "bias must be f32[12] or absent");
  expectError(gemmGelu(a.t(), b.t(), false, bias.t(), out.t(), badPre.t()),
              "gemm_gelu(a=f32[7,5]", "out and pre must be [7,12]");
  expectError(gemmGelu(a.t(), halfB.t(), false, bias.t(), out.t(), pre.t()),
              "gemm_gelu(a=f32[7,5], b=bf16[5,12]",
              "expects f32, f64, f16 or bf16 operands of one dtype");
  expectError(gemmGelu(a.t(), b.t(), true, Tensor(), out.t(), pre.t()),
              "gemm_gelu(a=f32[7,5], b=f32[5,12], trans_b=true, bias=none",
              "inner dims 5 vs 12");
  expectError(gemmGelu(a.t(), b.t(), false, bias.t(),
                       Tensor::of(nullptr, DType::F32, {7, 12}), pre.t()),
              "gemm_gelu(", "missing data");
  expectError(matmulGeluGrad(a.t(), b.t(), false, badPre.t(), out.t()),
              "matmul_gelu_grad(a=f32[7,5], b=f32[5,12], trans_b=false, "
              "pre=f32[7,13], out=f32[7,12])",
              "out and pre must be [7,12]");
  expectError(matmulGeluGrad(a.t(), halfB.t(), false, pre.t(), out.t()),
              "matmul_gelu_grad(", "operands of one dtype");
  expectError(matmulGeluGrad(a.t(), bias.t(), false, pre.t(), out.t()),
              "matmul_gelu_grad(", "a, b, out and pre must be of rank 2");
}

TEST(Gemm, ForwardAndBackwardAllTransposes) {
  for (int mode = 0; mode < 4; ++mode) {
    GemmAttrs attrs;
    attrs.transA = mode & 1;
    attrs.transB = mode & 2;
    attrs.alpha = 0.7;
    attrs.beta = -1.3;
    std::mt19937_64 rng(mode);
    std::vector<int64_t> as =
        attrs.transA ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4};
    std::vector<int64_t> bs =
        attrs.transB ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5};
    std::vector<D> in = {randD(as, rng), randD(bs, rng), randD({5}, rng)};
    D y = zerosD({3, 5});
    DSC_ASSERT_OK(gemm(in[0].t(), in[1].t(), in[2].t(), attrs, y.t()));
    for (int m = 0; m < 3; ++m)
      for (int n = 0; n < 5; ++n) {
        double acc = 0;
        for (int k = 0; k < 4; ++k)
          acc += (attrs.transA ? in[0][k * 3 + m] : in[0][m * 4 + k]) *
                 (attrs.transB ? in[1][n * 4 + k] : in[1][k * 5 + n]);
        EXPECT_NEAR(y[m * 5 + n], 0.7 * acc - 1.3 * in[2][n], 1e-14);
      }
    gradCheck(
        in, {3, 5},
        [&](auto &x, const Tensor &o) {
          return gemm(x[0], x[1], x[2], attrs, o);
        },
        [&](auto &x, const Tensor &g, auto &gr) {
          return gemmBackward(x[0], x[1], x[2], attrs, g, gr[0], gr[1], gr[2]);
        },
        {0, 1, 2});
  }
}

namespace {

/// A direct 2-D grouped convolution, the reference for conv().
D naiveConv2d(D &x, D &w, D *bias, const ConvAttrs &a) {
  int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3];
  int64_t m = w.shape[0], kh = w.shape[2], kw = w.shape[3];
  int64_t cg = c / a.group, mg = m / a.group;
  int64_t oh = (h + a.pads[0] + a.pads[2] - a.dilations[0] * (kh - 1) - 1) /
                   a.strides[0] +
               1;
  int64_t ow = (wd + a.pads[1] + a.pads[3] - a.dilations[1] * (kw - 1) - 1) /
                   a.strides[1] +
               1;
  D y = zerosD({n, m, oh, ow});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < m; ++o)
      for (int64_t p = 0; p < oh; ++p)
        for (int64_t q = 0; q < ow; ++q) {
          double acc = bias ? (*bias)[o] : 0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t r = 0; r < kh; ++r)
              for (int64_t s = 0; s < kw; ++s) {
                int64_t yy = p * a.strides[0] - a.pads[0] + r * a.dilations[0];
                int64_t xx = q * a.strides[1] - a.pads[1] + s * a.dilations[1];
                if (yy < 0 || yy >= h || xx < 0 || xx >= wd)
                  continue;
                acc += w[((o * cg + ci) * kh + r) * kw + s] *
                       x[((i * c + (o / mg) * cg + ci) * h + yy) * wd + xx];
              }
          y[((i * m + o) * oh + p) * ow + q] = acc;
        }
  return y;
}

} // namespace

TEST(Conv, TwoDimAgainstNaiveLoop) {
  ConvAttrs a;
  a.strides = {2, 1};
  a.pads = {1, 0, 2, 1};
  a.dilations = {1, 2};
  a.group = 2;
  std::mt19937_64 rng(3);
  D x = randD({2, 4, 7, 6}, rng), w = randD({6, 2, 3, 2}, rng),
    b = randD({6}, rng);
  D ref = naiveConv2d(x, w, &b, a);
  D y = zerosD(ref.shape);
  DSC_ASSERT_OK(conv(x.t(), w.t(), b.t(), a, y.t(), 3));
  for (size_t i = 0; i < y.v.size(); ++i)
    EXPECT_NEAR(y[i], ref[i], 1e-13);
  D wrong = zerosD({2, 6, 5, 5});
  Status st = conv(x.t(), w.t(), b.t(), a, wrong.t());
  EXPECT_NE(st.message().find("result shape must be [2,6,4,5]"),
            std::string::npos)
      << st.message();
}

TEST(Conv, OneDimAndDeterministicThreads) {
  ConvAttrs a;
  a.pads = {2, 1};
  std::mt19937_64 rng(4);
  D x = randD({3, 2, 9}, rng), w = randD({4, 2, 3}, rng);
  D y1 = zerosD({3, 4, 10}), y3 = zerosD({3, 4, 10});
  DSC_ASSERT_OK(conv(x.t(), w.t(), Tensor(), a, y1.t(), 1));
  DSC_ASSERT_OK(conv(x.t(), w.t(), Tensor(), a, y3.t(), 3));
  EXPECT_EQ(y1.v, y3.v);
  // Against the 2-D reference with a unit height.
  D x2 = x, w2 = w;
  x2.shape = {3, 2, 1, 9};
  w2.shape = {4, 2, 1, 3};
  ConvAttrs a2;
  a2.strides = {1, 1};
  a2.pads = {0, 2, 0, 1};
  a2.dilations = {1, 1};
  D ref = naiveConv2d(x2, w2, nullptr, a2);
  for (size_t i = 0; i < y1.v.size(); ++i)
    EXPECT_NEAR(y1[i], ref[i], 1e-13);
}

TEST(Conv, BackwardFiniteDifferences) {
  struct Case {
    std::vector<int64_t> x, w;
    ConvAttrs a;
  };
  std::vector<Case> cases = {
      {{2, 4, 5, 6}, {6, 2, 3, 2}, {{2, 1}, {1, 0, 1, 1}, {1, 2}, 2}},
      {{2, 3, 8}, {2, 3, 3}, {{2}, {1, 2}, {2}, 1}},
      {{1, 2, 3, 4, 3}, {2, 1, 2, 2, 2}, {{1, 2, 1}, {}, {}, 2}}};
  for (Case &c : cases) {
    std::mt19937_64 rng(c.x.size());
    std::vector<D> in = {randD(c.x, rng), randD(c.w, rng),
                         randD({c.w[0]}, rng)};
    // The output shape, from a forward with a big enough buffer.
    std::vector<int64_t> outShape = {c.x[0], c.w[0]};
    int dims = static_cast<int>(c.x.size()) - 2;
    for (int d = 0; d < dims; ++d) {
      int64_t s = c.a.strides.empty() ? 1 : c.a.strides[d];
      int64_t dil = c.a.dilations.empty() ? 1 : c.a.dilations[d];
      int64_t pb = c.a.pads.empty() ? 0 : c.a.pads[d];
      int64_t pe = c.a.pads.empty() ? 0 : c.a.pads[d + dims];
      outShape.push_back(
          (c.x[d + 2] + pb + pe - dil * (c.w[d + 2] - 1) - 1) / s + 1);
    }
    gradCheck(
        in, outShape,
        [&](auto &x, const Tensor &o) {
          return conv(x[0], x[1], x[2], c.a, o, 2);
        },
        [&](auto &x, const Tensor &g, auto &gr) {
          return convBackward(x[0], x[1], c.a, g, gr[0], gr[1], gr[2], 2);
        },
        {0, 1, 2});
  }
}

TEST(Pool, OutputShapesWithCeilMode) {
  D x = zerosD({1, 1, 5, 5});
  PoolAttrs a;
  a.kernelShape = {2, 2};
  a.strides = {2, 2};
  std::vector<int64_t> shape;
  DSC_ASSERT_OK(poolOutputShape(x.t(), a, shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{1, 1, 2, 2}));
  a.ceilMode = true;
  DSC_ASSERT_OK(poolOutputShape(x.t(), a, shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{1, 1, 3, 3}));
  // A window that would start in the end padding is dropped (PyTorch).
  a.pads = {1, 1, 1, 1};
  DSC_ASSERT_OK(poolOutputShape(x.t(), a, shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{1, 1, 3, 3}));
  D x6 = zerosD({1, 1, 6});
  PoolAttrs b;
  b.kernelShape = {3};
  b.strides = {2};
  b.pads = {1, 1};
  b.ceilMode = true;
  DSC_ASSERT_OK(poolOutputShape(x6.t(), b, shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{1, 1, 4}));
}

TEST(Pool, AvgPoolCountIncludePad) {
  D x(std::vector<int64_t>{1, 1, 6}, DType::F64, {1, 2, 3, 4, 5, 6});
  PoolAttrs a;
  a.kernelShape = {3};
  a.strides = {2};
  a.pads = {1, 1};
  a.ceilMode = true;
  D y = zerosD({1, 1, 4});
  DSC_ASSERT_OK(avgPool(x.t(), a, y.t()));
  EXPECT_EQ(y.v, (std::vector<double>{1.5, 3, 5, 6}));
  a.countIncludePad = true;
  DSC_ASSERT_OK(avgPool(x.t(), a, y.t()));
  // The last window [5, 8) counts the one pad position inside [-1, 7).
  EXPECT_EQ(y.v, (std::vector<double>{1, 3, 5, 3}));
}

TEST(Pool, MaxPoolValuesAndIndices) {
  D x(std::vector<int64_t>{1, 1, 3, 3}, DType::F64,
      {1, 9, 2, 4, 5, 6, 7, 3, 8});
  PoolAttrs a;
  a.kernelShape = {2, 2};
  a.strides = {1, 1};
  D y = zerosD({1, 1, 2, 2});
  Buf<int64_t> idx({1, 1, 2, 2}, DType::I64);
  DSC_ASSERT_OK(maxPool(x.t(), a, y.t(), idx.t()));
  EXPECT_EQ(y.v, (std::vector<double>{9, 9, 7, 8}));
  EXPECT_EQ(idx.v, (std::vector<int64_t>{1, 1, 6, 8}));
}

TEST(Pool, BackwardFiniteDifferences) {
  for (int mode = 0; mode < 4; ++mode) {
    PoolAttrs a;
    a.kernelShape = {3, 2};
    a.strides = {2, 2};
    a.pads = {1, 0, 1, 1};
    a.dilations = {1, mode == 3 ? 2 : 1};
    a.ceilMode = mode & 1;
    a.countIncludePad = mode & 2;
    std::mt19937_64 rng(mode);
    std::vector<D> in = {randD({2, 2, 6, 7}, rng)};
    std::vector<int64_t> outShape;
    DSC_ASSERT_OK(poolOutputShape(in[0].t(), a, outShape));
    gradCheck(
        in, outShape,
        [&](auto &x, const Tensor &o) { return avgPool(x[0], a, o); },
        [&](auto &x, const Tensor &g, auto &gr) {
          return avgPoolBackward(x[0], a, g, gr[0]);
        },
        {0});
    gradCheck(
        in, outShape,
        [&](auto &x, const Tensor &o) { return maxPool(x[0], a, o); },
        [&](auto &x, const Tensor &g, auto &gr) {
          return maxPoolBackward(x[0], a, g, gr[0]);
        },
        {0});
  }
}

TEST(Pool, GlobalPoolsForwardAndBackward) {
  std::mt19937_64 rng(8);
  std::vector<D> in = {randD({2, 3, 4, 5}, rng)};
  D y = zerosD({2, 3, 1, 1});
  DSC_ASSERT_OK(globalAvgPool(in[0].t(), y.t()));
  double acc = 0;
  for (int i = 0; i < 20; ++i)
    acc += in[0][i];
  EXPECT_NEAR(y[0], acc / 20, 1e-15);
  gradCheck(
      in, {2, 3, 1, 1},
      [](auto &x, const Tensor &o) { return globalAvgPool(x[0], o); },
      [](auto &, const Tensor &g, auto &gr) {
        return globalAvgPoolBackward(g, gr[0]);
      },
      {0});
  gradCheck(
      in, {2, 3, 1, 1},
      [](auto &x, const Tensor &o) { return globalMaxPool(x[0], o); },
      [](auto &x, const Tensor &g, auto &gr) {
        return globalMaxPoolBackward(x[0], g, gr[0]);
      },
      {0});
}

// dsc.linear_cross_entropy with init (dsc-accumulate-in-call's running sum):
// its chunks' weight-gradient terms go onto init, in grad_weight's storage or
// in init's own (the same bits either way); onto zeros, the same bits as
// without init; onto another sum, within rounding of that sum plus the
// gradient made without it. A wrong init is an error.
TEST(LinearCrossEntropy, WeightGradientOntoInit) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t n = 10, c = 6, v = 9, rows = 4;
  F x({n, c}, DType::F32), w({v, c}, DType::F32), seed({}, DType::F32, {0.5f});
  for (float &e : x.v)
    e = u(rng);
  for (float &e : w.v)
    e = u(rng);
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i)
    labels[i] = (i * 5) % v;
  Tensor y = Tensor::of(labels.data(), DType::I64, {n});
  auto run = [&](F &gw, const Tensor &init) {
    F logits({rows, v}, DType::F32),
        chunks({(n + rows - 1) / rows}, DType::F32), loss({}, DType::F32),
        gx({n, c}, DType::F32);
    return linearCrossEntropy(x.t(), w.t(), true, y, std::nullopt, seed.t(),
                              logits.t(), chunks.t(), loss.t(), gx.t(), gw.t(),
                              init);
  };
  F plain({v, c}, DType::F32), zeros({v, c}, DType::F32),
      ontoZeros({v, c}, DType::F32);
  DSC_ASSERT_OK(run(plain, Tensor()));
  DSC_ASSERT_OK(run(ontoZeros, zeros.t()));
  EXPECT_EQ(ontoZeros.v, plain.v);
  F sum({v, c}, DType::F32), apart({v, c}, DType::F32);
  for (float &e : sum.v)
    e = u(rng);
  F inPlace = sum;
  DSC_ASSERT_OK(run(apart, sum.t()));
  DSC_ASSERT_OK(run(inPlace, inPlace.t()));
  EXPECT_EQ(apart.v, inPlace.v);
  for (size_t i = 0; i < sum.v.size(); ++i)
    EXPECT_NEAR(apart.v[i], sum.v[i] + plain.v[i], 1e-6) << i;
  F wrong({v, c + 1}, DType::F32), gw({v, c}, DType::F32);
  EXPECT_FALSE(run(gw, wrong.t()).ok());
}
