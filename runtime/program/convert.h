//===- convert.h - Element conversions between tensor dtypes ----*- C++ -*-===//
//
// The program shell copies tensors between files and its own storage: ONNX
// initializers, safetensors checkpoints and batches may hold another dtype
// than the step takes. Floats convert among themselves (f64, f32, f16, bf16;
// round to nearest even), integers among themselves (i64, i32, i8, u8; a
// value outside the target's range is an error), bool only to bool.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_PROGRAM_CONVERT_H
#define DSC_RUNTIME_PROGRAM_CONVERT_H

#include "dsc/runtime.h"

#include <string>

namespace dsc::program {

/// Whether elements of `from` can be converted to `to` by convertElements.
bool canConvert(DType from, DType to);

/// Converts `count` elements. Returns false if an integer does not fit
/// `to`; `*badIndex` then receives the first such element's index.
bool convertElements(const void *src, DType from, void *dst, DType to,
                     size_t count, size_t *badIndex = nullptr);

/// Copies `src` into `dst` (caller storage): shapes must be equal and dtypes
/// convertible. `what` names the tensor in messages, e.g. "parameter 'w'
/// from init.safetensors".
Status copyInto(const Tensor &src, const Tensor &dst, const std::string &what);

/// A scalar (numel 1) of any numeric dtype, as double.
double scalarValue(const Tensor &t);
/// x * s rounded as a dsc.mul in `dtype` rounds it (f32: both operands and
/// the product in float; f64: in double): a gradient the step returned
/// unnormalized, times its {dsc.grad_normalizer}.
double mulRounded(double x, double s, DType dtype);
/// Stores `value` in every element of `t` (any numeric dtype).
void fillValue(const Tensor &t, double value);
/// Stores an integer scalar (for Step and Seed arguments of any int dtype).
void setIntScalar(const Tensor &t, int64_t value);

/// "f32[2,3]" for a dtype and a shape.
std::string describeType(DType dtype, const int64_t *shape, int rank);

} // namespace dsc::program

#endif // DSC_RUNTIME_PROGRAM_CONVERT_H
