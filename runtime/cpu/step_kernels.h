//===- step_kernels.h - CPU kernels for the rest of a step ------*- C++ -*-===//
//
// The kernels generated train steps need beyond kernels.h: the optimizer ops
// (adamw, sgd, lr_schedule), the two halves of the conv gradient as
// separate calls (conv_backward_input / conv_backward_weight), filling a
// buffer with one value (splat constants), and the seed of each dropout.
// Same conventions as kernels.h: caller-allocated results, checked shapes
// and dtypes, a Status naming the call, no accumulation into results.
// The offload calls (offloadCopy, hostTask, offloadWait, offloadJoin) are
// cpu/offload.h's, included here.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CPU_STEP_KERNELS_H
#define DSC_RUNTIME_CPU_STEP_KERNELS_H

#include "cpu/kernels.h"
#include "cpu/offload.h"

namespace dsc::cpu {

/// Writes `value` to every element of `out` (any dtype; float to int
/// truncates, to bool is value != 0).
Status fill(const Tensor &out, double value);

/// dsc.conv_backward_input: the gradient of conv with respect to its input,
/// whose shape is gradInput's; the input itself is not needed.
Status convBackwardInput(const Tensor &gradOut, const Tensor &weight,
                         const ConvAttrs &attrs, const Tensor &gradInput,
                         int threads = 0);
/// dsc.conv_backward_weight: the gradient of conv with respect to its
/// weight, whose shape is gradWeight's; the weight itself is not needed.
Status convBackwardWeight(const Tensor &gradOut, const Tensor &input,
                          const ConvAttrs &attrs, const Tensor &gradWeight,
                          int threads = 0);

/// dsc.adamw, PyTorch's AdamW. Hyperparameters are scalar f32 or f64
/// tensors, `step` a scalar i64 (1 for the first step). param, grad and the
/// states share one float dtype and shape; results may not overlap operands
/// except element for element (newParam may be param, and so on).
///   param  = param - lr * weight_decay * param
///   m      = beta1 * m + (1 - beta1) * grad
///   v      = beta2 * v + (1 - beta2) * grad^2
///   param  = param - lr / (1 - beta1^t) * m / (sqrt(v / (1 - beta2^t)) + eps)
Status adamw(const Tensor &param, const Tensor &grad, const Tensor &expAvg,
             const Tensor &expAvgSq, const Tensor &lr, const Tensor &beta1,
             const Tensor &beta2, const Tensor &eps, const Tensor &weightDecay,
             const Tensor &step, const Tensor &newParam,
             const Tensor &newExpAvg, const Tensor &newExpAvgSq);

/// One parameter's tensors for adamwMulti: the operands and results of one
/// adamw call, plus an optional compute copy (data == nullptr: none), a
/// bf16 or f16 tensor of param's shape that receives newParam rounded to its
/// dtype (round to nearest even, as cast does; f64 goes through f32 first,
/// as cast does).
struct AdamwTensors {
  Tensor param, grad, expAvg, expAvgSq;    // operands
  Tensor newParam, newExpAvg, newExpAvgSq; // results
  Tensor computeCopy;                      // optional result
};

/// adamw over `count` parameters in one call, with the gradient scaled
/// first and the compute copy written after. For every entry the results
/// are bitwise those of
///   binary(Mul, grad, gradPrescale, pre)     (when gradPrescale is present,
///                                             else pre = grad)
///   binary(Mul, pre, gradScale, scaled)          (when gradScale is present)
///   adamw(param, scaled, expAvg, ..., newParam, newExpAvg, newExpAvgSq)
///   cast(newParam, computeCopy)                  (when computeCopy is present)
/// without writing the scaled gradient anywhere (grad is only read).
/// Every entry passes adamw's checks; all share one dtype (f32 or f64);
/// gradScale and gradPrescale, when present, are scalars of that dtype.
/// Results may be their operands' storage element for element (newParam ==
/// param, ...), as for
/// adamw; the compute copy overlaps nothing. Errors name the entry:
/// "adamw_multi(entry=3, param=f32[4], grad=f32[5], ...): ...". Zero
/// entries is a no-op. Elements are split over `threads` (0: hardware
/// concurrency); every element is computed the same whatever the split.
Status adamwMulti(const AdamwTensors *tensors, size_t count, const Tensor &lr,
                  const Tensor &beta1, const Tensor &beta2, const Tensor &eps,
                  const Tensor &weightDecay, const Tensor &step,
                  const Tensor &gradScale = Tensor(),
                  const Tensor &gradPrescale = Tensor(), int threads = 0);

/// dsc.sum_squares: out = the sum over every element x of the `count`
/// tensors of double(v) * double(v), v = x * scale rounded to the tensors'
/// dtype (v = x when scale is absent), accumulated in double and rounded
/// once to out's dtype. The tensors share one dtype, f32 or f64; scale is a
/// float scalar of f32 or that dtype. Each tensor is cut into chunks of
/// sumSquaresChunk(total elements) (dsc/workspaces.h), each chunk summed in
/// order and the chunks' sums added in order, so the result does not
/// depend on `threads` (0: hardware concurrency). Zero tensors give 0.
Status sumSquares(const Tensor *tensors, size_t count, const Tensor &scale,
                  const Tensor &out, int threads = 0);

/// dsc.sgd, PyTorch's SGD with momentum:
///   g   = grad + weight_decay * param
///   buf = step == 1 ? g : momentum * buf + (1 - dampening) * g
///   g   = nesterov ? g + momentum * buf : buf
///   param = param - lr * g
/// With momentum == 0 the buffer is not used: g stays as computed and
/// newMomentumBuffer receives the old buffer unchanged.
Status sgd(const Tensor &param, const Tensor &grad,
           const Tensor &momentumBuffer, const Tensor &lr,
           const Tensor &momentum, const Tensor &weightDecay,
           const Tensor &step, double dampening, bool nesterov,
           const Tensor &newParam, const Tensor &newMomentumBuffer);

enum class LrSchedule { Constant, WarmupCosine, WarmupLinear };
/// "constant", "warmup_cosine", "warmup_linear"; anything else is an error.
Status parseLrSchedule(const std::string &name, LrSchedule &out);

/// dsc.lr_schedule: lr = baseLr * ratio(step), with w = warmupSteps,
/// T = totalSteps, t = step:
///   t <= w:        warmupMinRatio + (1 - warmupMinRatio) * t / w
///   WarmupCosine:  minRatio + (1 - minRatio) * 0.5 * (1 + cos(pi * p))
///   WarmupLinear:  minRatio + (1 - minRatio) * (1 - p)
///   Constant:      1
/// where p = (t - w) / (T - w) clamped to [0, 1] (1 when T <= w), so the
/// rate stays at minRatio after T. `step` is a scalar i64; baseLr and lr are
/// scalars of one float dtype.
Status lrSchedule(const Tensor &step, const Tensor &baseLr, LrSchedule kind,
                  int64_t warmupSteps, int64_t totalSteps,
                  double warmupMinRatio, double minRatio, const Tensor &lr);

/// The seed of one dropout: a splitmix64 hash of the run's seed, the
/// optimizer step, the call (micro-batch) that runs the op and the op's
/// index in its function, so no two dropouts of a run share a mask.
uint64_t dropoutSeed(uint64_t runSeed, int64_t step, int64_t call, int64_t op);
/// How many dropoutSeed calls the calling thread has made: a value drawn on
/// the host for each step, which a captured CUDA graph would repeat.
int64_t stepVaryingDraws();

} // namespace dsc::cpu

#endif // DSC_RUNTIME_CPU_STEP_KERNELS_H
