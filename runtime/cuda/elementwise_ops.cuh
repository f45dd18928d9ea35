//===- elementwise_ops.cuh - The math of the elementwise ops ----*- C++ -*-===//
//
// Device functions of every elementwise op, shared by the runtime's kernels
// (elementwise.cu) and the fused kernels the code generator writes into a
// --target cuda program, so that a fused chain computes exactly what the
// same ops computed one kernel at a time. Float math follows the CPU
// formulas in the element type with CUDA's libdevice functions; integer
// arithmetic wraps as the CPU's static_casts do. Files that include this are
// compiled with --fmad=false, so no multiply-add is contracted and every op
// rounds as on the CPU.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CUDA_ELEMENTWISE_OPS_CUH
#define DSC_RUNTIME_CUDA_ELEMENTWISE_OPS_CUH

#include "cpu/kernels.h"

#include <cstdint>
#include <type_traits>

namespace dsc::cuda::ops {

using cpu::BinaryOp;
using cpu::UnaryOp;

__host__ __device__ inline bool isCompare(BinaryOp op) {
  return op == BinaryOp::Equal || op == BinaryOp::Less ||
         op == BinaryOp::LessEqual || op == BinaryOp::Greater ||
         op == BinaryOp::GreaterEqual;
}

//===----------------------------------------------------------------------===//
// Device math: one name per function for float and double
//===----------------------------------------------------------------------===//

#define DSC_MATH1(name, f32, f64)                                              \
  __device__ inline float name(float x) { return f32(x); }                     \
  __device__ inline double name(double x) { return f64(x); }
DSC_MATH1(mExp, expf, exp)
DSC_MATH1(mLog, logf, log)
DSC_MATH1(mLog1p, log1pf, log1p)
DSC_MATH1(mSqrt, sqrtf, sqrt)
DSC_MATH1(mTanh, tanhf, tanh)
DSC_MATH1(mErf, erff, erf)
DSC_MATH1(mFloor, floorf, floor)
DSC_MATH1(mCeil, ceilf, ceil)
DSC_MATH1(mSin, sinf, sin)
DSC_MATH1(mCos, cosf, cos)
DSC_MATH1(mAbs, fabsf, fabs)
#undef DSC_MATH1
__device__ inline float mPow(float a, float b) { return powf(a, b); }
__device__ inline double mPow(double a, double b) { return pow(a, b); }

template <typename T> __device__ inline bool isNanOf(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

/// A double converted to an integer type the way the x86-64 host build of
/// the CPU kernels does for a static_cast (cvttsd2si: a value outside the
/// 32- or 64-bit register gives its minimum), then narrowed modulo 2^bits.
/// Only reached where the CPU reference converts an out-of-range value
/// (integer pow overflow, clip bounds outside the dtype).
template <typename T> __device__ inline T doubleToInt(double d) {
  if constexpr (sizeof(T) == 8) {
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
      return static_cast<T>(INT64_MIN);
    return static_cast<T>(static_cast<int64_t>(d));
  } else {
    if (!(d > -2147483649.0 && d < 2147483648.0))
      return static_cast<T>(INT32_MIN);
    return static_cast<T>(static_cast<int32_t>(d));
  }
}

template <typename T> __device__ inline T sigmoidOf(T x) {
  if (x >= 0)
    return T(1) / (T(1) + mExp(-x));
  T e = mExp(x);
  return e / (T(1) + e);
}

/// SwiGLU's gate: silu(x) * u.
template <typename T> __device__ inline T swigluOf(T x, T u) {
  return x * sigmoidOf(x) * u;
}

template <typename T> __device__ inline T softplusOf(T x) {
  return x > 0 ? x + mLog1p(mExp(-x)) : mLog1p(mExp(x));
}

template <typename T> __device__ inline T applyUnary(UnaryOp op, T x) {
  switch (op) {
  case UnaryOp::Neg:
    return -x;
  case UnaryOp::Abs:
    return mAbs(x);
  case UnaryOp::Exp:
    return mExp(x);
  case UnaryOp::Log:
    return mLog(x);
  case UnaryOp::Sqrt:
    return mSqrt(x);
  case UnaryOp::Reciprocal:
    return T(1) / x;
  case UnaryOp::Tanh:
    return mTanh(x);
  case UnaryOp::Erf:
    return mErf(x);
  case UnaryOp::Sigmoid:
    return sigmoidOf(x);
  case UnaryOp::Relu:
    return x > 0 ? x : T(0);
  case UnaryOp::Floor:
    return mFloor(x);
  case UnaryOp::Ceil:
    return mCeil(x);
  case UnaryOp::Sin:
    return mSin(x);
  case UnaryOp::Cos:
    return mCos(x);
  case UnaryOp::Softplus:
    return softplusOf(x);
  case UnaryOp::Not:
    break;
  }
  return x;
}

template <typename T> __device__ inline T geluOf(T x, bool tanhApprox) {
  if (tanhApprox) {
    T u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + mTanh(u));
  }
  return T(0.5) * x * (T(1) + mErf(x * T(0.7071067811865476)));
}

/// d/dx geluOf: the CPU's geluDerivative (cpu/gelu_math.h), term for term.
template <typename T> __device__ inline T geluDerivative(T x, bool tanhApprox) {
  if (tanhApprox) {
    const T c = T(0.7978845608028654);
    T u = c * (x + T(0.044715) * x * x * x);
    T t = mTanh(u);
    return T(0.5) * (T(1) + t) +
           T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * x * x);
  }
  return T(0.5) * (T(1) + mErf(x * T(0.7071067811865476))) +
         x * mExp(T(-0.5) * x * x) * T(0.3989422804014327); // 1/sqrt(2pi)
}

template <typename T> __device__ inline T wrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(U(a) + U(b));
  } else {
    return a + b;
  }
}

template <typename T> __device__ inline T wrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(U(a) - U(b));
  } else {
    return a - b;
  }
}

template <typename T> __device__ inline T wrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    // Promote narrow types through uint64 so the product never overflows
    // a signed int; the low bits are what the CPU's T(a * b) keeps.
    return static_cast<T>(static_cast<U>(uint64_t(U(a)) * uint64_t(U(b))));
  } else {
    return a * b;
  }
}

template <typename T> __device__ inline T divide(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0)
      return 0; // only when the host scan was skipped (graph capture)
    if constexpr (std::is_signed_v<T>)
      if (b == T(-1)) // truncates like T(a / b), min / -1 wraps
        return wrapSub(T(0), a);
    return static_cast<T>(a / b);
  } else {
    return a / b;
  }
}

/// The CPU's T(std::pow(double(a), double(b))). Host libm returns exact
/// powers exactly; CUDA's pow may be an ulp off, which truncation would
/// turn into an off-by-one, so powers below 2^53 are multiplied out
/// exactly (every partial product is an integer below 2^53).
template <typename T> __device__ inline T intPow(T a, T b) {
  double x = static_cast<double>(a), y = static_cast<double>(b);
  if (y >= 0) {
    if (x == 0)
      return y == 0 ? T(1) : T(0);
    if (x == 1)
      return T(1);
    if (x == -1)
      return (static_cast<int64_t>(b) & 1) ? T(-1) : T(1);
    double r = 1;
    int64_t e = static_cast<int64_t>(b);
    for (; e > 0; --e) { // |x| >= 2: at most 53 rounds
      double p = r * x;
      if (!(fabs(p) < 9007199254740992.0))
        break;
      r = p;
    }
    if (e == 0)
      return doubleToInt<T>(r);
  }
  return doubleToInt<T>(pow(x, y));
}

/// The non-comparison ops; And/Or/Xor only reach here for bool (as 0/1).
template <typename T> __device__ inline T arith(BinaryOp op, T a, T b) {
  switch (op) {
  case BinaryOp::Add:
    return wrapAdd(a, b);
  case BinaryOp::Sub:
    return wrapSub(a, b);
  case BinaryOp::Mul:
    return wrapMul(a, b);
  case BinaryOp::Div:
    return divide(a, b);
  case BinaryOp::Pow:
    if constexpr (std::is_floating_point_v<T>)
      return mPow(a, b);
    else
      return intPow(a, b);
  case BinaryOp::Max:
    if (isNanOf(a) || isNanOf(b))
      return T(a + b);
    return a > b ? a : b;
  case BinaryOp::Min:
    if (isNanOf(a) || isNanOf(b))
      return T(a + b);
    return a < b ? a : b;
  case BinaryOp::And:
    return T(a && b);
  case BinaryOp::Or:
    return T(a || b);
  case BinaryOp::Xor:
    return T(a != b);
  default:
    return T(0);
  }
}

template <typename T> __device__ inline bool compare(BinaryOp op, T a, T b) {
  switch (op) {
  case BinaryOp::Equal:
    return a == b;
  case BinaryOp::Less:
    return a < b;
  case BinaryOp::LessEqual:
    return a <= b;
  case BinaryOp::Greater:
    return a > b;
  case BinaryOp::GreaterEqual:
    return a >= b;
  default:
    return false;
  }
}

} // namespace dsc::cuda::ops

#endif // DSC_RUNTIME_CUDA_ELEMENTWISE_OPS_CUH
