//===- checks_math.h - Checks shared with the CUDA kernels ------*- C++ -*-===//
//-*-===//
//
// Internal to runtime/cpu and runtime/cuda: the host-side argument checks of
// the elementwise, reduction, norm, softmax, loss, attention, optimizer and
// fill kernels. They are defined beside the CPU kernels (kernels.cpp,
// norm_loss.cpp, attention.cpp, step_kernels.cpp) and called by them and by
// their CUDA versions, so that both backends fail with the same Status.
//
// Each checkX(call, ...) adds the kernel's arguments to `call` (made by the
// caller with the kernel's name) and checks them in the order the CPU
// kernel always has, returning the first failure. On success it fills its
// layout out-parameters, and `call` stays usable for the errors found while
// computing (integer division by zero, labels checked on the device).
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CPU_CHECKS_MATH_H
#define DSC_RUNTIME_CPU_CHECKS_MATH_H

#include "cpu/kernel_util.h"
#include "cpu/kernels.h"
#include "cpu/step_kernels.h"

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace dsc::cpu::detail {

//===----------------------------------------------------------------------===//
// Elementwise and reductions (kernels.cpp)
//===----------------------------------------------------------------------===//

/// The call names of the op enums ("neg", "add", "reduce_sum", ...).
const char *unaryName(UnaryOp op);
const char *binaryName(BinaryOp op);
const char *reduceName(ReduceOp op);

/// Which of its three forms a unary call takes.
enum class UnaryPath {
  Not,       ///< not: bool to bool
  SignedInt, ///< neg, abs of i64, i32 or i8
  Float,     ///< everything else: f32 or f64
};

Status checkUnary(Call &call, UnaryOp op, const Tensor &input,
                  const Tensor &out, UnaryPath &path);
Status checkLeakyRelu(Call &call, const Tensor &input, double alpha,
                      const Tensor &out);
Status checkGelu(Call &call, const Tensor &input, const Tensor &out);
Status checkSwiglu(Call &call, const Tensor &gate, const Tensor &up,
                   const Tensor &out);
/// clip takes the arithmetic dtypes: f32, f64, i64, i32, i8, u8; [lo, hi]
/// are its bounds, infinite where absent.
Status checkClip(Call &call, const Tensor &input, std::optional<double> min,
                 std::optional<double> max, const Tensor &out, double &lo,
                 double &hi);
/// Also rejects the op/dtype pairs binary does not compute: bool operands
/// take only and/or/xor and comparisons, and/or/xor only bool operands, and
/// other dtypes are the arithmetic ones. Integer division by zero is left to
/// the kernels (it depends on the data).
Status checkBinary(Call &call, BinaryOp op, const Tensor &lhs,
                   const Tensor &rhs, const Tensor &out);
Status checkWhere(Call &call, const Tensor &cond, const Tensor &x,
                  const Tensor &y, const Tensor &out);
Status checkCast(Call &call, const Tensor &input, const Tensor &out);

/// Also the dtypes: mean takes f32 and f64, the others i64 and i32 too.
/// `reduced` marks the reduced dims of the input; `kept` is the input with
/// those dims set to 1.
Status checkReduce(Call &call, ReduceOp op, const Tensor &input, I64s axes,
                   bool keepdims, const Tensor &out, bool (&reduced)[kMaxRank],
                   Tensor &kept);

//===----------------------------------------------------------------------===//
// Norms, softmax, losses, dropout (norm_loss.cpp)
//===----------------------------------------------------------------------===//

/// Batch norms see the input [N, C, rest...] as (n, c, s) with s the product
/// of the rest.
Status checkBatchNormTrain(Call &call, const Tensor &input, const Tensor &scale,
                           const Tensor &bias, const Tensor &runningMean,
                           const Tensor &runningVar, const Tensor &out,
                           const Tensor &newRunningMean,
                           const Tensor &newRunningVar, const Tensor &saveMean,
                           const Tensor &saveInvStd, int64_t &n, int64_t &c,
                           int64_t &s);
Status checkBatchNormTrainBackward(Call &call, const Tensor &input,
                                   const Tensor &scale, const Tensor &gradOut,
                                   const Tensor &gradIn,
                                   const Tensor &gradScale,
                                   const Tensor &gradBias, int64_t &n,
                                   int64_t &c, int64_t &s);
Status checkBatchNorm(Call &call, const Tensor &input, const Tensor &scale,
                      const Tensor &bias, const Tensor &mean, const Tensor &var,
                      const Tensor &out, int64_t &n, int64_t &c, int64_t &s);

/// Layer norms see the input as rows x cols, cols the dims [axis, rank).
Status checkLayerNorm(Call &call, const Tensor &input, const Tensor &scale,
                      const Tensor &bias, int64_t axis, const Tensor &out,
                      int64_t &rows, int64_t &cols);
Status checkLayerNormBackward(Call &call, const Tensor &input,
                              const Tensor &scale, int64_t axis,
                              const Tensor &gradOut, const Tensor &gradIn,
                              const Tensor &gradScale, const Tensor &gradBias,
                              int64_t &rows, int64_t &cols);
/// The backward's epilogue (both absent: none): an f32 gradIn, an f32
/// residual and a bf16/f16 copy of gradIn's shape.
Status checkNormGradEpilogue(Call &call, const Tensor &gradOut,
                             const Tensor &gradIn, const Tensor &residual,
                             const Tensor &gradInCopy);

/// Softmaxes (plain or log, by the call's name) see their tensor as
/// [outer, dim, inner] around the axis.
Status checkSoftmax(Call &call, const Tensor &input, int64_t axis,
                    const Tensor &out, int64_t &outer, int64_t &dim,
                    int64_t &inner);
Status checkSoftmaxBackward(Call &call, const Tensor &out, int64_t axis,
                            const Tensor &gradOut, const Tensor &gradIn,
                            int64_t &outer, int64_t &dim, int64_t &inner);

/// A loss over input [N, C, d...] with labels [N, d...]: d is the product
/// of the d... dims. Trivially copyable, for kernels to take by value.
struct LossShape {
  int64_t n = 0, c = 0, d = 0;
};

/// Labels read on the host: per position (n * d + p) the class or -1 when
/// ignored, and its weight; weightSum their total.
struct LossLabels {
  std::vector<int64_t> label;
  std::vector<double> weight;
  double weightSum = 0;
};

/// The loss checks. With `hostLabels` the labels are read (host memory) and
/// one outside [0, C) that is not the ignore index fails with OutOfRange,
/// after the shape checks and, for the backward calls, before the gradient
/// check; without, they are left to the caller (the CUDA kernels check them
/// on the device, after every check here).
Status checkSoftmaxCrossEntropy(Call &call, const Tensor &scores,
                                const Tensor &labels, const Tensor &weights,
                                Reduction reduction,
                                std::optional<int64_t> ignoreIndex,
                                const Tensor &loss, LossShape &shape,
                                LossLabels *hostLabels);
Status checkSoftmaxCrossEntropyBackward(
    Call &call, const Tensor &scores, const Tensor &labels,
    const Tensor &weights, Reduction reduction,
    std::optional<int64_t> ignoreIndex, const Tensor &gradLoss,
    const Tensor &gradScores, LossShape &shape, LossLabels *hostLabels);
Status checkNllLoss(Call &call, const Tensor &input, const Tensor &labels,
                    const Tensor &weights, Reduction reduction,
                    std::optional<int64_t> ignoreIndex, const Tensor &loss,
                    LossShape &shape, LossLabels *hostLabels);
Status checkNllLossBackward(Call &call, const Tensor &input,
                            const Tensor &labels, const Tensor &weights,
                            Reduction reduction,
                            std::optional<int64_t> ignoreIndex,
                            const Tensor &gradLoss, const Tensor &gradInput,
                            LossShape &shape, LossLabels *hostLabels);

Status checkDropout(Call &call, const Tensor &input, double ratio,
                    uint64_t seed, const Tensor &out, const Tensor &mask);

//===----------------------------------------------------------------------===//
// Attention (attention.cpp)
//===----------------------------------------------------------------------===//

/// The sizes of one attention call and how its mask is laid over
/// [B, Hq, Tq, Tk]: element strides, 0 along broadcast dims.
struct AttentionShape {
  int64_t batch = 0, heads = 0, kvHeads = 0, queries = 0, keys = 0;
  int64_t headDim = 0, valueDim = 0;
  bool hasMask = false, boolMask = false;
  int64_t maskStride[4] = {0, 0, 0, 0};
  /// Query heads per key/value head.
  int64_t group() const { return kvHeads ? heads / kvHeads : 0; }
};

/// `t`'s view with dims 1 and 2 swapped (rank 4): a seq_major [B, T, H, D]
/// operand's shape as [B, H, T, D], and back. The data are not moved.
inline Tensor swapTokensAndHeads(Tensor t) {
  if (t.rank == 4)
    std::swap(t.shape[1], t.shape[2]);
  return t;
}

/// `attrs` for the heads-first call a kernel without seq_major makes on
/// copies of a seq_major call's tensors.
inline AttentionAttrs headsFirstAttrs(AttentionAttrs attrs) {
  attrs.seqMajor = false;
  return attrs;
}

Status checkAttention(Call &call, const Tensor &q, const Tensor &k,
                      const Tensor &v, const Tensor &mask,
                      const AttentionAttrs &attrs, const Tensor &out,
                      const Tensor &lse, AttentionShape &shape);
Status checkAttentionBackward(Call &call, const Tensor &q, const Tensor &k,
                              const Tensor &v, const Tensor &mask,
                              const Tensor &out, const Tensor &lse,
                              const Tensor &gradOut,
                              const AttentionAttrs &attrs, const Tensor &gradQ,
                              const Tensor &gradK, const Tensor &gradV,
                              AttentionShape &shape);

//===----------------------------------------------------------------------===//
// Fill and optimizer ops (step_kernels.cpp)
//===----------------------------------------------------------------------===//

Status checkFill(Call &call, const Tensor &out, double value);

/// The optimizer checks. With `stepValue` the step is read (host memory)
/// into it and a step below 1 fails with OutOfRange right after the step's
/// dtype check; without, only its dtype and shape are checked (the CUDA
/// kernels read it on the device and skip the update when it is below 1).
Status checkAdamw(Call &call, const Tensor &param, const Tensor &grad,
                  const Tensor &expAvg, const Tensor &expAvgSq,
                  const Tensor &lr, const Tensor &beta1, const Tensor &beta2,
                  const Tensor &eps, const Tensor &weightDecay,
                  const Tensor &step, const Tensor &newParam,
                  const Tensor &newExpAvg, const Tensor &newExpAvgSq,
                  int64_t *stepValue);
/// adamwMulti's checks: checkAdamw on every entry with a Call of its own
/// ("adamw_multi(entry=i, ...)"), then the compute copy (bf16 or f16 of
/// param's shape), the entries' common dtype, gradScale and gradPrescale
/// (each absent or a scalar of that dtype). `stepValue` as for checkAdamw.
Status checkAdamwMulti(const AdamwTensors *tensors, size_t count,
                       const Tensor &lr, const Tensor &beta1,
                       const Tensor &beta2, const Tensor &eps,
                       const Tensor &weightDecay, const Tensor &step,
                       const Tensor &gradScale, const Tensor &gradPrescale,
                       int64_t *stepValue);
/// sumSquares' checks: every tensor f32 or f64 (entry 0's dtype), present
/// unless empty; `scale` absent or a float scalar of f32 or that dtype;
/// `out` a float scalar of f32 or f64. Errors name the entry:
/// "sum_squares(entry=2, tensor=f64[3]): ...".
Status checkSumSquares(const Tensor *tensors, size_t count, const Tensor &scale,
                       const Tensor &out);
Status checkSgd(Call &call, const Tensor &param, const Tensor &grad,
                const Tensor &momentumBuffer, const Tensor &lr,
                const Tensor &momentum, const Tensor &weightDecay,
                const Tensor &step, const Tensor &newParam,
                const Tensor &newMomentumBuffer, int64_t *stepValue);
Status checkLrSchedule(Call &call, const Tensor &step, const Tensor &baseLr,
                       int64_t warmupSteps, int64_t totalSteps,
                       const Tensor &lr, int64_t *stepValue);

} // namespace dsc::cpu::detail

#endif // DSC_RUNTIME_CPU_CHECKS_MATH_H
