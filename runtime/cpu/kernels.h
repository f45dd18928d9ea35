//===- kernels.h - Reference CPU kernels for the dsc ops --------*- C++ -*-===//
//
// One function per dsc op forward (dialects/dsc/IR/DscOps.td) and one per
// vector-Jacobian product the autodiff pass emits. Conventions:
//
//  - Every result is a caller-allocated view whose dtype and shape must match
//    what the op produces; kernels check and return a Status naming the call
//    and its arguments, never write outside the views, never throw.
//  - Float math is done in the element type for f32 and f64 (the f64 path is
//    what finite-difference checks use); f16/bf16 compute is not provided,
//    except by cast and by the dtype-agnostic data-movement kernels.
//  - An absent optional operand or result is a view with data == nullptr.
//  - Results are deterministic: every output element is reduced in a fixed
//    order, whatever `threads` is (0 means std::thread::hardware_concurrency).
//  - Backward kernels overwrite their gradient results (no accumulation).
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CPU_KERNELS_H
#define DSC_RUNTIME_CPU_KERNELS_H

#include "dsc/runtime.h"

#include <optional>

namespace dsc::cpu {

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

enum class UnaryOp {
  Neg,
  Abs,
  Exp,
  Log,
  Sqrt,
  Reciprocal,
  Tanh,
  Erf,
  Sigmoid,
  Relu,
  Floor,
  Ceil,
  Sin,
  Cos,
  Softplus,
  Not
};
enum class BinaryOp {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Max,
  Min,
  And,
  Or,
  Xor,
  Equal,
  Less,
  LessEqual,
  Greater,
  GreaterEqual
};

/// Neg and Abs also take i64/i32/i8; Not takes bool; the rest f32/f64.
Status unary(UnaryOp op, const Tensor &input, const Tensor &out);
Status leakyRelu(const Tensor &input, double alpha, const Tensor &out);
Status gelu(const Tensor &input, bool tanhApproximation, const Tensor &out);
/// silu(gate) * up = gate * sigmoid(gate) * up; gate, up and out of one
/// dtype (f32, f64) and shape.
Status swiglu(const Tensor &gate, const Tensor &up, const Tensor &out);
Status clip(const Tensor &input, std::optional<double> min,
            std::optional<double> max, const Tensor &out);
/// Numpy broadcasting. Arithmetic on f32/f64/i64/i32/i8/u8 (integer Div
/// truncates, integer division by zero is an error); And/Or/Xor on bool;
/// comparisons write bool.
Status binary(BinaryOp op, const Tensor &lhs, const Tensor &rhs,
              const Tensor &out);
Status where(const Tensor &cond, const Tensor &x, const Tensor &y,
             const Tensor &out);
/// Any dtype to any dtype; float to int truncates toward zero, to bool is
/// x != 0, f16/bf16 round to nearest even.
Status cast(const Tensor &input, const Tensor &out);

/// d(op)/d(input) * gradOut, from the forward input. Floor, Ceil: zero.
Status unaryBackward(UnaryOp op, const Tensor &input, const Tensor &gradOut,
                     const Tensor &gradIn);
Status leakyReluBackward(const Tensor &input, double alpha,
                         const Tensor &gradOut, const Tensor &gradIn);
Status geluBackward(const Tensor &input, bool tanhApproximation,
                    const Tensor &gradOut, const Tensor &gradIn);
/// The gradient passes where min <= x <= max (PyTorch's convention).
Status clipBackward(const Tensor &input, std::optional<double> min,
                    std::optional<double> max, const Tensor &gradOut,
                    const Tensor &gradIn);
/// Add, Sub, Mul, Div, Pow, Max, Min. Gradients are summed back to each
/// operand's shape; either may be absent. Max/Min split ties evenly.
Status binaryBackward(BinaryOp op, const Tensor &lhs, const Tensor &rhs,
                      const Tensor &gradOut, const Tensor &gradLhs,
                      const Tensor &gradRhs);
/// gradX = where(cond, gradOut, 0), gradY = where(cond, 0, gradOut), each
/// summed to its operand's shape.
Status whereBackward(const Tensor &cond, const Tensor &gradOut,
                     const Tensor &gradX, const Tensor &gradY);
/// Sums `grad` (a broadcast shape) down to `out`'s shape, which must
/// broadcast to it: the backward of every implicit or explicit broadcast.
Status reduceToShape(const Tensor &grad, const Tensor &out);

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

/// numpy matmul: 1-D operands are promoted and the added dim dropped, batch
/// dims broadcast.
Status matmul(const Tensor &lhs, const Tensor &rhs, const Tensor &out,
              int threads = 0);
/// matmul of op(lhs) and op(rhs), where op swaps the last two dims of an
/// operand whose flag is set (dsc.matmul's transpose_lhs / transpose_rhs):
/// the operand is read transposed, not copied.
Status matmulTransposed(const Tensor &lhs, bool transLhs, const Tensor &rhs,
                        bool transRhs, const Tensor &out, int threads = 0);
/// dsc.matmul_bias_grad: out = lhs^T @ rhs (lhs [T, M], rhs [T, N], out
/// [M, N] in their dtype or f32) and biasGrad = the f32 column sums of lhs
/// ([M]), or of rhs ([N]) with sumRhs: matmulTransposed, then reduce, each
/// with its own bits.
Status matmulBiasGrad(const Tensor &lhs, const Tensor &rhs, bool sumRhs,
                      const Tensor &out, const Tensor &biasGrad,
                      int threads = 0);
/// dsc.gemm_gelu: s = a @ op(b) + bias, summed in f32 (f64 for f64
/// operands); pre = round(s) and out = round(gelu_tanh(s)), both [M, N] in
/// a's dtype. a is [M, K]; b is [K, N], or [N, K] with transB; bias is [N]
/// in a's dtype, or absent (no data): then s = a @ op(b).
/// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as gelu.
/// f32, f64, f16 and bf16 (16-bit operands widened exactly).
Status gemmGelu(const Tensor &a, const Tensor &b, bool transB,
                const Tensor &bias, const Tensor &out, const Tensor &pre,
                int threads = 0);
/// dsc.matmul_gelu_grad: out = round((a @ op(b)) * gelu_tanh'(pre)), the
/// product summed in f32 (f64) and not rounded before the multiplication;
/// pre and out [M, N] in a's dtype (16-bit pre read as f32). Shapes and
/// dtypes as gemmGelu's.
Status matmulGeluGrad(const Tensor &a, const Tensor &b, bool transB,
                      const Tensor &pre, const Tensor &out, int threads = 0);
/// gradLhs = gradOut @ rhs^T, gradRhs = lhs^T @ gradOut, each summed over
/// the batch dims its operand was broadcast along. Either may be absent.
Status matmulBackward(const Tensor &lhs, const Tensor &rhs,
                      const Tensor &gradOut, const Tensor &gradLhs,
                      const Tensor &gradRhs, int threads = 0);

/// out (rank 2) = op(lhs) @ op(rhs), plus out's contents when `accumulate`;
/// lhs and rhs rank 2 of one dtype, out that dtype or f32 (a 16-bit product
/// accumulated in f32).
Status matmulAccumulate(const Tensor &lhs, bool transLhs, const Tensor &rhs,
                        bool transRhs, bool accumulate, const Tensor &out,
                        int threads = 0);
/// dsc.linear_cross_entropy (see linear_cross_entropy.h): the summed softmax
/// cross-entropy of input @ op(weight) against labels into `loss`, and the
/// gradients of seed * loss, a [chunk, V] block of logits at a time.
Status linearCrossEntropy(const Tensor &input, const Tensor &weight,
                          bool transWeight, const Tensor &labels,
                          std::optional<int64_t> ignoreIndex,
                          const Tensor &seed, const Tensor &logits,
                          const Tensor &chunkLoss, const Tensor &loss,
                          const Tensor &gradInput, const Tensor &gradWeight,
                          const Tensor &init = Tensor());

struct GemmAttrs {
  double alpha = 1.0, beta = 1.0;
  bool transA = false, transB = false;
};
/// alpha * op(a) @ op(b) + beta * c; c (optional) broadcasts to [M, N].
Status gemm(const Tensor &a, const Tensor &b, const Tensor &c,
            const GemmAttrs &attrs, const Tensor &out, int threads = 0);
Status gemmBackward(const Tensor &a, const Tensor &b, const Tensor &c,
                    const GemmAttrs &attrs, const Tensor &gradOut,
                    const Tensor &gradA, const Tensor &gradB,
                    const Tensor &gradC, int threads = 0);

//===----------------------------------------------------------------------===//
// Convolution and pooling (NC + spatial layout, any number of spatial dims)
//===----------------------------------------------------------------------===//

/// ONNX Conv attributes; pads is [begin..., end...]. Empty lists default to
/// ones / zeros.
struct ConvAttrs {
  std::vector<int64_t> strides, pads, dilations;
  int64_t group = 1;
};
/// input [N, C, x...], weight [M, C/group, k...], bias [M] (optional).
Status conv(const Tensor &input, const Tensor &weight, const Tensor &bias,
            const ConvAttrs &attrs, const Tensor &out, int threads = 0);
/// Each of gradInput, gradWeight, gradBias may be absent.
Status convBackward(const Tensor &input, const Tensor &weight,
                    const ConvAttrs &attrs, const Tensor &gradOut,
                    const Tensor &gradInput, const Tensor &gradWeight,
                    const Tensor &gradBias, int threads = 0);

struct PoolAttrs {
  std::vector<int64_t> kernelShape, strides, pads, dilations;
  bool ceilMode = false;
  bool countIncludePad = false;
};
/// The output spatial shape ONNX gives (with ceil_mode, a window that would
/// start in the end padding is dropped, as PyTorch does).
Status poolOutputShape(const Tensor &input, const PoolAttrs &attrs,
                       std::vector<int64_t> &outShape);
/// indices (optional, i64, out's shape) receives the flat spatial position
/// of the maximum within its (n, c) plane; ties take the first.
Status maxPool(const Tensor &input, const PoolAttrs &attrs, const Tensor &out,
               const Tensor &indices = Tensor());
/// Routes each gradient to its window's first maximum in `input`.
Status maxPoolBackward(const Tensor &input, const PoolAttrs &attrs,
                       const Tensor &gradOut, const Tensor &gradIn);
Status avgPool(const Tensor &input, const PoolAttrs &attrs, const Tensor &out);
Status avgPoolBackward(const Tensor &input, const PoolAttrs &attrs,
                       const Tensor &gradOut, const Tensor &gradIn);
/// [N, C, x...] -> [N, C, 1...].
Status globalAvgPool(const Tensor &input, const Tensor &out);
Status globalMaxPool(const Tensor &input, const Tensor &out);
Status globalAvgPoolBackward(const Tensor &gradOut, const Tensor &gradIn);
Status globalMaxPoolBackward(const Tensor &input, const Tensor &gradOut,
                             const Tensor &gradIn);

//===----------------------------------------------------------------------===//
// Normalization, softmax, losses, dropout
//===----------------------------------------------------------------------===//

/// Statistics over all dims but 1. Normalizes with the biased variance;
/// newRunningVar uses the unbiased one. saveMean and saveInvStd ([C],
/// optional) receive the batch mean and 1/sqrt(var + eps).
Status batchNormTrain(const Tensor &input, const Tensor &scale,
                      const Tensor &bias, const Tensor &runningMean,
                      const Tensor &runningVar, double epsilon, double momentum,
                      const Tensor &out, const Tensor &newRunningMean,
                      const Tensor &newRunningVar,
                      const Tensor &saveMean = Tensor(),
                      const Tensor &saveInvStd = Tensor());
Status batchNormTrainBackward(const Tensor &input, const Tensor &scale,
                              double epsilon, const Tensor &gradOut,
                              const Tensor &gradIn, const Tensor &gradScale,
                              const Tensor &gradBias);
Status batchNorm(const Tensor &input, const Tensor &scale, const Tensor &bias,
                 const Tensor &mean, const Tensor &var, double epsilon,
                 const Tensor &out);
/// The statistics are constants: gradIn, gradScale, gradBias (each optional).
Status batchNormBackward(const Tensor &input, const Tensor &scale,
                         const Tensor &mean, const Tensor &var, double epsilon,
                         const Tensor &gradOut, const Tensor &gradIn,
                         const Tensor &gradScale, const Tensor &gradBias);
/// scale and bias (optional) have the shape of dims [axis, rank).
Status layerNorm(const Tensor &input, const Tensor &scale, const Tensor &bias,
                 int64_t axis, double epsilon, const Tensor &out);
/// With `residual` (f32, may be gradIn itself) gradIn is residual + the
/// input gradient, rounded as that f32 add; with `gradInCopy` (bf16 or
/// f16) it is also written there, rounded (dsc-fuse-norm-residual).
Status layerNormBackward(const Tensor &input, const Tensor &scale, int64_t axis,
                         double epsilon, const Tensor &gradOut,
                         const Tensor &gradIn, const Tensor &gradScale,
                         const Tensor &gradBias,
                         const Tensor &residual = Tensor(),
                         const Tensor &gradInCopy = Tensor());
/// RMSNorm: x / sqrt(mean(x^2) + epsilon) * scale over dims [axis, rank).
Status rmsNorm(const Tensor &input, const Tensor &scale, int64_t axis,
               double epsilon, const Tensor &out);
Status rmsNormBackward(const Tensor &input, const Tensor &scale, int64_t axis,
                       double epsilon, const Tensor &gradOut,
                       const Tensor &gradIn, const Tensor &gradScale,
                       const Tensor &residual = Tensor(),
                       const Tensor &gradInCopy = Tensor());

Status softmax(const Tensor &input, int64_t axis, const Tensor &out);
Status logSoftmax(const Tensor &input, int64_t axis, const Tensor &out);
/// From the forward result y: gradIn = y * (g - sum(g * y)).
Status softmaxBackward(const Tensor &out, int64_t axis, const Tensor &gradOut,
                       const Tensor &gradIn);
/// From the forward result y: gradIn = g - exp(y) * sum(g).
Status logSoftmaxBackward(const Tensor &out, int64_t axis,
                          const Tensor &gradOut, const Tensor &gradIn);

enum class Reduction { None, Sum, Mean };
/// "none", "sum", "mean"; anything else is an error.
Status parseReduction(const std::string &name, Reduction &out);

/// scores [N, C, d...], labels [N, d...] (i32/i64), weights [C] (optional).
/// loss is [N, d...] for None, a scalar otherwise. Mean divides by the summed
/// weight of labels that are not ignoreIndex.
///
/// Dtypes: everything f32, or everything f64; or scores bf16/f16 with f32
/// weights, loss and gradLoss, and gradScores f32 or the scores' 16-bit
/// dtype. 16-bit scores are widened exactly and the math is the f32 path's,
/// so the results are bitwise those of the f32 call on cast(scores -> f32),
/// a 16-bit gradScores being the f32 gradient rounded to nearest even.
Status softmaxCrossEntropy(const Tensor &scores, const Tensor &labels,
                           const Tensor &weights, Reduction reduction,
                           std::optional<int64_t> ignoreIndex,
                           const Tensor &loss);
Status softmaxCrossEntropyBackward(const Tensor &scores, const Tensor &labels,
                                   const Tensor &weights, Reduction reduction,
                                   std::optional<int64_t> ignoreIndex,
                                   const Tensor &gradLoss,
                                   const Tensor &gradScores);
Status nllLoss(const Tensor &input, const Tensor &labels, const Tensor &weights,
               Reduction reduction, std::optional<int64_t> ignoreIndex,
               const Tensor &loss);
Status nllLossBackward(const Tensor &input, const Tensor &labels,
                       const Tensor &weights, Reduction reduction,
                       std::optional<int64_t> ignoreIndex,
                       const Tensor &gradLoss, const Tensor &gradInput);

/// Element i is kept when uniform(seed, i) >= ratio and scaled by
/// 1 / (1 - ratio); uniform hashes (seed, i) with splitmix64, so the result
/// depends on neither threads nor call order. mask (bool) may be absent.
Status dropout(const Tensor &input, double ratio, uint64_t seed,
               const Tensor &out, const Tensor &mask);
Status dropoutBackward(const Tensor &gradOut, const Tensor &mask, double ratio,
                       const Tensor &gradIn);

//===----------------------------------------------------------------------===//
// Attention (dsc.attention, dsc.attention_backward)
//===----------------------------------------------------------------------===//

/// What dsc.attention computes besides its operands.
struct AttentionAttrs {
  double scale = 1.0; // multiplies q . k
  bool causal = false; // query i sees keys j <= i (top-left aligned)
  int64_t window = 0;  // > 0: query i sees keys j > i - window only
  double dropout = 0.0; // probability of zeroing a probability (training)
  uint64_t seed = 0;    // dropout's seed (attentionDropoutKeep)
  /// > 0: the most library workspace one backward call may take; a larger
  /// one runs over slices of the batch (CUDA: dsc/workspaces.h).
  int64_t workspaceLimit = 0;
  /// q, k, v, out and their gradients are [B, T, H, D] (tokens before
  /// heads) instead of [B, H, T, D]; lse and the mask keep their layout.
  bool seqMajor = false;
  /// false: the backward may add dQ with atomics (CUDA, cuDNN), run to run
  /// not bit for bit; the CPU's backward is deterministic either way.
  bool deterministic = true;
};

/// out = softmax(scale * q k^T + mask) v per (batch, head), with the
/// flash-attention recurrence (tiles of keys, running max and sum): no
/// [Tq, Tk] matrix is ever held.
///   q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv], Hq % Hkv == 0
///   (query head h reads key/value head h / (Hq / Hkv): grouped-query);
///   mask (optional) rank 4, each dim 1 or that of [B, Hq, Tq, Tk]: a float
///   mask is added to the scaled scores (-inf masks), a bool mask keeps
///   where true; causal and window mask further;
///   out [B, Hq, Tq, Dv] (q's dtype); lse [B, Hq, Tq] receives the log-sum-exp
///   of each row's masked scores (f32, f64 for f64 q): -inf for a row with no
///   key left, whose output is 0 (and its gradients 0).
/// Dropout zeroes probability (b, h, i, j) unless attentionDropoutKeep, and
/// scales the others by 1 / (1 - dropout); the lse is that of the
/// probabilities before dropout. f32 and f64 compute in their type; f16/bf16
/// storage is widened exactly, computed in f32, rounded once.
Status attention(const Tensor &q, const Tensor &k, const Tensor &v,
                 const Tensor &mask, const AttentionAttrs &attrs,
                 const Tensor &out, const Tensor &lse);
/// Gradients of attention from its operands, its out and lse (the forward's
/// results) and gradOut: gradQ, gradK, gradV (shapes of q, k, v; k and v
/// gradients summed over the query heads that share them).
Status attentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                         const Tensor &mask, const Tensor &out,
                         const Tensor &lse, const Tensor &gradOut,
                         const AttentionAttrs &attrs, const Tensor &gradQ,
                         const Tensor &gradK, const Tensor &gradV);

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

enum class ReduceOp { Sum, Mean, Max, Min, Prod };
/// Negative axes wrap; empty axes reduce every dim. Float dtypes, and i64/i32
/// for Sum, Max, Min, Prod.
Status reduce(ReduceOp op, const Tensor &input, I64s axes, bool keepdims,
              const Tensor &out);
/// Max/Min split the gradient evenly among tied extrema (as torch.amax).
Status reduceBackward(ReduceOp op, const Tensor &input, I64s axes,
                      bool keepdims, const Tensor &gradOut,
                      const Tensor &gradIn);

//===----------------------------------------------------------------------===//
// Data movement (any dtype)
//===----------------------------------------------------------------------===//

/// A copy (no-op when the views share data); the element counts must agree.
Status reshape(const Tensor &input, const Tensor &out);
Status transpose(const Tensor &input, I64s perm, const Tensor &out);
Status transposeBackward(const Tensor &gradOut, I64s perm,
                         const Tensor &gradIn);
/// Broadcast to out's shape; its backward is reduceToShape.
Status expand(const Tensor &input, const Tensor &out);
/// out[i] = input[offsets + i * strides] per dim; strides may be negative.
Status slice(const Tensor &input, I64s offsets, I64s strides,
             const Tensor &out);
Status sliceBackward(const Tensor &gradOut, I64s offsets, I64s strides,
                     const Tensor &gradIn);
Status concat(const Tensor *inputs, int count, int64_t axis, const Tensor &out);
Status concatBackward(const Tensor &gradOut, int64_t axis,
                      const Tensor *gradInputs, int count);
Status split(const Tensor &input, int64_t axis, const Tensor *outs, int count);
Status splitBackward(const Tensor *gradOuts, int count, int64_t axis,
                     const Tensor &gradIn);
/// ONNX Gather; indices in [-dim, dim) (negative wrap), others are an error.
Status gather(const Tensor &data, const Tensor &indices, int64_t axis,
              const Tensor &out);
/// Scatter-adds gradOut into zeros in index order (deterministic); float.
Status gatherBackward(const Tensor &gradOut, const Tensor &indices,
                      int64_t axis, const Tensor &gradData);
/// gradData = init + gatherBackward(gradOut), rounded as that add: each
/// indexed slice summed from zero in index order, then added to init's; an
/// unindexed slice is init's. init may be gradData (in place).
Status gatherBackwardInto(const Tensor &gradOut, const Tensor &indices,
                          int64_t axis, const Tensor &init,
                          const Tensor &gradData);
/// pads = [begin..., end...]; negative amounts crop.
Status pad(const Tensor &input, I64s pads, double value, const Tensor &out);
Status padBackward(const Tensor &gradOut, I64s pads, const Tensor &gradIn);
/// Keeps j - i >= k (upper) or j - i <= k (lower) in the last two dims; its
/// backward is trilu of the gradient.
Status trilu(const Tensor &input, bool upper, int64_t k, const Tensor &out);
/// dsc.rotate_half: over the last dim (d = 2h), out[i] = -input[i + h] for
/// i < h, input[i - h] otherwise; the negation flips the sign bit (as
/// dsc.neg), so the result is exact. Float dtypes; out like input.
Status rotateHalf(const Tensor &input, const Tensor &out);
/// Running sum along `axis` (ONNX CumSum): f32, f64, i32, i64; one
/// sequential sum per line, so results do not depend on threading.
Status cumsum(const Tensor &input, int64_t axis, bool exclusive, bool reverse,
              const Tensor &out);

} // namespace dsc::cpu

#endif // DSC_RUNTIME_CPU_KERNELS_H
