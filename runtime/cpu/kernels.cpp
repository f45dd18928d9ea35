//===- kernels.cpp - CPU kernels: elementwise, cast, reductions -----------===//
//
// The other op families live beside this file: linalg.cpp (matmul, gemm),
// conv_pool.cpp, norm_loss.cpp (normalization, softmax, losses, dropout) and
// data_movement.cpp.
//
//===----------------------------------------------------------------------===//

#include "cpu/kernels.h"
#include "cpu/checks_math.h"
#include "cpu/gelu_math.h"
#include "cpu/kernel_util.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace dsc::cpu {

using namespace detail;

const char *detail::unaryName(UnaryOp op) {
  static const char *names[] = {"neg",     "abs",        "exp",      "log",
                                "sqrt",    "reciprocal", "tanh",     "erf",
                                "sigmoid", "relu",       "floor",    "ceil",
                                "sin",     "cos",        "softplus", "not"};
  return names[static_cast<int>(op)];
}

const char *detail::binaryName(BinaryOp op) {
  static const char *names[] = {"add",        "sub",     "mul",          "div",
                                "pow",        "max",     "min",          "and",
                                "or",         "xor",     "equal",        "less",
                                "less_equal", "greater", "greater_equal"};
  return names[static_cast<int>(op)];
}

namespace {

template <typename T> T sigmoidOf(T x) {
  if (x >= 0)
    return T(1) / (T(1) + std::exp(-x));
  T e = std::exp(x);
  return e / (T(1) + e);
}

template <typename T> T softplusOf(T x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

template <typename T> T applyUnary(UnaryOp op, T x) {
  switch (op) {
  case UnaryOp::Neg:
    return -x;
  case UnaryOp::Abs:
    return std::abs(x);
  case UnaryOp::Exp:
    return std::exp(x);
  case UnaryOp::Log:
    return std::log(x);
  case UnaryOp::Sqrt:
    return std::sqrt(x);
  case UnaryOp::Reciprocal:
    return T(1) / x;
  case UnaryOp::Tanh:
    return std::tanh(x);
  case UnaryOp::Erf:
    return std::erf(x);
  case UnaryOp::Sigmoid:
    return sigmoidOf(x);
  case UnaryOp::Relu:
    return x > 0 ? x : T(0);
  case UnaryOp::Floor:
    return std::floor(x);
  case UnaryOp::Ceil:
    return std::ceil(x);
  case UnaryOp::Sin:
    return std::sin(x);
  case UnaryOp::Cos:
    return std::cos(x);
  case UnaryOp::Softplus:
    return softplusOf(x);
  case UnaryOp::Not:
    break;
  }
  return x;
}

template <typename T> T unaryDerivative(UnaryOp op, T x) {
  switch (op) {
  case UnaryOp::Neg:
    return T(-1);
  case UnaryOp::Abs:
    return x > 0 ? T(1) : x < 0 ? T(-1) : T(0);
  case UnaryOp::Exp:
    return std::exp(x);
  case UnaryOp::Log:
    return T(1) / x;
  case UnaryOp::Sqrt:
    return T(0.5) / std::sqrt(x);
  case UnaryOp::Reciprocal:
    return T(-1) / (x * x);
  case UnaryOp::Tanh: {
    T t = std::tanh(x);
    return T(1) - t * t;
  }
  case UnaryOp::Erf:
    return T(1.1283791670955126) * std::exp(-x * x); // 2/sqrt(pi)
  case UnaryOp::Sigmoid: {
    T s = sigmoidOf(x);
    return s * (T(1) - s);
  }
  case UnaryOp::Relu:
    return x > 0 ? T(1) : T(0);
  case UnaryOp::Floor:
  case UnaryOp::Ceil:
  case UnaryOp::Not:
    return T(0);
  case UnaryOp::Sin:
    return std::cos(x);
  case UnaryOp::Cos:
    return -std::sin(x);
  case UnaryOp::Softplus:
    return sigmoidOf(x);
  }
  return T(0);
}

/// Checks an elementwise call: float input, out of the same dtype and shape.
Status checkSameFloat(const Call &call, const Tensor &in, const Tensor &out) {
  if (!validRank(in) || !validRank(out))
    return call.fail("rank above 8");
  if (!isFloat(in.dtype) || (in.dtype != DType::F32 && in.dtype != DType::F64))
    return call.fail("expects f32 or f64", StatusCode::Unimplemented);
  if (out.dtype != in.dtype || !sameShape(in, out))
    return call.fail("result must have the input's dtype and shape");
  if (!in.present() || !out.present())
    return call.fail("missing data");
  return Status();
}

template <typename T, typename Fn>
void mapInto(const Tensor &in, const Tensor &out, Fn fn) {
  const T *x = in.as<T>();
  T *y = out.as<T>();
  int64_t n = in.numel();
  for (int64_t i = 0; i < n; ++i)
    y[i] = fn(x[i]);
}

template <typename T, typename Fn>
void zipInto(const Tensor &a, const Tensor &b, const Tensor &out, Fn fn) {
  const T *x = a.as<T>();
  const T *g = b.as<T>();
  T *y = out.as<T>();
  int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i)
    y[i] = fn(x[i], g[i]);
}

/// out[i] = fn(lhs[bcast i], rhs[bcast i]) over out's shape.
template <typename T, typename R, typename Fn>
void broadcastApply(const Tensor &lhs, const Tensor &rhs, const Tensor &out,
                    Fn fn) {
  Walker<2> w{out.rank, out.shape, {}};
  broadcastStrides(lhs, out, w.strides[0]);
  broadcastStrides(rhs, out, w.strides[1]);
  const T *a = lhs.as<T>();
  const T *b = rhs.as<T>();
  R *y = out.as<R>();
  int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i, w.next())
    y[i] = fn(a[w.off[0]], b[w.off[1]]);
}

template <typename T>
Status binaryTyped(const Call &call, BinaryOp op, const Tensor &lhs,
                   const Tensor &rhs, const Tensor &out) {
  switch (op) {
  case BinaryOp::Equal:
    broadcastApply<T, bool>(lhs, rhs, out, [](T a, T b) { return a == b; });
    return Status();
  case BinaryOp::Less:
    broadcastApply<T, bool>(lhs, rhs, out, [](T a, T b) { return a < b; });
    return Status();
  case BinaryOp::LessEqual:
    broadcastApply<T, bool>(lhs, rhs, out, [](T a, T b) { return a <= b; });
    return Status();
  case BinaryOp::Greater:
    broadcastApply<T, bool>(lhs, rhs, out, [](T a, T b) { return a > b; });
    return Status();
  case BinaryOp::GreaterEqual:
    broadcastApply<T, bool>(lhs, rhs, out, [](T a, T b) { return a >= b; });
    return Status();
  default:
    break;
  }
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
    case BinaryOp::And:
      broadcastApply<T, T>(lhs, rhs, out, [](T a, T b) { return a && b; });
      return Status();
    case BinaryOp::Or:
      broadcastApply<T, T>(lhs, rhs, out, [](T a, T b) { return a || b; });
      return Status();
    case BinaryOp::Xor:
      broadcastApply<T, T>(lhs, rhs, out, [](T a, T b) { return a != b; });
      return Status();
    default:
      return call.fail("bool operands take only and/or/xor and comparisons");
    }
  } else {
    switch (op) {
    case BinaryOp::Add:
      broadcastApply<T, T>(lhs, rhs, out, [](T a, T b) { return T(a + b); });
      return Status();
    case BinaryOp::Sub:
      broadcastApply<T, T>(lhs, rhs, out, [](T a, T b) { return T(a - b); });
      return Status();
    case BinaryOp::Mul:
      broadcastApply<T, T>(lhs, rhs, out, [](T a, T b) { return T(a * b); });
      return Status();
    case BinaryOp::Div:
      if constexpr (std::is_integral_v<T>) {
        const T *b = rhs.as<T>();
        for (int64_t i = 0, n = rhs.numel(); i < n; ++i)
          if (b[i] == 0)
            return call.fail("integer division by zero",
                             StatusCode::OutOfRange);
      }
      broadcastApply<T, T>(lhs, rhs, out, [](T a, T b) { return T(a / b); });
      return Status();
    case BinaryOp::Pow:
      if constexpr (std::is_floating_point_v<T>)
        broadcastApply<T, T>(lhs, rhs, out,
                             [](T a, T b) { return std::pow(a, b); });
      else
        broadcastApply<T, T>(lhs, rhs, out, [](T a, T b) {
          return static_cast<T>(
              std::pow(static_cast<double>(a), static_cast<double>(b)));
        });
      return Status();
    case BinaryOp::Max:
      broadcastApply<T, T>(lhs, rhs, out, [](T a, T b) {
        if constexpr (std::is_floating_point_v<T>)
          if (std::isnan(a) || std::isnan(b))
            return a + b;
        return a > b ? a : b;
      });
      return Status();
    case BinaryOp::Min:
      broadcastApply<T, T>(lhs, rhs, out, [](T a, T b) {
        if constexpr (std::is_floating_point_v<T>)
          if (std::isnan(a) || std::isnan(b))
            return a + b;
        return a < b ? a : b;
      });
      return Status();
    default:
      return call.fail("and/or/xor take bool operands");
    }
  }
}

/// Calls fn(T{}) for the arithmetic dtypes binary and reduce accept.
template <typename Fn> bool dispatchArith(DType dtype, Fn &&fn) {
  switch (dtype) {
  case DType::F32:
    fn(float());
    return true;
  case DType::F64:
    fn(double());
    return true;
  case DType::I64:
    fn(int64_t());
    return true;
  case DType::I32:
    fn(int32_t());
    return true;
  case DType::I8:
    fn(int8_t());
    return true;
  case DType::U8:
    fn(uint8_t());
    return true;
  default:
    return false;
  }
}

/// The dtypes dispatchArith takes.
bool isArith(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::I64 ||
         t == DType::I32 || t == DType::I8 || t == DType::U8;
}

} // namespace

//===----------------------------------------------------------------------===//
// Unary, activations, clip
//===----------------------------------------------------------------------===//

Status detail::checkUnary(Call &call, UnaryOp op, const Tensor &input,
                          const Tensor &out, UnaryPath &path) {
  call.arg("input", input).arg("out", out);
  if (op == UnaryOp::Not) {
    path = UnaryPath::Not;
    if (input.dtype != DType::Bool || out.dtype != DType::Bool ||
        !sameShape(input, out))
      return call.fail("expects bool input and result of the same shape");
    return Status();
  }
  if ((op == UnaryOp::Neg || op == UnaryOp::Abs) &&
      (input.dtype == DType::I64 || input.dtype == DType::I32 ||
       input.dtype == DType::I8)) {
    path = UnaryPath::SignedInt;
    if (out.dtype != input.dtype || !sameShape(input, out))
      return call.fail("result must have the input's dtype and shape");
    return Status();
  }
  path = UnaryPath::Float;
  return checkSameFloat(call, input, out);
}

Status unary(UnaryOp op, const Tensor &input, const Tensor &out) {
  Call call(unaryName(op));
  UnaryPath path;
  if (Status st = checkUnary(call, op, input, out, path); !st.ok())
    return st;
  if (path == UnaryPath::Not) {
    const bool *x = input.as<bool>();
    bool *y = out.as<bool>();
    for (int64_t i = 0, n = input.numel(); i < n; ++i)
      y[i] = !x[i];
    return Status();
  }
  if (path == UnaryPath::SignedInt) {
    dispatchArith(input.dtype, [&](auto tag) {
      using T = decltype(tag);
      mapInto<T>(input, out, [op](T x) {
        return static_cast<T>(op == UnaryOp::Neg ? -x : (x < 0 ? -x : x));
      });
    });
    return Status();
  }
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    mapInto<T>(input, out, [op](T x) { return applyUnary(op, x); });
  });
  return Status();
}

Status unaryBackward(UnaryOp op, const Tensor &input, const Tensor &gradOut,
                     const Tensor &gradIn) {
  Call call("unary_backward");
  call.raw("op", unaryName(op))
      .arg("input", input)
      .arg("grad_out", gradOut)
      .arg("grad_in", gradIn);
  if (op == UnaryOp::Not)
    return call.fail("not has no gradient");
  if (Status st = checkSameFloat(call, input, gradIn); !st.ok())
    return st;
  if (!sameShape(input, gradOut) || gradOut.dtype != input.dtype)
    return call.fail("grad_out must have the input's dtype and shape");
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    zipInto<T>(input, gradOut, gradIn,
               [op](T x, T g) { return g * unaryDerivative(op, x); });
  });
  return Status();
}

Status detail::checkLeakyRelu(Call &call, const Tensor &input, double alpha,
                              const Tensor &out) {
  call.arg("input", input).raw("alpha", std::to_string(alpha)).arg("out", out);
  return checkSameFloat(call, input, out);
}

Status leakyRelu(const Tensor &input, double alpha, const Tensor &out) {
  Call call("leaky_relu");
  if (Status st = checkLeakyRelu(call, input, alpha, out); !st.ok())
    return st;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    mapInto<T>(input, out, [a = T(alpha)](T x) { return x > 0 ? x : a * x; });
  });
  return Status();
}

Status leakyReluBackward(const Tensor &input, double alpha,
                         const Tensor &gradOut, const Tensor &gradIn) {
  Call call("leaky_relu_backward");
  call.arg("input", input).arg("grad_out", gradOut).arg("grad_in", gradIn);
  if (Status st = checkSameFloat(call, input, gradIn); !st.ok())
    return st;
  if (!sameShape(input, gradOut) || gradOut.dtype != input.dtype)
    return call.fail("grad_out must have the input's dtype and shape");
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    zipInto<T>(input, gradOut, gradIn,
               [a = T(alpha)](T x, T g) { return x > 0 ? g : a * g; });
  });
  return Status();
}

Status detail::checkGelu(Call &call, const Tensor &input, const Tensor &out) {
  call.arg("input", input).arg("out", out);
  return checkSameFloat(call, input, out);
}

Status gelu(const Tensor &input, bool tanhApproximation, const Tensor &out) {
  Call call("gelu");
  if (Status st = checkGelu(call, input, out); !st.ok())
    return st;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    mapInto<T>(input, out, [tanhApproximation](T x) {
      return geluOf(x, tanhApproximation);
    });
  });
  return Status();
}

Status detail::checkSwiglu(Call &call, const Tensor &gate, const Tensor &up,
                           const Tensor &out) {
  call.arg("gate", gate).arg("up", up).arg("out", out);
  if (Status st = checkSameFloat(call, gate, out); !st.ok())
    return st;
  if (up.dtype != gate.dtype || !sameShape(gate, up))
    return call.fail("up must have gate's dtype and shape");
  if (!up.present())
    return call.fail("missing data");
  return Status();
}

Status swiglu(const Tensor &gate, const Tensor &up, const Tensor &out) {
  Call call("swiglu");
  if (Status st = checkSwiglu(call, gate, up, out); !st.ok())
    return st;
  dispatchFloat(gate.dtype, [&](auto tag) {
    using T = decltype(tag);
    zipInto<T>(gate, up, out, [](T x, T u) { return x * sigmoidOf(x) * u; });
  });
  return Status();
}

Status geluBackward(const Tensor &input, bool tanhApproximation,
                    const Tensor &gradOut, const Tensor &gradIn) {
  Call call("gelu_backward");
  call.arg("input", input).arg("grad_out", gradOut).arg("grad_in", gradIn);
  if (Status st = checkSameFloat(call, input, gradIn); !st.ok())
    return st;
  if (!sameShape(input, gradOut) || gradOut.dtype != input.dtype)
    return call.fail("grad_out must have the input's dtype and shape");
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    zipInto<T>(input, gradOut, gradIn, [tanhApproximation](T x, T g) {
      return g * geluDerivative(x, tanhApproximation);
    });
  });
  return Status();
}

Status detail::checkClip(Call &call, const Tensor &input,
                         std::optional<double> min, std::optional<double> max,
                         const Tensor &out, double &lo, double &hi) {
  call.arg("input", input).arg("out", out);
  if (out.dtype != input.dtype || !sameShape(input, out))
    return call.fail("result must have the input's dtype and shape");
  lo = min.value_or(-std::numeric_limits<double>::infinity());
  hi = max.value_or(std::numeric_limits<double>::infinity());
  if (!isArith(input.dtype))
    return call.fail("unsupported dtype", StatusCode::Unimplemented);
  return Status();
}

Status clip(const Tensor &input, std::optional<double> min,
            std::optional<double> max, const Tensor &out) {
  Call call("clip");
  double lo, hi;
  if (Status st = checkClip(call, input, min, max, out, lo, hi); !st.ok())
    return st;
  dispatchArith(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    mapInto<T>(input, out, [lo, hi](T x) {
      double v = static_cast<double>(x);
      if (v != v)
        return x; // nan passes through
      return static_cast<T>(v < lo ? lo : v > hi ? hi : v);
    });
  });
  return Status();
}

Status clipBackward(const Tensor &input, std::optional<double> min,
                    std::optional<double> max, const Tensor &gradOut,
                    const Tensor &gradIn) {
  Call call("clip_backward");
  call.arg("input", input).arg("grad_out", gradOut).arg("grad_in", gradIn);
  if (Status st = checkSameFloat(call, input, gradIn); !st.ok())
    return st;
  if (!sameShape(input, gradOut) || gradOut.dtype != input.dtype)
    return call.fail("grad_out must have the input's dtype and shape");
  double lo = min.value_or(-std::numeric_limits<double>::infinity());
  double hi = max.value_or(std::numeric_limits<double>::infinity());
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = decltype(tag);
    zipInto<T>(input, gradOut, gradIn,
               [lo, hi](T x, T g) { return (x >= lo && x <= hi) ? g : T(0); });
  });
  return Status();
}

//===----------------------------------------------------------------------===//
// Binary, where, cast
//===----------------------------------------------------------------------===//

static bool isCompare(BinaryOp op) {
  return op == BinaryOp::Equal || op == BinaryOp::Less ||
         op == BinaryOp::LessEqual || op == BinaryOp::Greater ||
         op == BinaryOp::GreaterEqual;
}

Status detail::checkBinary(Call &call, BinaryOp op, const Tensor &lhs,
                           const Tensor &rhs, const Tensor &out) {
  call.arg("lhs", lhs).arg("rhs", rhs).arg("out", out);
  if (!validRank(lhs) || !validRank(rhs) || !validRank(out))
    return call.fail("rank above 8");
  if (lhs.dtype != rhs.dtype)
    return call.fail("operand dtypes differ");
  std::vector<int64_t> shape;
  if (!broadcastShape(lhs, rhs, shape))
    return call.fail("operand shapes do not broadcast");
  if (!shapeIs(out, shape))
    return call.fail("result shape must be " + describe(I64s(shape)));
  DType want = isCompare(op) ? DType::Bool : lhs.dtype;
  if (out.dtype != want)
    return call.fail(std::string("result dtype must be ") + dtypeName(want));
  bool logical =
      op == BinaryOp::And || op == BinaryOp::Or || op == BinaryOp::Xor;
  if (lhs.dtype == DType::Bool) {
    if (!isCompare(op) && !logical)
      return call.fail("bool operands take only and/or/xor and comparisons");
    return Status();
  }
  if (!isArith(lhs.dtype))
    return call.fail("unsupported dtype", StatusCode::Unimplemented);
  if (logical)
    return call.fail("and/or/xor take bool operands");
  return Status();
}

Status binary(BinaryOp op, const Tensor &lhs, const Tensor &rhs,
              const Tensor &out) {
  Call call(binaryName(op));
  if (Status st = checkBinary(call, op, lhs, rhs, out); !st.ok())
    return st;
  if (lhs.dtype == DType::Bool)
    return binaryTyped<bool>(call, op, lhs, rhs, out);
  Status st; // integer division by zero
  dispatchArith(lhs.dtype, [&](auto tag) {
    st = binaryTyped<decltype(tag)>(call, op, lhs, rhs, out);
  });
  return st;
}

Status detail::checkWhere(Call &call, const Tensor &cond, const Tensor &x,
                          const Tensor &y, const Tensor &out) {
  call.arg("cond", cond).arg("x", x).arg("y", y).arg("out", out);
  if (!validRank(cond) || !validRank(x) || !validRank(y) || !validRank(out))
    return call.fail("rank above 8");
  if (cond.dtype != DType::Bool)
    return call.fail("cond must be bool");
  if (x.dtype != y.dtype || out.dtype != x.dtype)
    return call.fail("x, y and the result must share a dtype");
  std::vector<int64_t> xy, all;
  if (!broadcastShape(x, y, xy))
    return call.fail("shapes do not broadcast");
  Tensor tmp = Tensor::of(nullptr, x.dtype, xy);
  if (!broadcastShape(cond, tmp, all) || !shapeIs(out, all))
    return call.fail("result shape must be the broadcast of all three");
  return Status();
}

Status where(const Tensor &cond, const Tensor &x, const Tensor &y,
             const Tensor &out) {
  Call call("where");
  if (Status st = checkWhere(call, cond, x, y, out); !st.ok())
    return st;
  Walker<3> w{out.rank, out.shape, {}};
  broadcastStrides(cond, out, w.strides[0]);
  broadcastStrides(x, out, w.strides[1]);
  broadcastStrides(y, out, w.strides[2]);
  size_t es = dtypeSize(out.dtype);
  const bool *c = cond.as<bool>();
  const char *px = x.as<char>(), *py = y.as<char>();
  char *po = out.as<char>();
  // memmove: out may be x's or y's own storage (an fp16 step's
  // where(finite, new, old) computed in place of old).
  for (int64_t i = 0, n = out.numel(); i < n; ++i, w.next())
    std::memmove(po + i * es,
                 c[w.off[0]] ? px + w.off[1] * es : py + w.off[2] * es, es);
  return Status();
}

namespace detail {

double loadAsDouble(const void *p, DType dt, int64_t i) {
  switch (dt) {
  case DType::F32:
    return static_cast<const float *>(p)[i];
  case DType::F64:
    return static_cast<const double *>(p)[i];
  case DType::F16:
    return halfToFloat(static_cast<const uint16_t *>(p)[i]);
  case DType::BF16:
    return bfloat16ToFloat(static_cast<const uint16_t *>(p)[i]);
  case DType::I64:
    return static_cast<double>(static_cast<const int64_t *>(p)[i]);
  case DType::I32:
    return static_cast<const int32_t *>(p)[i];
  case DType::I8:
    return static_cast<const int8_t *>(p)[i];
  case DType::U8:
    return static_cast<const uint8_t *>(p)[i];
  case DType::Bool:
    return static_cast<const bool *>(p)[i] ? 1.0 : 0.0;
  }
  return 0;
}

int64_t loadAsInt(const void *p, DType dt, int64_t i) {
  switch (dt) {
  case DType::I64:
    return static_cast<const int64_t *>(p)[i];
  case DType::I32:
    return static_cast<const int32_t *>(p)[i];
  case DType::I8:
    return static_cast<const int8_t *>(p)[i];
  case DType::U8:
    return static_cast<const uint8_t *>(p)[i];
  case DType::Bool:
    return static_cast<const bool *>(p)[i];
  default:
    return static_cast<int64_t>(loadAsDouble(p, dt, i));
  }
}

void storeInt(void *p, DType dt, int64_t i, int64_t v) {
  switch (dt) {
  case DType::I64:
    static_cast<int64_t *>(p)[i] = v;
    break;
  case DType::I32:
    static_cast<int32_t *>(p)[i] = static_cast<int32_t>(v);
    break;
  case DType::I8:
    static_cast<int8_t *>(p)[i] = static_cast<int8_t>(v);
    break;
  case DType::U8:
    static_cast<uint8_t *>(p)[i] = static_cast<uint8_t>(v);
    break;
  case DType::Bool:
    static_cast<bool *>(p)[i] = v != 0;
    break;
  default:
    break;
  }
}

void storeDouble(void *p, DType dt, int64_t i, double v) {
  switch (dt) {
  case DType::F32:
    static_cast<float *>(p)[i] = static_cast<float>(v);
    break;
  case DType::F64:
    static_cast<double *>(p)[i] = v;
    break;
  case DType::F16:
    static_cast<uint16_t *>(p)[i] = floatToHalf(static_cast<float>(v));
    break;
  case DType::BF16:
    static_cast<uint16_t *>(p)[i] = floatToBfloat16(static_cast<float>(v));
    break;
  case DType::Bool:
    static_cast<bool *>(p)[i] = v != 0;
    break;
  default: // float to int truncates; out-of-range values are clamped
    if (v != v)
      v = 0;
    v = std::trunc(v);
    v = std::max(v, -9.2233720368547758e18);
    v = std::min(v, 9.2233720368547748e18);
    storeInt(p, dt, i, static_cast<int64_t>(v));
    break;
  }
}

} // namespace detail

Status detail::checkCast(Call &call, const Tensor &input, const Tensor &out) {
  call.arg("input", input).arg("out", out);
  if (!validRank(input) || !sameShape(input, out))
    return call.fail("result must have the input's shape");
  return Status();
}

Status cast(const Tensor &input, const Tensor &out) {
  Call call("cast");
  if (Status st = checkCast(call, input, out); !st.ok())
    return st;
  int64_t n = input.numel();
  if (input.dtype == out.dtype) {
    if (input.data != out.data)
      std::memmove(out.data, input.data, input.nbytes());
    return Status();
  }
  bool intToInt = !isFloat(input.dtype) && !isFloat(out.dtype);
  // Every element on its own: contiguous chunks over threads.
  constexpr int64_t kMinChunk = int64_t(1) << 16;
  // f32 -> f16/bf16 directly, so values round once.
  if (input.dtype == DType::F32 &&
      (out.dtype == DType::F16 || out.dtype == DType::BF16)) {
    const float *x = input.as<float>();
    uint16_t *y = out.as<uint16_t>();
    bool half = out.dtype == DType::F16;
    parallelFor(n, 0, kMinChunk, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        y[i] = half ? floatToHalf(x[i]) : floatToBfloat16(x[i]);
    });
    return Status();
  }
  parallelFor(n, 0, kMinChunk, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (intToInt)
        storeInt(out.data, out.dtype, i, loadAsInt(input.data, input.dtype, i));
      else
        storeDouble(out.data, out.dtype, i,
                    loadAsDouble(input.data, input.dtype, i));
    }
  });
  return Status();
}

//===----------------------------------------------------------------------===//
// Broadcast gradients
//===----------------------------------------------------------------------===//

namespace {

/// out (zeroed first) += grad summed over the dims out broadcast along, in
/// grad's row-major order.
template <typename T>
void sumInto(const T *grad, const Tensor &gradShape, const Tensor &out) {
  Walker<1> w{gradShape.rank, gradShape.shape, {}};
  broadcastStrides(out, gradShape, w.strides[0]);
  T *o = out.as<T>();
  std::fill(o, o + out.numel(), T(0));
  for (int64_t i = 0, n = gradShape.numel(); i < n; ++i, w.next())
    o[w.off[0]] += grad[i];
}

} // namespace

Status reduceToShape(const Tensor &grad, const Tensor &out) {
  Call call("reduce_to_shape");
  call.arg("grad", grad).arg("out", out);
  if (!validRank(grad) || !validRank(out))
    return call.fail("rank above 8");
  std::array<int64_t, kMaxRank> s;
  if (!broadcastStrides(out, grad, s))
    return call.fail("result shape does not broadcast to the gradient's");
  if (grad.dtype != out.dtype)
    return call.fail("dtypes differ");
  if (!dispatchFloat(grad.dtype, [&](auto tag) {
        using T = decltype(tag);
        sumInto<T>(grad.as<T>(), grad, out);
      }))
    return call.fail("expects f32 or f64", StatusCode::Unimplemented);
  return Status();
}

Status binaryBackward(BinaryOp op, const Tensor &lhs, const Tensor &rhs,
                      const Tensor &gradOut, const Tensor &gradLhs,
                      const Tensor &gradRhs) {
  Call call("binary_backward");
  call.raw("op", binaryName(op))
      .arg("lhs", lhs)
      .arg("rhs", rhs)
      .arg("grad_out", gradOut)
      .arg("grad_lhs", gradLhs)
      .arg("grad_rhs", gradRhs);
  if (!validRank(lhs) || !validRank(rhs) || !validRank(gradOut))
    return call.fail("rank above 8");
  if (lhs.dtype != rhs.dtype || gradOut.dtype != lhs.dtype ||
      (lhs.dtype != DType::F32 && lhs.dtype != DType::F64))
    return call.fail("expects f32 or f64 operands of one dtype");
  std::vector<int64_t> shape;
  if (!broadcastShape(lhs, rhs, shape) || !shapeIs(gradOut, shape))
    return call.fail("grad_out must have the broadcast shape");
  if ((gradLhs.present() &&
       (!sameShape(gradLhs, lhs) || gradLhs.dtype != lhs.dtype)) ||
      (gradRhs.present() &&
       (!sameShape(gradRhs, rhs) || gradRhs.dtype != rhs.dtype)))
    return call.fail("gradients must have their operands' dtype and shape");
  switch (op) {
  case BinaryOp::Add:
  case BinaryOp::Sub:
  case BinaryOp::Mul:
  case BinaryOp::Div:
  case BinaryOp::Pow:
  case BinaryOp::Max:
  case BinaryOp::Min:
    break;
  default:
    return call.fail("op has no gradient");
  }
  dispatchFloat(lhs.dtype, [&](auto tag) {
    using T = decltype(tag);
    int64_t n = gradOut.numel();
    std::vector<T> da(n), db(n);
    Walker<2> w{gradOut.rank, gradOut.shape, {}};
    broadcastStrides(lhs, gradOut, w.strides[0]);
    broadcastStrides(rhs, gradOut, w.strides[1]);
    const T *a = lhs.as<T>(), *b = rhs.as<T>(), *g = gradOut.as<T>();
    for (int64_t i = 0; i < n; ++i, w.next()) {
      T x = a[w.off[0]], y = b[w.off[1]], gi = g[i];
      switch (op) {
      case BinaryOp::Add:
        da[i] = gi, db[i] = gi;
        break;
      case BinaryOp::Sub:
        da[i] = gi, db[i] = -gi;
        break;
      case BinaryOp::Mul:
        da[i] = gi * y, db[i] = gi * x;
        break;
      case BinaryOp::Div:
        da[i] = gi / y, db[i] = -gi * x / (y * y);
        break;
      case BinaryOp::Pow:
        da[i] = y == T(0) ? T(0) : gi * y * std::pow(x, y - T(1));
        db[i] = x > T(0) ? gi * std::pow(x, y) * std::log(x) : T(0);
        break;
      case BinaryOp::Max:
      case BinaryOp::Min: {
        bool firstWins = op == BinaryOp::Max ? x > y : x < y;
        T wa = x == y ? T(0.5) : firstWins ? T(1) : T(0);
        da[i] = gi * wa, db[i] = gi * (T(1) - wa);
        break;
      }
      default:
        break;
      }
    }
    if (gradLhs.present())
      sumInto<T>(da.data(), gradOut, gradLhs);
    if (gradRhs.present())
      sumInto<T>(db.data(), gradOut, gradRhs);
  });
  return Status();
}

Status whereBackward(const Tensor &cond, const Tensor &gradOut,
                     const Tensor &gradX, const Tensor &gradY) {
  Call call("where_backward");
  call.arg("cond", cond)
      .arg("grad_out", gradOut)
      .arg("grad_x", gradX)
      .arg("grad_y", gradY);
  std::array<int64_t, kMaxRank> s;
  if (cond.dtype != DType::Bool || !broadcastStrides(cond, gradOut, s))
    return call.fail("cond must be bool and broadcast to grad_out");
  for (const Tensor *t : {&gradX, &gradY})
    if (t->present() &&
        (t->dtype != gradOut.dtype || !broadcastStrides(*t, gradOut, s)))
      return call.fail("gradients must broadcast to grad_out, same dtype");
  if (!dispatchFloat(gradOut.dtype, [&](auto tag) {
        using T = decltype(tag);
        int64_t n = gradOut.numel();
        std::vector<T> gx(n), gy(n);
        Walker<1> w{gradOut.rank, gradOut.shape, {}};
        broadcastStrides(cond, gradOut, w.strides[0]);
        const T *g = gradOut.as<T>();
        const bool *c = cond.as<bool>();
        for (int64_t i = 0; i < n; ++i, w.next()) {
          bool take = c[w.off[0]];
          gx[i] = take ? g[i] : T(0);
          gy[i] = take ? T(0) : g[i];
        }
        if (gradX.present())
          sumInto<T>(gx.data(), gradOut, gradX);
        if (gradY.present())
          sumInto<T>(gy.data(), gradOut, gradY);
      }))
    return call.fail("expects f32 or f64", StatusCode::Unimplemented);
  return Status();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

const char *detail::reduceName(ReduceOp op) {
  static const char *names[] = {"reduce_sum", "reduce_mean", "reduce_max",
                                "reduce_min", "reduce_prod"};
  return names[static_cast<int>(op)];
}

namespace {

/// Resolves axes into a mask and checks out's shape; `keptShape` is the
/// input shape with reduced dims set to 1.
Status checkReduceAxes(const Call &call, const Tensor &input, I64s axes,
                       bool keepdims, const Tensor &out,
                       bool (&reduced)[kMaxRank], Tensor &keptShape) {
  if (!validRank(input) || !validRank(out))
    return call.fail("rank above 8");
  std::fill(reduced, reduced + kMaxRank, axes.empty());
  for (int64_t a : axes) {
    if (!normalizeAxis(a, input.rank))
      return call.fail("axis " + std::to_string(a) + " out of range");
    reduced[a] = true;
  }
  keptShape = input;
  std::vector<int64_t> want;
  for (int d = 0; d < input.rank; ++d) {
    if (reduced[d])
      keptShape.shape[d] = 1;
    if (!reduced[d] || keepdims)
      want.push_back(keptShape.shape[d]);
  }
  if (!shapeIs(out, want))
    return call.fail("result shape must be " + describe(I64s(want)));
  return Status();
}

template <typename T> bool isNan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isnan(v);
  else
    return false;
}

template <typename T>
void reduceTyped(ReduceOp op, const Tensor &input, const Tensor &kept, T *out) {
  int64_t m = kept.numel();
  T init = op == ReduceOp::Max    ? (std::numeric_limits<T>::has_infinity
                                         ? -std::numeric_limits<T>::infinity()
                                         : std::numeric_limits<T>::lowest())
           : op == ReduceOp::Min  ? (std::numeric_limits<T>::has_infinity
                                         ? std::numeric_limits<T>::infinity()
                                         : std::numeric_limits<T>::max())
           : op == ReduceOp::Prod ? T(1)
                                  : T(0);
  std::fill(out, out + m, init);
  Walker<1> w{input.rank, input.shape, {}};
  broadcastStrides(kept, input, w.strides[0]);
  const T *x = input.as<T>();
  for (int64_t i = 0, n = input.numel(); i < n; ++i, w.next()) {
    T &acc = out[w.off[0]];
    T v = x[i];
    switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean:
      acc += v;
      break;
    case ReduceOp::Prod:
      acc *= v;
      break;
    case ReduceOp::Max:
      if (v > acc || isNan(v))
        acc = isNan(acc) ? acc : v;
      break;
    case ReduceOp::Min:
      if (v < acc || isNan(v))
        acc = isNan(acc) ? acc : v;
      break;
    }
  }
  if (op == ReduceOp::Mean) {
    int64_t count = m ? input.numel() / m : 0;
    for (int64_t j = 0; j < m; ++j)
      out[j] /= static_cast<T>(count);
  }
}

} // namespace

Status detail::checkReduce(Call &call, ReduceOp op, const Tensor &input,
                           I64s axes, bool keepdims, const Tensor &out,
                           bool (&reduced)[kMaxRank], Tensor &kept) {
  call.arg("input", input).arg("axes", axes).arg("out", out);
  if (Status st =
          checkReduceAxes(call, input, axes, keepdims, out, reduced, kept);
      !st.ok())
    return st;
  // The sum or mean of a 16-bit input's widened values, in f32 (dsc
  // canonicalization's reduce_sum(cast(x : h -> f32)) -> reduce_sum(x)), or
  // f64 (the same step under dsc compile --f64).
  bool half = input.dtype == DType::BF16 || input.dtype == DType::F16;
  if (half && (out.dtype == DType::F32 || out.dtype == DType::F64) &&
      (op == ReduceOp::Sum || op == ReduceOp::Mean))
    return Status();
  if (out.dtype != input.dtype)
    return call.fail("result dtype must be the input's");
  DType dt = input.dtype;
  bool isF = dt == DType::F32 || dt == DType::F64;
  if (!(isF ||
        (op != ReduceOp::Mean && (dt == DType::I64 || dt == DType::I32))))
    return call.fail("unsupported dtype", StatusCode::Unimplemented);
  return Status();
}

Status reduce(ReduceOp op, const Tensor &input, I64s axes, bool keepdims,
              const Tensor &out) {
  Call call(reduceName(op));
  bool reduced[kMaxRank];
  Tensor kept;
  if (Status st =
          checkReduce(call, op, input, axes, keepdims, out, reduced, kept);
      !st.ok())
    return st;
  if (input.dtype == DType::BF16 || input.dtype == DType::F16) {
    // Widened first to the result's type, then reduced: the bits of cast +
    // reduce.
    dispatchFloat(out.dtype, [&](auto tag) {
      using T = decltype(tag);
      std::vector<T> wide(size_t(input.numel()));
      Tensor w = input;
      w.dtype = out.dtype;
      w.data = wide.data();
      Status st = cast(input, w); // exact, cannot fail on these dtypes
      (void)st;
      reduceTyped<T>(op, w, kept, out.as<T>());
    });
    return Status();
  }
  if (op == ReduceOp::Mean)
    dispatchFloat(input.dtype, [&](auto tag) {
      using T = decltype(tag);
      reduceTyped<T>(op, input, kept, out.as<T>());
    });
  else
    dispatchArith(input.dtype, [&](auto tag) {
      using T = decltype(tag);
      reduceTyped<T>(op, input, kept, out.as<T>());
    });
  return Status();
}

Status reduceBackward(ReduceOp op, const Tensor &input, I64s axes,
                      bool keepdims, const Tensor &gradOut,
                      const Tensor &gradIn) {
  Call call("reduce_backward");
  call.raw("op", reduceName(op))
      .arg("input", input)
      .arg("axes", axes)
      .arg("grad_out", gradOut)
      .arg("grad_in", gradIn);
  bool reduced[kMaxRank];
  Tensor kept;
  if (Status st =
          checkReduceAxes(call, input, axes, keepdims, gradOut, reduced, kept);
      !st.ok())
    return st;
  if (gradOut.dtype != input.dtype || gradIn.dtype != input.dtype ||
      !sameShape(gradIn, input))
    return call.fail(
        "gradients must have the input's dtype; grad_in its shape");
  if (!dispatchFloat(input.dtype, [&](auto tag) {
        using T = decltype(tag);
        int64_t m = kept.numel(), n = input.numel();
        int64_t count = m ? n / m : 0;
        const T *x = input.as<T>(), *g = gradOut.as<T>();
        T *gi = gradIn.as<T>();
        std::vector<T> y(m), aux(m, T(0));
        std::vector<int64_t> ties(m, 0);
        if (op == ReduceOp::Max || op == ReduceOp::Min)
          reduceTyped<T>(op, input, kept, y.data());
        Walker<1> w{input.rank, input.shape, {}};
        broadcastStrides(kept, input, w.strides[0]);
        if (op == ReduceOp::Prod) {
          // Product of the non-zero elements and the count of zeros, so
          // the gradient is exact even where elements are zero.
          std::fill(y.begin(), y.end(), T(1));
          for (int64_t i = 0; i < n; ++i, w.next()) {
            if (x[i] == T(0))
              ++ties[w.off[0]];
            else
              y[w.off[0]] *= x[i];
          }
          w = Walker<1>{input.rank, input.shape, {}};
          broadcastStrides(kept, input, w.strides[0]);
        } else if (op == ReduceOp::Max || op == ReduceOp::Min) {
          for (int64_t i = 0; i < n; ++i, w.next())
            ties[w.off[0]] += x[i] == y[w.off[0]];
          w = Walker<1>{input.rank, input.shape, {}};
          broadcastStrides(kept, input, w.strides[0]);
        }
        for (int64_t i = 0; i < n; ++i, w.next()) {
          int64_t o = w.off[0];
          switch (op) {
          case ReduceOp::Sum:
            gi[i] = g[o];
            break;
          case ReduceOp::Mean:
            gi[i] = g[o] / static_cast<T>(count);
            break;
          case ReduceOp::Max:
          case ReduceOp::Min:
            gi[i] = x[i] == y[o] ? g[o] / static_cast<T>(ties[o]) : T(0);
            break;
          case ReduceOp::Prod:
            gi[i] = ties[o] == 0   ? g[o] * y[o] / x[i]
                    : ties[o] == 1 ? (x[i] == T(0) ? g[o] * y[o] : T(0))
                                   : T(0);
            break;
          }
        }
      }))
    return call.fail("expects f32 or f64", StatusCode::Unimplemented);
  return Status();
}

} // namespace dsc::cpu
