//===- gelu_math.h - GELU and its derivative on the host --------*- C++ -*-===//
//
// Internal to runtime/cpu: the formulas of gelu and geluBackward
// (kernels.cpp), shared with the GELU epilogues of gemmGelu and
// matmulGeluGrad (linalg.cpp) so that a fused GEMM computes what the
// separate ops do. The device twins are in cuda/elementwise_ops.cuh, with
// the same operation order.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CPU_GELU_MATH_H
#define DSC_RUNTIME_CPU_GELU_MATH_H

#include <cmath>

namespace dsc::cpu::detail {

template <typename T> T geluOf(T x, bool tanhApprox) {
  if (tanhApprox) {
    T u = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + std::tanh(u));
  }
  return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
}

template <typename T> T geluDerivative(T x, bool tanhApprox) {
  if (tanhApprox) {
    const T c = T(0.7978845608028654);
    T u = c * (x + T(0.044715) * x * x * x);
    T t = std::tanh(u);
    return T(0.5) * (T(1) + t) +
           T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3 * 0.044715) * x * x);
  }
  return T(0.5) * (T(1) + std::erf(x * T(0.7071067811865476))) +
         x * std::exp(T(-0.5) * x * x) * T(0.3989422804014327); // 1/sqrt(2pi)
}

} // namespace dsc::cpu::detail

#endif // DSC_RUNTIME_CPU_GELU_MATH_H
