//===- ElementwiseTest.cpp - elementwise.cu against the CPU kernels -------===//
//
// Each test runs the CPU kernel on the host views and the CUDA kernel on the
// device views of the same data and compares: exactly where the CUDA kernel
// promises the CPU's bits (integer math, IEEE single ops, casts, fill,
// where, trilu, cumsum, dropout), within a few ulps where libdevice and libm
// may differ (exp, tanh, pow, ...). Errors must be the CPU's, message and code.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "cpu/kernel_util.h"

#include <cmath>
#include <limits>
#include <optional>

namespace dsc::cuda::test {
namespace {

using Shape = std::vector<int64_t>;

/// Waits for every stream of the device: the uploads of DevTensor (plain
/// cudaMemcpy) are done before a kernel on the rank's stream reads them,
/// and that stream is idle before the host rewrites an input.
void settle() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

/// The device result of `t` has the CPU result's bits element for element
/// (two NaNs count as equal whatever their payloads).
void expectSameBits(const DevTensor &t, const std::string &what) {
  std::vector<char> bytes = t.download();
  Tensor g = t.host();
  g.data = bytes.data();
  size_t es = dtypeSize(g.dtype);
  int reported = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    const char *c = static_cast<const char *>(t.host().data) + i * es;
    const char *d = bytes.data() + i * es;
    if (std::memcmp(c, d, es) == 0)
      continue;
    double cv = DevTensor::get(t.host(), i), dv = DevTensor::get(g, i);
    if (std::isnan(cv) && std::isnan(dv))
      continue;
    if (reported++ < 5)
      ADD_FAILURE() << what << " element " << i << ": cpu " << cv << ", cuda "
                    << dv;
  }
}

/// Both calls failed with the same code and message.
void expectSameError(const Status &cpu, const Status &gpu,
                     const std::string &callName) {
  EXPECT_FALSE(cpu.ok());
  ASSERT_FALSE(gpu.ok()) << "expected the CPU's error: " << cpu.message();
  EXPECT_EQ(cpu.code(), gpu.code());
  EXPECT_EQ(cpu.message(), gpu.message());
  EXPECT_NE(gpu.message().find(callName + "("), std::string::npos)
      << gpu.message();
}

/// Integers in [lo, hi), optionally never zero.
std::vector<double> ints(int64_t n, int lo, int hi, uint32_t seed,
                         bool nonzero = false) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> u(lo, hi - 1);
  std::vector<double> v(static_cast<size_t>(n));
  for (double &x : v) {
    x = u(rng);
    if (nonzero && x == 0)
      x = 1;
  }
  return v;
}

Shape broadcast(const Shape &a, const Shape &b) {
  Tensor ta = Tensor::of(nullptr, DType::F32, a);
  Tensor tb = Tensor::of(nullptr, DType::F32, b);
  Shape out;
  EXPECT_TRUE(cpu::detail::broadcastShape(ta, tb, out));
  return out;
}

std::string str(const Shape &s) { return describe(I64s(s)); }

const DType kArith[] = {DType::F32, DType::F64, DType::I64,
                        DType::I32, DType::I8,  DType::U8};
const DType kAll[] = {DType::F32,  DType::F64, DType::F16,
                      DType::BF16, DType::I64, DType::I32,
                      DType::I8,   DType::U8,  DType::Bool};

//===----------------------------------------------------------------------===//
// Unary, activations, clip
//===----------------------------------------------------------------------===//

TEST(CudaElementwise, UnaryFloatOps) {
  DSC_REQUIRE_GPU();
  const UnaryOp ops[] = {UnaryOp::Neg,  UnaryOp::Abs,   UnaryOp::Exp,
                         UnaryOp::Log,  UnaryOp::Sqrt,  UnaryOp::Reciprocal,
                         UnaryOp::Tanh, UnaryOp::Erf,   UnaryOp::Sigmoid,
                         UnaryOp::Relu, UnaryOp::Floor, UnaryOp::Ceil,
                         UnaryOp::Sin,  UnaryOp::Cos,   UnaryOp::Softplus};
  for (DType dt : {DType::F32, DType::F64}) {
    bool f64 = dt == DType::F64;
    for (UnaryOp op : ops) {
      double lo = -6, hi = 6;
      if (op == UnaryOp::Log || op == UnaryOp::Sqrt ||
          op == UnaryOp::Reciprocal)
        lo = 0.25;
      DevTensor x(dt, {3, 5, 67});
      x.random(lo, hi, 7 + static_cast<uint32_t>(op));
      DevTensor y(dt, {3, 5, 67});
      DSC_ASSERT_OK(cpu::unary(op, x.host(), y.host()));
      settle();
      DSC_ASSERT_OK(cuda::unary(op, x.dev(), y.dev()));
      expectClose(y, y, f64 ? 1e-13 : 4e-6, f64 ? 1e-15 : 1e-6,
                  std::string(dtypeName(dt)) + " unary " +
                      std::to_string(static_cast<int>(op)));
    }
  }
}

TEST(CudaElementwise, UnaryInPlaceAndScalar) {
  DSC_REQUIRE_GPU();
  DevTensor x(DType::F32, {1000});
  x.random(-3, 3, 5);
  DSC_ASSERT_OK(cpu::unary(UnaryOp::Sigmoid, x.host(), x.host()));
  settle();
  DSC_ASSERT_OK(cuda::unary(UnaryOp::Sigmoid, x.dev(), x.dev()));
  expectClose(x, x, 4e-6, 1e-7, "in-place sigmoid");

  DevTensor s(DType::F64, {}), r(DType::F64, {});
  s.values({0.75});
  DSC_ASSERT_OK(cpu::unary(UnaryOp::Exp, s.host(), r.host()));
  settle();
  DSC_ASSERT_OK(cuda::unary(UnaryOp::Exp, s.dev(), r.dev()));
  expectClose(r, r, 1e-15, 0, "scalar exp");
}

TEST(CudaElementwise, UnaryNanPassesLikeCpu) {
  DSC_REQUIRE_GPU();
  double nan = std::numeric_limits<double>::quiet_NaN();
  for (UnaryOp op : {UnaryOp::Relu, UnaryOp::Abs, UnaryOp::Exp,
                     UnaryOp::Sigmoid, UnaryOp::Floor}) {
    DevTensor x(DType::F32, {4}), y(DType::F32, {4});
    x.values({nan, -1, 0, 2});
    DSC_ASSERT_OK(cpu::unary(op, x.host(), y.host()));
    settle();
    DSC_ASSERT_OK(cuda::unary(op, x.dev(), y.dev()));
    expectClose(y, y, 4e-6, 0, "nan unary " + std::to_string(int(op)));
  }
}

TEST(CudaElementwise, UnaryIntegerNegAbsAndNot) {
  DSC_REQUIRE_GPU();
  for (DType dt : {DType::I64, DType::I32, DType::I8}) {
    for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Abs}) {
      DevTensor x(dt, {257}), y(dt, {257});
      std::vector<double> v = ints(257, -120, 120, 3);
      // The most negative i8 wraps (the CPU negates it as an int).
      v[0] = dt == DType::I8 ? -128 : -2147483647.0;
      v[1] = dt == DType::I8 ? 127 : 2147483647.0;
      x.values(v);
      DSC_ASSERT_OK(cpu::unary(op, x.host(), y.host()));
      settle();
      DSC_ASSERT_OK(cuda::unary(op, x.dev(), y.dev()));
      expectSameBits(y, std::string(dtypeName(dt)) +
                            (op == UnaryOp::Neg ? " neg" : " abs"));
    }
  }
  DevTensor b(DType::Bool, {2, 33}), nb(DType::Bool, {2, 33});
  b.random(0, 2, 9);
  DSC_ASSERT_OK(cpu::unary(UnaryOp::Not, b.host(), nb.host()));
  settle();
  DSC_ASSERT_OK(cuda::unary(UnaryOp::Not, b.dev(), nb.dev()));
  expectSameBits(nb, "not");
}

TEST(CudaElementwise, UnaryErrorsAreTheCpus) {
  DSC_REQUIRE_GPU();
  DevTensor u8(DType::U8, {3}), f(DType::F32, {3}), g(DType::F32, {4});
  DevTensor i32(DType::I32, {3}), i64(DType::I64, {3}), b(DType::Bool, {3});
  expectSameError(cpu::unary(UnaryOp::Neg, u8.host(), u8.host()),
                  cuda::unary(UnaryOp::Neg, u8.dev(), u8.dev()), "neg");
  expectSameError(cpu::unary(UnaryOp::Exp, f.host(), g.host()),
                  cuda::unary(UnaryOp::Exp, f.dev(), g.dev()), "exp");
  expectSameError(cpu::unary(UnaryOp::Abs, i32.host(), i64.host()),
                  cuda::unary(UnaryOp::Abs, i32.dev(), i64.dev()), "abs");
  expectSameError(cpu::unary(UnaryOp::Not, f.host(), b.host()),
                  cuda::unary(UnaryOp::Not, f.dev(), b.dev()), "not");
  expectSameError(cpu::unary(UnaryOp::Exp, i32.host(), i32.host()),
                  cuda::unary(UnaryOp::Exp, i32.dev(), i32.dev()), "exp");
  expectSameError(cpu::gelu(f.host(), false, g.host()),
                  cuda::gelu(f.dev(), false, g.dev()), "gelu");
  expectSameError(cpu::leakyRelu(i32.host(), 0.1, i32.host()),
                  cuda::leakyRelu(i32.dev(), 0.1, i32.dev()), "leaky_relu");
  DevTensor h(DType::F16, {3});
  expectSameError(cpu::clip(h.host(), 0.0, 1.0, h.host()),
                  cuda::clip(h.dev(), 0.0, 1.0, h.dev()), "clip");
  expectSameError(cpu::clip(f.host(), 0.0, 1.0, g.host()),
                  cuda::clip(f.dev(), 0.0, 1.0, g.dev()), "clip");
}

TEST(CudaElementwise, LeakyReluAndGelu) {
  DSC_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::F64}) {
    bool f64 = dt == DType::F64;
    DevTensor x(dt, {7, 129}), y(dt, {7, 129});
    x.random(-5, 5, 11);
    DSC_ASSERT_OK(cpu::leakyRelu(x.host(), 0.1, y.host()));
    settle();
    DSC_ASSERT_OK(cuda::leakyRelu(x.dev(), 0.1, y.dev()));
    expectSameBits(y, std::string(dtypeName(dt)) + " leaky_relu");
    for (bool tanhForm : {false, true}) {
      DSC_ASSERT_OK(cpu::gelu(x.host(), tanhForm, y.host()));
      settle();
      DSC_ASSERT_OK(cuda::gelu(x.dev(), tanhForm, y.dev()));
      expectClose(y, y, f64 ? 1e-13 : 4e-6, f64 ? 1e-15 : 1e-6,
                  std::string(dtypeName(dt)) +
                      (tanhForm ? " gelu tanh" : " gelu erf"));
    }
  }
}

TEST(CudaElementwise, Swiglu) {
  DSC_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::F64}) {
    bool f64 = dt == DType::F64;
    DevTensor x(dt, {7, 129}), u(dt, {7, 129}), y(dt, {7, 129});
    x.random(-8, 8, 17);
    u.random(-3, 3, 19);
    DSC_ASSERT_OK(cpu::swiglu(x.host(), u.host(), y.host()));
    settle();
    DSC_ASSERT_OK(cuda::swiglu(x.dev(), u.dev(), y.dev()));
    expectClose(y, y, f64 ? 1e-13 : 4e-6, f64 ? 1e-15 : 1e-6,
                std::string(dtypeName(dt)) + " swiglu");
  }
}

TEST(CudaElementwise, ClipEveryArithmeticDtype) {
  DSC_REQUIRE_GPU();
  using Bound = std::optional<double>;
  const std::pair<Bound, Bound> bounds[] = {{-1.5, 2.5},
                                            {std::nullopt, 1.0},
                                            {0.0, std::nullopt},
                                            {std::nullopt, std::nullopt},
                                            {3.0, -3.0}};
  for (DType dt : kArith) {
    DevTensor x(dt, {5, 41}), y(dt, {5, 41});
    if (isFloat(dt))
      x.random(-5, 5, 13);
    else
      x.values(ints(5 * 41, dt == DType::U8 ? 0 : -6, 7, 13));
    if (isFloat(dt)) {
      x.set(3, std::numeric_limits<double>::quiet_NaN());
      x.upload();
    }
    for (const auto &[lo, hi] : bounds) {
      DSC_ASSERT_OK(cpu::clip(x.host(), lo, hi, y.host()));
      settle();
      DSC_ASSERT_OK(cuda::clip(x.dev(), lo, hi, y.dev()));
      expectSameBits(y, std::string(dtypeName(dt)) + " clip");
    }
  }
}

//===----------------------------------------------------------------------===//
// Binary
//===----------------------------------------------------------------------===//

/// Operands for `op` on `dt`: integer pow and div keep to small, nonzero
/// values; float pow to positive bases.
void fillOperands(BinaryOp op, DType dt, DevTensor &a, DevTensor &b,
                  uint32_t seed) {
  int64_t na = a.host().numel(), nb = b.host().numel();
  bool u8 = dt == DType::U8;
  if (isFloat(dt)) {
    if (op == BinaryOp::Pow) {
      a.random(0.5, 2, seed);
      b.random(-2, 2, seed + 1);
    } else {
      a.random(-4, 4, seed);
      b.random(-4, 4, seed + 1);
      if (op == BinaryOp::Div) { // keep divisors away from zero
        std::vector<double> v(static_cast<size_t>(nb));
        for (int64_t i = 0; i < nb; ++i) {
          double x = DevTensor::get(b.host(), i);
          v[size_t(i)] = x < 0 ? x - 0.25 : x + 0.25;
        }
        b.values(v);
      }
    }
    return;
  }
  if (op == BinaryOp::Pow) {
    // Powers stay within i8 (|a|^b <= 64): no out-of-range conversions.
    a.values(ints(na, u8 ? 1 : -4, 5, seed, true));
    b.values(ints(nb, u8 ? 0 : -2, 4, seed + 1));
  } else if (op == BinaryOp::Div) {
    a.values(ints(na, u8 ? 0 : -100, 100, seed));
    b.values(ints(nb, u8 ? 1 : -9, 9, seed + 1, true));
  } else { // i8/u8 products wrap, as on the CPU
    a.values(ints(na, u8 ? 0 : -100, 100, seed));
    b.values(ints(nb, u8 ? 0 : -100, 100, seed + 1));
  }
}

void checkBinary(BinaryOp op, DType dt, const Shape &sa, const Shape &sb,
                 uint32_t seed) {
  Shape so = broadcast(sa, sb);
  bool cmp = op >= BinaryOp::Equal;
  DevTensor a(dt, sa), b(dt, sb), out(cmp ? DType::Bool : dt, so);
  fillOperands(op, dt, a, b, seed);
  std::string what = std::string(dtypeName(dt)) + " op " +
                     std::to_string(static_cast<int>(op)) + " " + str(sa) +
                     " with " + str(sb);
  DSC_ASSERT_OK(cpu::binary(op, a.host(), b.host(), out.host()));
  settle();
  DSC_ASSERT_OK(cuda::binary(op, a.dev(), b.dev(), out.dev()));
  if (op == BinaryOp::Pow && isFloat(dt))
    expectClose(out, out, dt == DType::F64 ? 1e-14 : 4e-6, 0, what);
  else // single IEEE operations and integer math: the CPU's bits
    expectSameBits(out, what);
}

TEST(CudaElementwise, BinaryArithmeticSameShape) {
  DSC_REQUIRE_GPU();
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul,
                          BinaryOp::Div, BinaryOp::Pow, BinaryOp::Max,
                          BinaryOp::Min};
  uint32_t seed = 1;
  for (DType dt : kArith)
    for (BinaryOp op : ops)
      checkBinary(op, dt, {3, 7, 45}, {3, 7, 45}, seed += 2);
}

TEST(CudaElementwise, BinaryComparisonsAndLogic) {
  DSC_REQUIRE_GPU();
  const BinaryOp cmps[] = {BinaryOp::Equal, BinaryOp::Less, BinaryOp::LessEqual,
                           BinaryOp::Greater, BinaryOp::GreaterEqual};
  for (DType dt : kArith) {
    for (BinaryOp op : cmps) {
      // Few distinct values, so that ties happen.
      DevTensor a(dt, {6, 50}), b(dt, {50}), out(DType::Bool, {6, 50});
      a.values(ints(300, dt == DType::U8 ? 0 : -3, 4, 21));
      b.values(ints(50, dt == DType::U8 ? 0 : -3, 4, 22));
      DSC_ASSERT_OK(cpu::binary(op, a.host(), b.host(), out.host()));
      settle();
      DSC_ASSERT_OK(cuda::binary(op, a.dev(), b.dev(), out.dev()));
      expectSameBits(out, std::string(dtypeName(dt)) + " compare " +
                              std::to_string(static_cast<int>(op)));
    }
  }
  const BinaryOp boolOps[] = {BinaryOp::And,     BinaryOp::Or,
                              BinaryOp::Xor,     BinaryOp::Equal,
                              BinaryOp::Less,    BinaryOp::LessEqual,
                              BinaryOp::Greater, BinaryOp::GreaterEqual};
  for (BinaryOp op : boolOps) {
    DevTensor a(DType::Bool, {4, 1, 9}), b(DType::Bool, {3, 9});
    DevTensor out(DType::Bool, {4, 3, 9});
    a.random(0, 2, 31);
    b.random(0, 2, 32);
    DSC_ASSERT_OK(cpu::binary(op, a.host(), b.host(), out.host()));
    settle();
    DSC_ASSERT_OK(cuda::binary(op, a.dev(), b.dev(), out.dev()));
    expectSameBits(out, "bool op " + std::to_string(static_cast<int>(op)));
  }
}

TEST(CudaElementwise, BinaryBroadcasting) {
  DSC_REQUIRE_GPU();
  const std::pair<Shape, Shape> shapes[] = {
      {{4, 1, 5}, {3, 1}},
      {{3, 1}, {4, 1, 5}},
      {{2, 3, 4}, {}},
      {{}, {2, 3}},
      {{}, {}},
      {{5, 1}, {1, 7}},
      {{1}, {6}},
      {{8, 16}, {16}},
      {{3, 1, 1}, {1, 4, 5}},
      {{2, 1, 3, 1, 2, 2}, {3, 2, 1}},
      {{2, 2, 1, 2, 1, 2, 1, 3}, {2, 1, 2, 1, 2, 3, 1}},
      {{64, 1, 33}, {17, 33}},
      {{1, 1}, {1}},
  };
  uint32_t seed = 100;
  for (const auto &[sa, sb] : shapes)
    for (DType dt : {DType::F32, DType::F64, DType::I32, DType::U8})
      for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Div,
                          BinaryOp::Max, BinaryOp::Less})
        checkBinary(op, dt, sa, sb, seed += 2);
}

TEST(CudaElementwise, BinaryIntegerDivisionTruncatesAndWraps) {
  DSC_REQUIRE_GPU();
  DevTensor a(DType::I8, {6}), b(DType::I8, {6}), out(DType::I8, {6});
  a.values({-7, 7, -7, -128, -128, 5});
  b.values({2, -2, -2, -1, 1, 7});
  DSC_ASSERT_OK(cpu::binary(BinaryOp::Div, a.host(), b.host(), out.host()));
  settle();
  DSC_ASSERT_OK(cuda::binary(BinaryOp::Div, a.dev(), b.dev(), out.dev()));
  expectSameBits(out, "i8 div");
}

TEST(CudaElementwise, BinaryIntegerDivisionByZeroIsTheCpusError) {
  DSC_REQUIRE_GPU();
  for (DType dt : {DType::I64, DType::I32, DType::I8, DType::U8}) {
    DevTensor a(dt, {2, 3}), b(dt, {3}), out(dt, {2, 3});
    a.values({1, 2, 3, 4, 5, 6});
    b.values({1, 0, 2});
    settle();
    Status gpu = cuda::binary(BinaryOp::Div, a.dev(), b.dev(), out.dev());
    expectSameError(cpu::binary(BinaryOp::Div, a.host(), b.host(), out.host()),
                    gpu, "div");
    EXPECT_EQ(gpu.code(), StatusCode::OutOfRange);
    // The zero is found even when the result has no elements.
    DevTensor e(dt, {0, 3}), eo(dt, {0, 3});
    expectSameError(cpu::binary(BinaryOp::Div, e.host(), b.host(), eo.host()),
                    cuda::binary(BinaryOp::Div, e.dev(), b.dev(), eo.dev()),
                    "div");
  }
  // Float division by zero is IEEE, no error.
  DevTensor a(DType::F32, {2}), b(DType::F32, {2}), out(DType::F32, {2});
  a.values({0, 1});
  b.values({0, 0});
  settle();
  DSC_ASSERT_OK(cuda::binary(BinaryOp::Div, a.dev(), b.dev(), out.dev()));
  std::vector<char> bytes = out.download();
  const float *y = reinterpret_cast<const float *>(bytes.data());
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_TRUE(std::isinf(y[1]));
}

TEST(CudaElementwise, BinaryMaxMinPropagateNan) {
  DSC_REQUIRE_GPU();
  double nan = std::numeric_limits<double>::quiet_NaN();
  for (BinaryOp op : {BinaryOp::Max, BinaryOp::Min}) {
    DevTensor a(DType::F64, {4}), b(DType::F64, {4}), out(DType::F64, {4});
    a.values({nan, 1, 2, -0.0});
    b.values({1, nan, 3, 0.0});
    DSC_ASSERT_OK(cpu::binary(op, a.host(), b.host(), out.host()));
    settle();
    DSC_ASSERT_OK(cuda::binary(op, a.dev(), b.dev(), out.dev()));
    expectSameBits(out, op == BinaryOp::Max ? "max nan" : "min nan");
  }
}

TEST(CudaElementwise, BinaryErrorsAreTheCpus) {
  DSC_REQUIRE_GPU();
  DevTensor a(DType::F32, {2, 3}), b(DType::F32, {4, 3}), o(DType::F32, {2, 3});
  DevTensor o4(DType::F32, {4, 3}), ob(DType::Bool, {2, 3});
  DevTensor i(DType::I32, {2, 3}), h(DType::F16, {2, 3}),
      hb(DType::F16, {2, 3});
  DevTensor bl(DType::Bool, {2, 3});
  expectSameError(cpu::binary(BinaryOp::Add, a.host(), b.host(), o.host()),
                  cuda::binary(BinaryOp::Add, a.dev(), b.dev(), o.dev()),
                  "add");
  expectSameError(cpu::binary(BinaryOp::Add, a.host(), a.host(), o4.host()),
                  cuda::binary(BinaryOp::Add, a.dev(), a.dev(), o4.dev()),
                  "add");
  expectSameError(cpu::binary(BinaryOp::Mul, a.host(), i.host(), o.host()),
                  cuda::binary(BinaryOp::Mul, a.dev(), i.dev(), o.dev()),
                  "mul");
  expectSameError(cpu::binary(BinaryOp::Less, a.host(), a.host(), o.host()),
                  cuda::binary(BinaryOp::Less, a.dev(), a.dev(), o.dev()),
                  "less");
  expectSameError(cpu::binary(BinaryOp::Add, a.host(), a.host(), ob.host()),
                  cuda::binary(BinaryOp::Add, a.dev(), a.dev(), ob.dev()),
                  "add");
  expectSameError(cpu::binary(BinaryOp::And, a.host(), a.host(), o.host()),
                  cuda::binary(BinaryOp::And, a.dev(), a.dev(), o.dev()),
                  "and");
  expectSameError(cpu::binary(BinaryOp::Add, bl.host(), bl.host(), bl.host()),
                  cuda::binary(BinaryOp::Add, bl.dev(), bl.dev(), bl.dev()),
                  "add");
  expectSameError(cpu::binary(BinaryOp::Add, h.host(), hb.host(), h.host()),
                  cuda::binary(BinaryOp::Add, h.dev(), hb.dev(), h.dev()),
                  "add");
  Tensor big = a.dev(), bigHost = a.host();
  big.rank = bigHost.rank = kMaxRank + 1;
  expectSameError(cpu::binary(BinaryOp::Add, bigHost, a.host(), o.host()),
                  cuda::binary(BinaryOp::Add, big, a.dev(), o.dev()), "add");
}

//===----------------------------------------------------------------------===//
// Where, cast, fill
//===----------------------------------------------------------------------===//

TEST(CudaElementwise, WhereBroadcastsAnyDtype) {
  DSC_REQUIRE_GPU();
  struct Case {
    Shape cond, x, y;
  };
  const Case cases[] = {{{4, 1, 5}, {3, 1}, {}},
                        {{2, 3}, {2, 3}, {2, 3}},
                        {{}, {2, 3}, {3}},
                        {{7, 1}, {1, 40}, {7, 40}},
                        {{0, 3}, {3}, {1}}};
  for (const Case &c : cases) {
    for (DType dt : {DType::F32, DType::F64, DType::I64, DType::Bool,
                     DType::F16, DType::I8}) {
      Shape so = broadcast(broadcast(c.x, c.y), c.cond);
      DevTensor cond(DType::Bool, c.cond), x(dt, c.x), y(dt, c.y), out(dt, so);
      cond.random(0, 2, 41);
      x.random(-9, 9, 42);
      y.random(-9, 9, 43);
      DSC_ASSERT_OK(cpu::where(cond.host(), x.host(), y.host(), out.host()));
      settle();
      DSC_ASSERT_OK(cuda::where(cond.dev(), x.dev(), y.dev(), out.dev()));
      expectSameBits(out, std::string("where ") + dtypeName(dt) + " " +
                              str(c.cond) + str(c.x) + str(c.y));
    }
  }
  DevTensor f(DType::F32, {3}), o(DType::F32, {3}), i(DType::I32, {3});
  expectSameError(cpu::where(f.host(), f.host(), f.host(), o.host()),
                  cuda::where(f.dev(), f.dev(), f.dev(), o.dev()), "where");
  DevTensor cb(DType::Bool, {3});
  expectSameError(cpu::where(cb.host(), f.host(), i.host(), o.host()),
                  cuda::where(cb.dev(), f.dev(), i.dev(), o.dev()), "where");
  DevTensor f4(DType::F32, {4});
  expectSameError(cpu::where(cb.host(), f.host(), f4.host(), o.host()),
                  cuda::where(cb.dev(), f.dev(), f4.dev(), o.dev()), "where");
}

/// Values that probe every cast: fractions either side of zero, halfway
/// cases of f16 and bf16 rounding, f16 overflow and subnormals, integer
/// wrap-around, values beyond int64, and NaN.
std::vector<double> castProbe(DType from) {
  if (from == DType::Bool)
    return {0, 1, 1, 0};
  if (!isFloat(from)) { // within the source dtype's range
    double lo = from == DType::I8    ? -128
                : from == DType::U8  ? 0
                : from == DType::I32 ? -2147483648.0
                                     : -1e18;
    double hi = from == DType::I8    ? 127
                : from == DType::U8  ? 255
                : from == DType::I32 ? 2147483647.0
                                     : 1e18;
    std::vector<double> v;
    for (double x : {0.0,    1.0,     -1.0,  127.0,      128.0,
                     -128.0, -129.0,  255.0, 256.0,      300.0,
                     -300.0, 65535.0, 1e6,   -1e6,       3e9,
                     -3e9,   1e15,    -7.0,  16777217.0, 9007199254740993.0,
                     lo,     hi})
      if (x >= lo && x <= hi)
        v.push_back(x);
    return v;
  }
  std::vector<double> v = {0.0,
                           -0.0,
                           0.49,
                           -0.5,
                           1.5,
                           -2.5,
                           3.7,
                           -3.7,
                           127.9,
                           -128.6,
                           255.9,
                           300.7,
                           1.0 + std::ldexp(1.0, -11),     // f16 tie to even
                           1.0 + 3 * std::ldexp(1.0, -11), // f16 tie up
                           1.0 + std::ldexp(1.0, -8),      // bf16 tie to even
                           1.0 + 3 * std::ldexp(1.0, -8),  // bf16 tie up
                           65504,
                           65519.99,
                           65520,
                           70000,
                           std::ldexp(1.0, -24),     // smallest f16
                           std::ldexp(1.0, -25),     // ties to 0
                           3 * std::ldexp(1.0, -25), // ties to 2^-23
                           1e-30,
                           1e10,
                           -1e10,
                           3e19,
                           -3e19,
                           1.0 / 3,
                           std::numeric_limits<double>::quiet_NaN()};
  return v;
}

TEST(CudaElementwise, CastEveryPair) {
  DSC_REQUIRE_GPU();
  for (DType from : kAll) {
    std::vector<double> probe = castProbe(from);
    int64_t n = static_cast<int64_t>(probe.size());
    DevTensor x(from, {n});
    x.values(probe);
    for (DType to : kAll) {
      DevTensor y(to, {n});
      DSC_ASSERT_OK(cpu::cast(x.host(), y.host()));
      settle();
      DSC_ASSERT_OK(cuda::cast(x.dev(), y.dev()));
      expectSameBits(y, std::string("cast ") + dtypeName(from) + " -> " +
                            dtypeName(to));
    }
  }
}

TEST(CudaElementwise, CastLargeAndScalarAndErrors) {
  DSC_REQUIRE_GPU();
  // 3000 elements take the vectorized f32 <-> 16-bit kernel, 3003 the
  // element-wise one: the same bits either way.
  for (int64_t cols : {1000, 1001})
    for (DType to : {DType::F16, DType::BF16, DType::F64, DType::I32}) {
      DevTensor x(DType::F32, {3, cols}), y(to, {3, cols});
      x.random(-70000, 70000, 51);
      DSC_ASSERT_OK(cpu::cast(x.host(), y.host()));
      settle();
      DSC_ASSERT_OK(cuda::cast(x.dev(), y.dev()));
      expectSameBits(y, std::string("cast f32 -> ") + dtypeName(to));
      // And back.
      DevTensor z(DType::F32, {3, cols});
      DSC_ASSERT_OK(cpu::cast(y.host(), z.host()));
      settle();
      DSC_ASSERT_OK(cuda::cast(y.dev(), z.dev()));
      expectSameBits(z, std::string("cast ") + dtypeName(to) + " -> f32");
    }
  DevTensor s(DType::F64, {}), t(DType::BF16, {});
  s.values({2.71828});
  DSC_ASSERT_OK(cpu::cast(s.host(), t.host()));
  settle();
  DSC_ASSERT_OK(cuda::cast(s.dev(), t.dev()));
  expectSameBits(t, "scalar cast");
  // Same dtype: a copy.
  DevTensor a(DType::I64, {17}), b(DType::I64, {17});
  a.random(-50, 50, 52);
  DSC_ASSERT_OK(cpu::cast(a.host(), b.host()));
  settle();
  DSC_ASSERT_OK(cuda::cast(a.dev(), b.dev()));
  expectSameBits(b, "cast i64 -> i64");
  DevTensor c(DType::F32, {16});
  expectSameError(cpu::cast(a.host(), c.host()), cuda::cast(a.dev(), c.dev()),
                  "cast");
}

TEST(CudaElementwise, FillEveryDtype) {
  DSC_REQUIRE_GPU();
  const double values[] = {
      0,    3.7,    -2.5,
      1e10, -300.5, 65520,
      1e-8, -0.0,   std::numeric_limits<double>::quiet_NaN()};
  for (DType dt : kAll) {
    for (double v : values) {
      DevTensor out(dt, {3, 67});
      DSC_ASSERT_OK(cpu::fill(out.host(), v));
      settle();
      DSC_ASSERT_OK(cuda::fill(out.dev(), v));
      expectSameBits(out, std::string("fill ") + dtypeName(dt) + " " +
                              std::to_string(v));
    }
  }
  DevTensor s(DType::F16, {});
  DSC_ASSERT_OK(cpu::fill(s.host(), 0.1));
  settle();
  DSC_ASSERT_OK(cuda::fill(s.dev(), 0.1));
  expectSameBits(s, "scalar fill");
  Tensor absent = Tensor::of(nullptr, DType::F32, {2});
  expectSameError(cpu::fill(absent, 1), cuda::fill(absent, 1), "fill");
}

//===----------------------------------------------------------------------===//
// Dropout, trilu
//===----------------------------------------------------------------------===//

TEST(CudaElementwise, DropoutMatchesTheCpuMaskBitForBit) {
  DSC_REQUIRE_GPU();
  const uint64_t seeds[] = {0, 42, cpu::dropoutSeed(7, 3, 1, 12)};
  for (DType dt : {DType::F32, DType::F64}) {
    for (double ratio : {0.0, 0.1, 0.5, 1.0}) {
      for (uint64_t seed : seeds) {
        for (bool withMask : {true, false}) {
          DevTensor x(dt, {9, 131}), y(dt, {9, 131}), m(DType::Bool, {9, 131});
          x.random(-2, 2, 61);
          Tensor mh = withMask ? m.host() : Tensor();
          Tensor md = withMask ? m.dev() : Tensor();
          DSC_ASSERT_OK(cpu::dropout(x.host(), ratio, seed, y.host(), mh));
          settle();
          DSC_ASSERT_OK(cuda::dropout(x.dev(), ratio, seed, y.dev(), md));
          std::string what = std::string("dropout ") + dtypeName(dt) + " " +
                             std::to_string(ratio) + " seed " +
                             std::to_string(seed);
          expectSameBits(y, what);
          if (withMask)
            expectSameBits(m, what + " mask");
        }
      }
    }
  }
}

TEST(CudaElementwise, DropoutErrorsAreTheCpus) {
  DSC_REQUIRE_GPU();
  DevTensor x(DType::F32, {4}), y(DType::F32, {4}), m(DType::Bool, {4});
  DevTensor mf(DType::F32, {4}), y5(DType::F32, {5}), h(DType::F16, {4});
  DevTensor yd(DType::F64, {4});
  expectSameError(cpu::dropout(x.host(), 1.5, 1, y.host(), m.host()),
                  cuda::dropout(x.dev(), 1.5, 1, y.dev(), m.dev()), "dropout");
  expectSameError(cpu::dropout(x.host(), 0.5, 1, y.host(), mf.host()),
                  cuda::dropout(x.dev(), 0.5, 1, y.dev(), mf.dev()), "dropout");
  expectSameError(cpu::dropout(x.host(), 0.5, 1, y5.host(), m.host()),
                  cuda::dropout(x.dev(), 0.5, 1, y5.dev(), m.dev()), "dropout");
  expectSameError(cpu::dropout(h.host(), 0.5, 1, h.host(), m.host()),
                  cuda::dropout(h.dev(), 0.5, 1, h.dev(), m.dev()), "dropout");
  expectSameError(cpu::dropout(x.host(), 0.5, 1, yd.host(), m.host()),
                  cuda::dropout(x.dev(), 0.5, 1, yd.dev(), m.dev()), "dropout");
}

TEST(CudaElementwise, TriluBothTriangles) {
  DSC_REQUIRE_GPU();
  const Shape shapes[] = {{2, 3, 4, 5}, {5, 3}, {3, 6}, {1, 1}};
  for (const Shape &s : shapes)
    for (DType dt : {DType::F32, DType::I64, DType::Bool, DType::F16})
      for (bool upper : {true, false})
        for (int64_t k : {-100, -2, -1, 0, 1, 3, 100}) {
          DevTensor x(dt, s), y(dt, s);
          x.random(1, 9, 71);
          DSC_ASSERT_OK(cpu::trilu(x.host(), upper, k, y.host()));
          settle();
          DSC_ASSERT_OK(cuda::trilu(x.dev(), upper, k, y.dev()));
          expectSameBits(y, std::string("trilu ") + dtypeName(dt) + str(s) +
                                (upper ? " upper " : " lower ") +
                                std::to_string(k));
        }
  DevTensor v(DType::F32, {4}), w(DType::F32, {4});
  expectSameError(cpu::trilu(v.host(), true, 0, w.host()),
                  cuda::trilu(v.dev(), true, 0, w.dev()), "trilu");
  DevTensor m(DType::F32, {2, 2}), mi(DType::I32, {2, 2});
  expectSameError(cpu::trilu(m.host(), true, 0, mi.host()),
                  cuda::trilu(m.dev(), true, 0, mi.dev()), "trilu");
}

TEST(CudaElementwise, CumSumMatchesTheCpuBitForBit) {
  DSC_REQUIRE_GPU();
  const Shape shapes[] = {{2, 3, 4}, {4, 2048}, {1000}, {3, 1, 5}};
  for (const Shape &s : shapes)
    for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64})
      for (int64_t axis = 0; axis < (int64_t)s.size(); ++axis)
        for (bool exclusive : {false, true})
          for (bool reverse : {false, true}) {
            DevTensor x(dt, s), y(dt, s);
            x.random(-3, 9, 73);
            DSC_ASSERT_OK(
                cpu::cumsum(x.host(), axis, exclusive, reverse, y.host()));
            settle();
            DSC_ASSERT_OK(
                cuda::cumsum(x.dev(), axis, exclusive, reverse, y.dev()));
            expectSameBits(y, std::string("cumsum ") + dtypeName(dt) + str(s) +
                                  " axis " + std::to_string(axis) +
                                  (exclusive ? " exclusive" : "") +
                                  (reverse ? " reverse" : ""));
          }
  DevTensor h(DType::F16, {4}), h2(DType::F16, {4});
  expectSameError(cpu::cumsum(h.host(), 0, false, false, h2.host()),
                  cuda::cumsum(h.dev(), 0, false, false, h2.dev()), "cumsum");
  DevTensor v(DType::F32, {4}), w(DType::F32, {4});
  expectSameError(cpu::cumsum(v.host(), 1, false, false, w.host()),
                  cuda::cumsum(v.dev(), 1, false, false, w.dev()), "cumsum");
}

//===----------------------------------------------------------------------===//
// Zero elements
//===----------------------------------------------------------------------===//

TEST(CudaElementwise, ZeroElementsAreOkWithoutLaunching) {
  DSC_REQUIRE_GPU();
  DevTensor e(DType::F32, {0, 3}), e2(DType::F32, {0, 3}), r(DType::F32, {3});
  DevTensor eb(DType::Bool, {0, 3}), eh(DType::F16, {0, 3});
  DevTensor ei(DType::I32, {0, 3}), ri(DType::I32, {3});
  ri.values({1, 2, 3});
  settle();
  DSC_ASSERT_OK(cuda::unary(UnaryOp::Exp, e.dev(), e2.dev()));
  DSC_ASSERT_OK(cuda::unary(UnaryOp::Not, eb.dev(), eb.dev()));
  DSC_ASSERT_OK(cuda::leakyRelu(e.dev(), 0.1, e2.dev()));
  DSC_ASSERT_OK(cuda::gelu(e.dev(), true, e2.dev()));
  DSC_ASSERT_OK(cuda::clip(e.dev(), 0.0, 1.0, e2.dev()));
  DSC_ASSERT_OK(cuda::binary(BinaryOp::Add, e.dev(), r.dev(), e2.dev()));
  DSC_ASSERT_OK(cuda::binary(BinaryOp::Less, e.dev(), r.dev(), eb.dev()));
  DSC_ASSERT_OK(cuda::binary(BinaryOp::Div, ei.dev(), ri.dev(), ei.dev()));
  DSC_ASSERT_OK(cuda::where(eb.dev(), e.dev(), r.dev(), e2.dev()));
  DSC_ASSERT_OK(cuda::cast(e.dev(), eh.dev()));
  DSC_ASSERT_OK(cuda::fill(e.dev(), 2.0));
  DSC_ASSERT_OK(cuda::dropout(e.dev(), 0.5, 3, e2.dev(), eb.dev()));
  DevTensor t(DType::F32, {2, 0, 3});
  DSC_ASSERT_OK(cuda::trilu(t.dev(), true, 0, t.dev()));
  // A fill of an absent view with no elements is fine, as on the CPU.
  DSC_ASSERT_OK(cuda::fill(Tensor::of(nullptr, DType::F32, {0}), 1));
  settle();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

} // namespace
} // namespace dsc::cuda::test
