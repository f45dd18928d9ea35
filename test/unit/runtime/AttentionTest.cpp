//===- AttentionTest.cpp - cpu::attention against a naive reference -------===//
//
// Each case runs cpu::attention and cpu::attentionBackward in one dtype on
// inputs rounded to it, and compares with NaiveAttention (double, full
// score matrix, textbook gradients) on the same rounded inputs: f64 within
// 1e-12, f32 within 1e-5, bf16 within its rounding.
//
//===----------------------------------------------------------------------===//

#include "AttentionReference.h"
#include "GradCheck.h"
#include "cpu/attention_rng.h"
#include "cpu/kernels.h"

#include <cmath>
#include <cstring>
#include <string>

using namespace dsc;
using namespace dsc::cpu;
using namespace dsc::test;

namespace {

/// A host buffer of any float dtype, set and read through double.
struct Typed {
  DType dtype = DType::F64;
  std::vector<int64_t> shape;
  std::vector<char> bytes;

  Typed(DType dt, std::vector<int64_t> s) : dtype(dt), shape(std::move(s)) {
    bytes.assign(std::max<size_t>(numelOf(shape) * dtypeSize(dt), 1), 0);
  }
  Typed(DType dt, std::vector<int64_t> s, const std::vector<double> &values)
      : Typed(dt, std::move(s)) {
    for (size_t i = 0; i < values.size(); ++i)
      set(int64_t(i), values[i]);
  }
  Tensor t() { return Tensor::of(bytes.data(), dtype, shape); }
  void set(int64_t i, double x) {
    switch (dtype) {
    case DType::F64:
      reinterpret_cast<double *>(bytes.data())[i] = x;
      break;
    case DType::F32:
      reinterpret_cast<float *>(bytes.data())[i] = float(x);
      break;
    case DType::BF16:
      reinterpret_cast<uint16_t *>(bytes.data())[i] = floatToBfloat16(float(x));
      break;
    case DType::F16:
      reinterpret_cast<uint16_t *>(bytes.data())[i] = floatToHalf(float(x));
      break;
    default:
      reinterpret_cast<uint8_t *>(bytes.data())[i] = x != 0;
    }
  }
  double at(int64_t i) const {
    switch (dtype) {
    case DType::F64:
      return reinterpret_cast<const double *>(bytes.data())[i];
    case DType::F32:
      return reinterpret_cast<const float *>(bytes.data())[i];
    case DType::BF16:
      return bfloat16ToFloat(
          reinterpret_cast<const uint16_t *>(bytes.data())[i]);
    case DType::F16:
      return halfToFloat(reinterpret_cast<const uint16_t *>(bytes.data())[i]);
    default:
      return reinterpret_cast<const uint8_t *>(bytes.data())[i];
    }
  }
  std::vector<double> values() const {
    std::vector<double> r(numelOf(shape));
    for (size_t i = 0; i < r.size(); ++i)
      r[i] = at(int64_t(i));
    return r;
  }
};

DType lseTypeOf(DType dt) { return dt == DType::F64 ? DType::F64 : DType::F32; }
DType maskTypeOf(const AttnCase &c, DType dt) {
  if (c.mask == MaskKind::Bool)
    return DType::Bool;
  return dt == DType::F64 ? DType::F64 : DType::F32;
}

/// The data as the kernel sees it in `dt`: every operand rounded.
AttnData roundedTo(const AttnCase &c, const AttnData &x, DType dt) {
  auto round = [&](DType t, const std::vector<int64_t> &s,
                   const std::vector<double> &v) {
    return Typed(t, s, v).values();
  };
  AttnData r;
  r.q = round(dt, c.qShape(), x.q);
  r.k = round(dt, c.kShape(), x.k);
  r.v = round(dt, c.vShape(), x.v);
  r.gradOut = round(dt, c.outShape(), x.gradOut);
  if (c.mask != MaskKind::None)
    r.mask = round(maskTypeOf(c, dt), c.maskShape, x.mask);
  return r;
}

/// The kernel's results in `dt`, read back as double.
struct KernelOut {
  Status forward, backward;
  AttnResult r;
};

KernelOut runKernel(const AttnCase &c, const AttnData &x, DType dt) {
  Typed q(dt, c.qShape(), x.q), k(dt, c.kShape(), x.k), v(dt, c.vShape(), x.v);
  Typed g(dt, c.outShape(), x.gradOut);
  Typed out(dt, c.outShape()), lse(lseTypeOf(dt), c.lseShape());
  Typed gq(dt, c.qShape()), gk(dt, c.kShape()), gv(dt, c.vShape());
  Tensor mask;
  Typed m(maskTypeOf(c, dt),
          c.maskShape.empty() ? std::vector<int64_t>{1} : c.maskShape, x.mask);
  if (c.mask != MaskKind::None)
    mask = m.t();
  KernelOut o;
  o.forward = attention(q.t(), k.t(), v.t(), mask, c.attrs, out.t(), lse.t());
  o.backward = attentionBackward(q.t(), k.t(), v.t(), mask, out.t(), lse.t(),
                                 g.t(), c.attrs, gq.t(), gk.t(), gv.t());
  o.r = {out.values(), lse.values(), gq.values(), gk.values(), gv.values()};
  return o;
}

struct Tol {
  double atol, rtol;
};

Tol tolOf(DType dt) {
  switch (dt) {
  case DType::F64:
    return {1e-12, 1e-12};
  case DType::F32:
    return {1e-5, 1e-5};
  default: // one bf16 rounding of the result, f32 math before it
    return {2e-3, 1.0 / 128};
  }
}

void expectNear(const std::vector<double> &got, const std::vector<double> &want,
                Tol tol, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want[i];
    bool ok = std::isinf(w)
                  ? g == w
                  : std::fabs(g - w) <= tol.atol + tol.rtol * std::fabs(w);
    if (!ok && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: kernel " << g << ", naive " << w;
  }
}

void checkCase(const AttnCase &c, DType dt, uint64_t seed = 7) {
  AttnData x = roundedTo(c, makeData(c, seed), dt);
  AttnResult want = NaiveAttention(c, x).run();
  KernelOut got = runKernel(c, x, dt);
  ASSERT_TRUE(got.forward.ok()) << got.forward.message();
  ASSERT_TRUE(got.backward.ok()) << got.backward.message();
  Tol tol = tolOf(dt);
  std::string name = dtypeName(dt);
  expectNear(got.r.out, want.out, tol, name + " out");
  expectNear(got.r.lse, want.lse, tol, name + " lse");
  expectNear(got.r.gradQ, want.gradQ, tol, name + " grad_q");
  expectNear(got.r.gradK, want.gradK, tol, name + " grad_k");
  expectNear(got.r.gradV, want.gradV, tol, name + " grad_v");
}

void checkAllTypes(const AttnCase &c) {
  for (DType dt : {DType::F64, DType::F32, DType::BF16})
    checkCase(c, dt);
}

AttnCase basic(int64_t t, int64_t d) {
  AttnCase c;
  c.tq = c.tk = t;
  c.d = c.dv = d;
  c.attrs.scale = 1 / std::sqrt(double(d));
  return c;
}

} // namespace

TEST(Attention, Plain) { checkAllTypes(basic(40, 64)); }

TEST(Attention, Causal) {
  AttnCase c = basic(70, 64);
  c.attrs.causal = true;
  checkAllTypes(c);
}

TEST(Attention, HeadDim128AndValueDim) {
  checkAllTypes(basic(33, 128));
  AttnCase c = basic(21, 64);
  c.dv = 24;
  c.attrs.causal = true;
  checkAllTypes(c);
}

TEST(Attention, FloatMaskBroadcastNegInf) {
  AttnCase c = basic(37, 16);
  c.b = 2;
  c.mask = MaskKind::Float;
  c.maskShape = {2, 1, 1, 37};
  checkAllTypes(c);
}

TEST(Attention, FloatMaskLargeNegative) {
  AttnCase c = basic(37, 16);
  c.b = 2;
  c.mask = MaskKind::Float;
  c.maskShape = {2, 1, 1, 37};
  c.maskNegative = -3.4e38;
  checkAllTypes(c);
  c.maskShape = {1, 2, 37, 37}; // per head and query, no batch
  c.attrs.causal = true;
  checkAllTypes(c);
}

TEST(Attention, BoolMask) {
  AttnCase c = basic(29, 16);
  c.b = 2;
  c.mask = MaskKind::Bool;
  c.maskShape = {2, 2, 29, 29};
  c.maskDensity = 0.4;
  checkAllTypes(c);
}

TEST(Attention, GroupedQuery) {
  AttnCase c = basic(35, 32);
  c.hq = 4, c.hkv = 2;
  c.attrs.causal = true;
  checkAllTypes(c);
  c.hkv = 1;
  checkAllTypes(c);
}

TEST(Attention, SlidingWindow) {
  AttnCase c = basic(70, 16);
  c.attrs.window = 9;
  checkAllTypes(c);
  c.attrs.causal = true;
  checkAllTypes(c);
}

TEST(Attention, OddAndUnequalLengths) {
  AttnCase c = basic(37, 16);
  c.attrs.causal = true;
  checkAllTypes(c);
  c = basic(37, 16);
  c.tk = 53;
  checkAllTypes(c);
  c.tq = 65, c.tk = 3;
  checkAllTypes(c);
}

TEST(Attention, FullyMaskedRowIsZero) {
  for (MaskKind kind : {MaskKind::Float, MaskKind::Bool}) {
    AttnCase c = basic(37, 16);
    c.mask = kind;
    c.maskShape = {1, 1, 37, 37};
    c.emptyRow = 5;
    for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
      checkCase(c, dt);
      AttnData x = roundedTo(c, makeData(c, 3), dt);
      KernelOut got = runKernel(c, x, dt);
      for (int64_t h = 0; h < c.hq; ++h) {
        int64_t row = h * c.tq + c.emptyRow;
        EXPECT_EQ(got.r.lse[row], -INFINITY);
        for (int64_t e = 0; e < c.dv; ++e)
          EXPECT_EQ(got.r.out[row * c.dv + e], 0);
        for (int64_t e = 0; e < c.d; ++e)
          EXPECT_EQ(got.r.gradQ[row * c.d + e], 0);
      }
      for (const auto *vec :
           {&got.r.out, &got.r.gradQ, &got.r.gradK, &got.r.gradV})
        for (double e : *vec)
          ASSERT_FALSE(std::isnan(e));
    }
  }
}

TEST(Attention, NoKeysAtAll) {
  AttnCase c = basic(5, 8);
  c.tk = 0;
  checkCase(c, DType::F32);
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

namespace {

AttnCase dropoutCase(double p, uint64_t seed) {
  AttnCase c = basic(37, 16);
  c.hq = 4, c.hkv = 2;
  c.attrs.causal = true;
  c.attrs.dropout = p;
  c.attrs.seed = seed;
  return c;
}

} // namespace

TEST(AttentionDropout, MatchesNaiveWithTheSameMask) {
  checkAllTypes(dropoutCase(0.25, 11));
}

TEST(AttentionDropout, DeterministicUnderTheSeed) {
  AttnCase c = dropoutCase(0.3, 5);
  AttnData x = makeData(c, 1);
  KernelOut a = runKernel(c, x, DType::F32), b = runKernel(c, x, DType::F32);
  EXPECT_EQ(a.r.out, b.r.out);
  EXPECT_EQ(a.r.gradQ, b.r.gradQ);
  EXPECT_EQ(a.r.gradK, b.r.gradK);
  c.attrs.seed = 6;
  KernelOut other = runKernel(c, x, DType::F32);
  EXPECT_NE(a.r.out, other.r.out);
  EXPECT_EQ(a.r.lse, other.r.lse); // pre-dropout
}

TEST(AttentionDropout, KeptFractionIsOneMinusP) {
  for (double p : {0.1, 0.5, 0.9}) {
    AttentionDropout d = attentionDropoutOf(123, p);
    const int64_t n = 2 * 3 * 64 * 64;
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i)
      kept += attentionDropoutKeep(d, uint64_t(i));
    double sigma = std::sqrt(p * (1 - p) / double(n));
    EXPECT_NEAR(double(kept) / double(n), 1 - p, 5 * sigma) << "p " << p;
  }
  EXPECT_FALSE(attentionDropoutKeep(attentionDropoutOf(1, 1.0), 0));
  EXPECT_TRUE(attentionDropoutKeep(attentionDropoutOf(1, 0.0), 0));
}

TEST(AttentionDropout, BackwardMatchesFiniteDifferences) {
  AttnCase c = dropoutCase(0.2, 9);
  c.tq = c.tk = 9, c.d = c.dv = 4;
  AttnData x = makeData(c, 2);
  KernelOut base = runKernel(c, x, DType::F64);
  // loss = sum(out * gradOut): d loss / d x = the kernel's gradient.
  auto loss = [&](const AttnData &y) {
    KernelOut o = runKernel(c, y, DType::F64);
    double s = 0;
    for (size_t i = 0; i < o.r.out.size(); ++i)
      s += o.r.out[i] * y.gradOut[i];
    return s;
  };
  const double eps = 1e-6;
  auto probe = [&](std::vector<double> AttnData::*field,
                   const std::vector<double> &grad, const char *name) {
    for (size_t i = 0; i < grad.size(); i += 7) {
      AttnData up = x, down = x;
      (up.*field)[i] += eps;
      (down.*field)[i] -= eps;
      double fd = (loss(up) - loss(down)) / (2 * eps);
      EXPECT_NEAR(grad[i], fd, 1e-7) << name << "[" << i << "]";
    }
  };
  probe(&AttnData::q, base.r.gradQ, "grad_q");
  probe(&AttnData::k, base.r.gradK, "grad_k");
  probe(&AttnData::v, base.r.gradV, "grad_v");
}

//===----------------------------------------------------------------------===//
// Bad inputs
//===----------------------------------------------------------------------===//

namespace {

/// The forward's status on the case's shapes with one operand replaced.
Status forwardWith(const AttnCase &c, DType qType, DType kType,
                   std::vector<int64_t> kShape, DType lseType,
                   std::vector<int64_t> maskShape = {}) {
  Typed q(qType, c.qShape()), k(kType, kShape), v(qType, c.vShape());
  Typed out(qType, c.outShape()), lse(lseType, c.lseShape());
  Typed m(DType::F32, maskShape.empty() ? std::vector<int64_t>{1} : maskShape);
  Tensor mask = maskShape.empty() ? Tensor() : m.t();
  return attention(q.t(), k.t(), v.t(), mask, c.attrs, out.t(), lse.t());
}

void expectError(const Status &st, const std::string &call,
                 const std::string &reason) {
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind(call + "(", 0), 0u) << st.message();
  EXPECT_NE(st.message().find(reason), std::string::npos) << st.message();
}

} // namespace

TEST(AttentionErrors, ShapesAndDTypes) {
  AttnCase c = basic(8, 16);
  DType f = DType::F32;
  EXPECT_TRUE(forwardWith(c, f, f, c.kShape(), f).ok());
  expectError(forwardWith(c, f, f, {1, 2, 8, 15}, f), "attention", "head dim");
  c.hkv = 3;
  expectError(forwardWith(c, f, f, {1, 3, 8, 16}, f), "attention",
              "multiple of k's heads");
  c = basic(8, 16);
  expectError(forwardWith(c, f, DType::F64, c.kShape(), f), "attention",
              "share one dtype");
  expectError(forwardWith(c, f, f, c.kShape(), DType::F64), "attention",
              "lse must be f32");
  expectError(forwardWith(c, f, f, c.kShape(), f, {1, 2, 3, 8}), "attention",
              "mask dim 2");
  expectError(forwardWith(c, f, f, {2, 8, 16}, f), "attention", "rank 4");
  c.attrs.dropout = 1.5;
  expectError(forwardWith(c, f, f, c.kShape(), f), "attention", "dropout");
}

TEST(AttentionErrors, BackwardGradientShapes) {
  AttnCase c = basic(8, 16);
  DType f = DType::F32;
  Typed q(f, c.qShape()), k(f, c.kShape()), v(f, c.vShape());
  Typed out(f, c.outShape()), lse(f, c.lseShape()), g(f, c.outShape());
  Typed gq(f, c.qShape()), gk(f, {1, 2, 8, 8}), gv(f, c.vShape());
  expectError(attentionBackward(q.t(), k.t(), v.t(), Tensor(), out.t(), lse.t(),
                                g.t(), c.attrs, gq.t(), gk.t(), gv.t()),
              "attention_backward", "grad_q, grad_k and grad_v");
  expectError(attentionBackward(q.t(), k.t(), v.t(), Tensor(), out.t(),
                                Tensor(), g.t(), c.attrs, gq.t(), gk.t(),
                                gv.t()),
              "attention_backward", "out and lse");
}

namespace {

/// `x` ([B, H, T, D]) as [B, T, H, D], or back (the same transpose).
Typed swapped(Typed &x) {
  std::vector<int64_t> s = x.shape;
  std::swap(s[1], s[2]);
  Typed y(x.dtype, s);
  EXPECT_TRUE(transpose(x.t(), {0, 2, 1, 3}, y.t()).ok());
  return y;
}

Typed randomTyped(DType dt, std::vector<int64_t> shape, uint64_t seed) {
  Typed t(dt, shape);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0, n = int64_t(numelOf(shape)); i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    t.set(i, double(state >> 11) / double(uint64_t(1) << 53) * 2 - 1);
  }
  return t;
}

} // namespace

// seq_major reads and writes [B, T, H, D] and computes the same values as
// the heads-first call on the transposed operands, bit for bit (the CPU
// copies heads-first), with a mask, grouped-query heads and causality.
TEST(Attention, SeqMajorIsTheTransposedCall) {
  for (DType dt : {DType::F32, DType::BF16}) {
    AttnCase c = basic(12, 16);
    c.hq = 4, c.hkv = 2;
    c.attrs.causal = true;
    Typed q = randomTyped(dt, c.qShape(), 1),
          k = randomTyped(dt, c.kShape(), 2),
          v = randomTyped(dt, c.vShape(), 3),
          g = randomTyped(dt, c.outShape(), 4);
    Typed mask = randomTyped(DType::F32, {1, 1, 12, 12}, 5);
    Typed out(dt, c.outShape()), lse(DType::F32, c.lseShape());
    Typed gq(dt, c.qShape()), gk(dt, c.kShape()), gv(dt, c.vShape());
    DSC_ASSERT_OK(
        attention(q.t(), k.t(), v.t(), mask.t(), c.attrs, out.t(), lse.t()));
    DSC_ASSERT_OK(attentionBackward(q.t(), k.t(), v.t(), mask.t(), out.t(),
                                    lse.t(), g.t(), c.attrs, gq.t(), gk.t(),
                                    gv.t()));
    AttentionAttrs sm = c.attrs;
    sm.seqMajor = true;
    Typed sq = swapped(q), sk = swapped(k), sv = swapped(v), sg = swapped(g);
    Typed sout = swapped(out), slse(DType::F32, c.lseShape());
    Typed sgq = swapped(gq), sgk = swapped(gk), sgv = swapped(gv);
    DSC_ASSERT_OK(
        attention(sq.t(), sk.t(), sv.t(), mask.t(), sm, sout.t(), slse.t()));
    DSC_ASSERT_OK(attentionBackward(sq.t(), sk.t(), sv.t(), mask.t(), sout.t(),
                                    slse.t(), sg.t(), sm, sgq.t(), sgk.t(),
                                    sgv.t()));
    EXPECT_EQ(swapped(sout).bytes, out.bytes) << dtypeName(dt);
    EXPECT_EQ(slse.bytes, lse.bytes) << dtypeName(dt);
    EXPECT_EQ(swapped(sgq).bytes, gq.bytes) << dtypeName(dt);
    EXPECT_EQ(swapped(sgk).bytes, gk.bytes) << dtypeName(dt);
    EXPECT_EQ(swapped(sgv).bytes, gv.bytes) << dtypeName(dt);
    // A heads-first result under seq_major is refused, naming the layout.
    expectError(
        attention(sq.t(), sk.t(), sv.t(), mask.t(), sm, out.t(), lse.t()),
        "attention", "[batch, q seq, heads, v dim]");
  }
}
