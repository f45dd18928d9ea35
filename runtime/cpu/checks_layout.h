//===- checks_layout.h - Argument checks shared with CUDA -------*- C++ -*-===//
//
// Internal to runtime/cpu and runtime/cuda: the host-side argument checks of
// the data movement, matmul / gemm, convolution and pooling kernels. They are
// defined beside the CPU kernels (data_movement.cpp, linalg.cpp,
// conv_pool.cpp) and called by them and by their CUDA versions, so that both
// backends fail with the same Status.
//
// Each checkX(call, ...) adds the kernel's arguments to `call` (made by the
// caller with the kernel's name) and checks them in the order the CPU
// kernel always has, returning the first failure. On success it fills its
// layout out-parameters, and `call` stays usable for the errors found while
// computing (gather indices, backend limits). The xLayout(call, ...) forms
// check without adding arguments, for calls that describe theirs otherwise.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CPU_CHECKS_LAYOUT_H
#define DSC_RUNTIME_CPU_CHECKS_LAYOUT_H

#include "cpu/kernel_util.h"
#include "cpu/kernels.h"

#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace dsc::cpu::detail {

/// The float dtypes a product or convolution takes, named in the dtype
/// message: the CPU kernels compute f32 and f64; cuBLASLt and cuDNN (the
/// CUDA kernels) f16 and bf16 too.
enum class FloatTypes {
  F32F64,
  F32F64F16BF16,
};

inline bool takesFloat(FloatTypes types, DType t) {
  return t == DType::F32 || t == DType::F64 ||
         (types == FloatTypes::F32F64F16BF16 &&
          (t == DType::F16 || t == DType::BF16));
}

/// "f32 or f64", "f32, f64, f16 or bf16".
inline const char *floatNames(FloatTypes types) {
  return types == FloatTypes::F32F64 ? "f32 or f64" : "f32, f64, f16 or bf16";
}

//===----------------------------------------------------------------------===//
// Data movement (data_movement.cpp)
//===----------------------------------------------------------------------===//

Status checkReshape(Call &call, const Tensor &input, const Tensor &out);

/// `strides`: the input's element strides over out's dims.
Status checkTranspose(Call &call, const Tensor &input, I64s perm,
                      const Tensor &out,
                      std::array<int64_t, kMaxRank> &strides);

/// `strides`: the input's broadcast strides over out's dims (0 where it
/// broadcasts).
Status checkExpand(Call &call, const Tensor &input, const Tensor &out,
                   std::array<int64_t, kMaxRank> &strides);

/// Where a slice's elements lie in the full tensor: `strides` over the
/// slice's dims (0 for dims of size 0) from the element offset `base`.
struct SliceLayout {
  std::array<int64_t, kMaxRank> strides{};
  int64_t base = 0;
};

Status checkSlice(Call &call, const Tensor &input, I64s offsets, I64s strides,
                  const Tensor &out, SliceLayout &layout);
Status checkSliceBackward(Call &call, const Tensor &gradOut, I64s offsets,
                          I64s strides, const Tensor &gradIn,
                          SliceLayout &layout);

/// Wrap `axis` into [0, rank).
Status checkConcat(Call &call, const Tensor *inputs, int count, int64_t &axis,
                   const Tensor &out);
Status checkSplit(Call &call, const Tensor &input, int64_t &axis,
                  const Tensor *outs, int count);

/// A gather over data [outer, dim, inner] around the axis.
struct GatherLayout {
  int64_t outer = 1, dim = 0, inner = 1;
};

/// Shapes and dtypes only: the index values are left to the caller, who
/// reports one outside [-dim, dim) with gatherIndexError.
Status checkGather(Call &call, const Tensor &data, const Tensor &indices,
                   int64_t axis, const Tensor &out, GatherLayout &layout);
/// `init` (gatherBackwardInto): of gradData's dtype and shape.
Status checkGatherBackward(Call &call, const Tensor &gradOut,
                           const Tensor &indices, int64_t axis,
                           const Tensor &gradData, GatherLayout &layout,
                           const Tensor *init = nullptr);
/// The OutOfRange failure of index `value` at position `at`.
Status gatherIndexError(const Call &call, int64_t value, int64_t at,
                        int64_t dim);

Status checkPad(Call &call, const Tensor &input, I64s pads, const Tensor &out);

Status checkRotateHalf(Call &call, const Tensor &input, const Tensor &out);
Status checkTrilu(Call &call, const Tensor &input, int64_t k,
                  const Tensor &out);

/// A cumsum's lines: `len` elements `inner` apart, `lines` of them.
struct CumSumLayout {
  int64_t len = 0, inner = 1, lines = 0;
};
Status checkCumSum(Call &call, const Tensor &input, int64_t axis,
                   const Tensor &out, CumSumLayout &layout);
/// What both cumsum kernels add in: T, or for an integer T its unsigned
/// twin (an overflowing sum wraps as two's complement, without undefined
/// behaviour).
template <typename T, bool = std::is_integral<T>::value> struct CumSumAcc {
  using type = T;
};
template <typename T> struct CumSumAcc<T, true> {
  using type = typename std::make_unsigned<T>::type;
};

//===----------------------------------------------------------------------===//
// Matmul and gemm (linalg.cpp)
//===----------------------------------------------------------------------===//

/// The shapes of a numpy matmul, 1-D operands promoted.
struct MatmulLayout {
  int64_t m = 0, k = 0, n = 0;
  Tensor lhsBatch, rhsBatch, outBatch; // batch dims only, data unused
};

Status checkMatmul(Call &call, const Tensor &lhs, const Tensor &rhs,
                   const Tensor &out, FloatTypes types, MatmulLayout &layout);
Status matmulLayout(const Call &call, const Tensor &lhs, const Tensor &rhs,
                    const Tensor &out, FloatTypes types, MatmulLayout &layout);
/// op(lhs) x op(rhs), op swapping the last two dims of a flagged operand
/// (rank >= 2): `opLhs`/`opRhs` are the views of op(x) (the stored data,
/// its shape swapped), checked into `layout`.
Status matmulTransposedLayout(const Call &call, const Tensor &lhs, bool tl,
                              const Tensor &rhs, bool tr, const Tensor &out,
                              FloatTypes types, Tensor &opLhs, Tensor &opRhs,
                              MatmulLayout &layout);

/// matmulAccumulate's operands: lhs and rhs rank 2 of one dtype in `types`,
/// out [m, n] of that dtype or f32.
inline Status checkMatmulAccumulate(const Call &call, const Tensor &lhs,
                                    bool tl, const Tensor &rhs, bool tr,
                                    const Tensor &out, FloatTypes types) {
  if (!validRank(lhs) || !validRank(rhs) || !validRank(out) || lhs.rank != 2 ||
      rhs.rank != 2 || out.rank != 2)
    return call.fail("lhs, rhs and out must be of rank 2");
  if (lhs.dtype != rhs.dtype || !takesFloat(types, lhs.dtype) ||
      (out.dtype != lhs.dtype && out.dtype != DType::F32))
    return call.fail(std::string("lhs and rhs must be one dtype (") +
                     floatNames(types) + "), out that dtype or f32");
  int64_t m = tl ? lhs.shape[1] : lhs.shape[0];
  int64_t k = tl ? lhs.shape[0] : lhs.shape[1];
  int64_t k2 = tr ? rhs.shape[1] : rhs.shape[0];
  int64_t n = tr ? rhs.shape[0] : rhs.shape[1];
  if (k != k2 || out.shape[0] != m || out.shape[1] != n)
    return call.fail("op(lhs) [m, k] @ op(rhs) [k, n] must be out [m, n]");
  return Status();
}

/// matmulBiasGrad's operands: lhs [T, M] and rhs [T, N] of one dtype in
/// `types`, out [M, N] of that dtype or f32, biasGrad f32 [M] ([N] when
/// rhs is summed).
inline Status checkMatmulBiasGrad(const Call &call, const Tensor &lhs,
                                  const Tensor &rhs, bool sumRhs,
                                  const Tensor &out, const Tensor &biasGrad,
                                  FloatTypes types) {
  if (Status st =
          checkMatmulAccumulate(call, lhs, true, rhs, false, out, types);
      !st.ok())
    return st;
  const Tensor &summed = sumRhs ? rhs : lhs;
  if (!validRank(biasGrad) || biasGrad.rank != 1 ||
      biasGrad.dtype != DType::F32 || biasGrad.shape[0] != summed.shape[1])
    return call.fail(std::string("bias_grad must be f32 [") +
                     (sumRhs ? "N] for rhs [T, N]" : "M] for lhs [T, M]"));
  return Status();
}

/// The product of gemmGelu and matmulGeluGrad: a [M, K] @ op(b) (b [K, N],
/// or [N, K] with transB) into out and pre [M, N], all of one dtype in
/// `types`. Only an empty tensor may lack data.
inline Status checkGeluProduct(const Call &call, const Tensor &a,
                               const Tensor &b, bool transB, const Tensor &out,
                               const Tensor &pre, FloatTypes types) {
  for (const Tensor *t : {&a, &b, &out, &pre})
    if (!validRank(*t) || t->rank != 2)
      return call.fail("a, b, out and pre must be of rank 2");
  if (b.dtype != a.dtype || out.dtype != a.dtype || pre.dtype != a.dtype ||
      !takesFloat(types, a.dtype))
    return call.fail(std::string("expects ") + floatNames(types) +
                     " operands of one dtype");
  int64_t m = a.shape[0], k = a.shape[1];
  int64_t k2 = transB ? b.shape[1] : b.shape[0];
  int64_t n = transB ? b.shape[0] : b.shape[1];
  if (k != k2)
    return call.fail("inner dims " + std::to_string(k) + " vs " +
                     std::to_string(k2));
  if (!shapeIs(out, {m, n}) || !shapeIs(pre, {m, n}))
    return call.fail("out and pre must be " + describe({m, n}));
  for (const Tensor *t : {&a, &b, &out, &pre})
    if (!t->present() && t->numel() > 0)
      return call.fail("missing data");
  return Status();
}

/// gemmGelu's operands: checkGeluProduct's, and bias [N] of a's dtype or
/// absent (no data).
inline Status checkGemmGelu(Call &call, const Tensor &a, const Tensor &b,
                            bool transB, const Tensor &bias, const Tensor &out,
                            const Tensor &pre, FloatTypes types) {
  call.arg("a", a)
      .arg("b", b)
      .raw("trans_b", transB ? "true" : "false")
      .arg("bias", bias)
      .arg("out", out)
      .arg("pre", pre);
  if (Status st = checkGeluProduct(call, a, b, transB, out, pre, types);
      !st.ok())
    return st;
  int64_t n = out.shape[1];
  if (bias.present() &&
      (!validRank(bias) || !shapeIs(bias, {n}) || bias.dtype != a.dtype))
    return call.fail(std::string("bias must be ") + dtypeName(a.dtype) +
                     describe({n}) + " or absent");
  return Status();
}

/// matmulGeluGrad's operands: checkGeluProduct's.
inline Status checkMatmulGeluGrad(Call &call, const Tensor &a, const Tensor &b,
                                  bool transB, const Tensor &pre,
                                  const Tensor &out, FloatTypes types) {
  call.arg("a", a)
      .arg("b", b)
      .raw("trans_b", transB ? "true" : "false")
      .arg("pre", pre)
      .arg("out", out);
  return checkGeluProduct(call, a, b, transB, out, pre, types);
}

/// out [m, n] = op(a) [m, k] @ op(b) [k, n]; cStrides: c's broadcast
/// strides over out's dims when c is present.
struct GemmLayout {
  int64_t m = 0, n = 0, k = 0;
  std::array<int64_t, kMaxRank> cStrides{};
};

Status checkGemm(Call &call, const Tensor &a, const Tensor &b, const Tensor &c,
                 const GemmAttrs &attrs, const Tensor &out, FloatTypes types,
                 GemmLayout &layout);

//===----------------------------------------------------------------------===//
// Convolution and pooling (conv_pool.cpp)
//===----------------------------------------------------------------------===//

/// Window geometry over the spatial dims (strides, pads and dilations with
/// their defaults filled in). The checks leave `table` empty: build() fills
/// it (the CPU kernels walk it).
struct Windows {
  int dims = 0;
  std::vector<int64_t> in, kernel, out, strides, padBegin, padEnd, dilations;
  int64_t inSize = 1, kernelSize = 1, outSize = 1;
  std::vector<int64_t> table; // [outSize * kernelSize], -1 in the padding

  /// Sets the sizes and fills the table: for each output and kernel
  /// position, the flat input position it reads, or -1 in the padding.
  void build();
  /// Window positions inside [-padBegin, in + padEnd) (count_include_pad).
  int64_t paddedCount(int64_t oi) const;
};

struct ConvLayout {
  int64_t n = 0, c = 0, m = 0, group = 1, cPerGroup = 0, mPerGroup = 0;
  Windows w;
};

Status checkConv(Call &call, const Tensor &input, const Tensor &weight,
                 const Tensor &bias, const ConvAttrs &attrs, const Tensor &out,
                 FloatTypes types, ConvLayout &layout);
/// Each gradient may be absent.
Status checkConvBackward(Call &call, const Tensor &input, const Tensor &weight,
                         const ConvAttrs &attrs, const Tensor &gradOut,
                         const Tensor &gradInput, const Tensor &gradWeight,
                         const Tensor &gradBias, FloatTypes types,
                         ConvLayout &layout);
/// The presence checks of the single-gradient forms (whose other checks are
/// checkConvBackward's).
Status checkConvBackwardInput(Call &call, const Tensor &gradOut,
                              const Tensor &weight, const Tensor &gradInput);
Status checkConvBackwardWeight(Call &call, const Tensor &gradOut,
                               const Tensor &input, const Tensor &gradWeight);

Status checkMaxPool(Call &call, const Tensor &input, const PoolAttrs &attrs,
                    const Tensor &out, const Tensor &indices, Windows &w);
Status checkMaxPoolBackward(Call &call, const Tensor &input,
                            const PoolAttrs &attrs, const Tensor &gradOut,
                            const Tensor &gradIn, Windows &w);
Status checkAvgPool(Call &call, const Tensor &input, const PoolAttrs &attrs,
                    const Tensor &out, Windows &w);
Status checkAvgPoolBackward(Call &call, const Tensor &input,
                            const PoolAttrs &attrs, const Tensor &gradOut,
                            const Tensor &gradIn, Windows &w);

/// Global pools see the input as `planes` (N * C) of `size` elements.
Status checkGlobalPool(Call &call, const Tensor &input, const Tensor &out,
                       int64_t &planes, int64_t &size);

} // namespace dsc::cpu::detail

#endif // DSC_RUNTIME_CPU_CHECKS_LAYOUT_H
