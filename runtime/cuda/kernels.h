//===- kernels.h - CUDA kernels for the dsc ops -----------------*- C++ -*-===//
//
// The CUDA backend of the runtime: one function per call the code generator
// emits (compiler/codegen), with the same name, operands and semantics as its
// reference in cpu/kernels.h and cpu/step_kernels.h, so that a program
// generated for --target cuda is the CPU program with `cpu::` bound to
// `dsc::cuda`. Conventions, in addition to the CPU ones:
//
//  - Every Tensor's data is device memory of the GPU of the rank bound to
//    the calling thread (context.h), except where a comment says otherwise.
//  - Calls are asynchronous: they check shapes and dtypes on the host, then
//    enqueue work on the rank's compute stream and return. A launch failure
//    is returned at once, naming the call; with DSC_CUDA_SYNC=1 in the
//    environment every call also waits for its kernels, so a fault inside a
//    kernel is reported by the call that caused it.
//  - Results are deterministic: no atomics on floats; every output element
//    is reduced in a fixed order, so two runs give the same bits.
//  - Float math in f32 for f32 (tf32 in GEMMs only when allowed, see
//    context.h) and f64 for f64; f16 and bf16 tensors are moved and cast,
//    and GEMMs take them with f32 accumulation.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CUDA_KERNELS_H
#define DSC_RUNTIME_CUDA_KERNELS_H

#include "cpu/kernels.h"
#include "cpu/step_kernels.h"

#include <optional>

namespace dsc::cuda {

// The attribute and enum types are the CPU backend's.
using cpu::AdamwTensors;
using cpu::AttentionAttrs;
using cpu::BinaryOp;
using cpu::ConvAttrs;
using cpu::GemmAttrs;
using cpu::LrSchedule;
using cpu::PoolAttrs;
using cpu::ReduceOp;
using cpu::Reduction;
using cpu::UnaryOp;
// Host-side helpers shared with the CPU backend.
using cpu::dropoutSeed;
using cpu::parseLrSchedule;
using cpu::parseReduction;
using cpu::poolOutputShape;

//===- Elementwise (elementwise.cu) ---------------------------------------===//

Status unary(UnaryOp op, const Tensor &input, const Tensor &out);
Status leakyRelu(const Tensor &input, double alpha, const Tensor &out);
Status gelu(const Tensor &input, bool tanhApproximation, const Tensor &out);
Status swiglu(const Tensor &gate, const Tensor &up, const Tensor &out);
Status clip(const Tensor &input, std::optional<double> min,
            std::optional<double> max, const Tensor &out);
Status binary(BinaryOp op, const Tensor &lhs, const Tensor &rhs,
              const Tensor &out);
Status where(const Tensor &cond, const Tensor &x, const Tensor &y,
             const Tensor &out);
Status cast(const Tensor &input, const Tensor &out);
Status fill(const Tensor &out, double value);
Status dropout(const Tensor &input, double ratio, uint64_t seed,
               const Tensor &out, const Tensor &mask);
Status trilu(const Tensor &input, bool upper, int64_t k, const Tensor &out);
/// As cpu::rotateHalf (16-byte chunks where the halves allow).
Status rotateHalf(const Tensor &input, const Tensor &out);
Status cumsum(const Tensor &input, int64_t axis, bool exclusive, bool reverse,
              const Tensor &out);

//===- Data movement and reductions (data_movement.cu, reduce.cu) --------===//

Status reshape(const Tensor &input, const Tensor &out);
Status transpose(const Tensor &input, I64s perm, const Tensor &out);
Status expand(const Tensor &input, const Tensor &out);
Status slice(const Tensor &input, I64s offsets, I64s strides,
             const Tensor &out);
Status sliceBackward(const Tensor &gradOut, I64s offsets, I64s strides,
                     const Tensor &gradIn);
Status concat(const Tensor *inputs, int count, int64_t axis, const Tensor &out);
Status split(const Tensor &input, int64_t axis, const Tensor *outs, int count);
Status gather(const Tensor &data, const Tensor &indices, int64_t axis,
              const Tensor &out);
Status gatherBackward(const Tensor &gradOut, const Tensor &indices,
                      int64_t axis, const Tensor &gradData);
Status gatherBackwardInto(const Tensor &gradOut, const Tensor &indices,
                          int64_t axis, const Tensor &init,
                          const Tensor &gradData);
Status pad(const Tensor &input, I64s pads, double value, const Tensor &out);
Status reduce(ReduceOp op, const Tensor &input, I64s axes, bool keepdims,
              const Tensor &out);

//===- GEMMs through cuBLASLt (linalg.cu) ---------------------------------===//

Status matmul(const Tensor &lhs, const Tensor &rhs, const Tensor &out);
/// matmul of op(lhs) and op(rhs), where op swaps the last two dims of an
/// operand whose flag is set (dsc.matmul's transpose_lhs / transpose_rhs):
/// cuBLASLt reads the stored operand transposed.
Status matmulTransposed(const Tensor &lhs, bool transLhs, const Tensor &rhs,
                        bool transRhs, const Tensor &out);
Status gemm(const Tensor &a, const Tensor &b, const Tensor &c,
            const GemmAttrs &attrs, const Tensor &out);
/// As cpu::matmulBiasGrad: the product, then the 16-bit operand's column
/// sums (16-byte loads, f32 within a thread, f64 across row chunks) into
/// biasGrad; where those cannot take the operand (not 16-bit, 8 does not
/// divide its columns, unaligned), one cuBLASLt call whose BGRADB (lhs) or
/// BGRADA (rhs) epilogue sums it, or the product and a reduction where
/// cuBLASLt has no such algorithm. DSC_BIAS_GRAD_EPILOGUE=1 prefers the
/// epilogue (a measurement).
Status matmulBiasGrad(const Tensor &lhs, const Tensor &rhs, bool sumRhs,
                      const Tensor &out, const Tensor &biasGrad);
/// As cpu::gemmGelu: one cuBLASLt call whose GELU_AUX_BIAS (GELU_AUX without
/// a bias) epilogue writes out = round(gelu(s)) and, as its aux matrix,
/// pre = round(s). Where cuBLASLt has no such algorithm (N not a multiple
/// of 8, a misaligned pre), the product (and bias) goes into pre, then a
/// kernel writes out = round(gelu(f32(pre))): s is rounded once more than
/// the epilogue rounds it (16-bit out may differ by an ulp). f32, f16 and
/// bf16; f64 fails as Unimplemented (no GELU epilogue).
Status gemmGelu(const Tensor &a, const Tensor &b, bool transB,
                const Tensor &bias, const Tensor &out, const Tensor &pre);
/// As cpu::matmulGeluGrad: one cuBLASLt call with the DGELU epilogue (aux =
/// pre). The fallback writes the product into out, then out =
/// round(f32(out) * gelu'(f32(pre))): the product rounded once more.
/// Dtypes as gemmGelu's.
Status matmulGeluGrad(const Tensor &a, const Tensor &b, bool transB,
                      const Tensor &pre, const Tensor &out);
/// As cpu::matmulAccumulate: a 16-bit product into f32 is one cuBLASLt call
/// with f32 C and D (beta 1 when accumulating).
Status matmulAccumulate(const Tensor &lhs, bool transLhs, const Tensor &rhs,
                        bool transRhs, bool accumulate, const Tensor &out);
/// As cpu::linearCrossEntropy, on the device (no host synchronization).
Status linearCrossEntropy(const Tensor &input, const Tensor &weight,
                          bool transWeight, const Tensor &labels,
                          std::optional<int64_t> ignoreIndex,
                          const Tensor &seed, const Tensor &logits,
                          const Tensor &chunkLoss, const Tensor &loss,
                          const Tensor &gradInput, const Tensor &gradWeight,
                          const Tensor &init = Tensor());

//===- Convolution through cuDNN, pooling (conv_pool.cu) ------------------===//

Status conv(const Tensor &input, const Tensor &weight, const Tensor &bias,
            const ConvAttrs &attrs, const Tensor &out);
Status convBackwardInput(const Tensor &gradOut, const Tensor &weight,
                         const ConvAttrs &attrs, const Tensor &gradInput);
Status convBackwardWeight(const Tensor &gradOut, const Tensor &input,
                          const ConvAttrs &attrs, const Tensor &gradWeight);
Status maxPool(const Tensor &input, const PoolAttrs &attrs, const Tensor &out,
               const Tensor &indices = Tensor());
Status maxPoolBackward(const Tensor &input, const PoolAttrs &attrs,
                       const Tensor &gradOut, const Tensor &gradIn);
Status avgPool(const Tensor &input, const PoolAttrs &attrs, const Tensor &out);
Status avgPoolBackward(const Tensor &input, const PoolAttrs &attrs,
                       const Tensor &gradOut, const Tensor &gradIn);
Status globalAvgPool(const Tensor &input, const Tensor &out);
Status globalMaxPool(const Tensor &input, const Tensor &out);

//===- Attention (attention.cu) -------------------------------------------===//

/// As cpu::attention. bf16/f16 without dropout run cuDNN's fused flash
/// attention (when the loaded cuDNN supports the graph); everything else,
/// f32 and f64 included, runs dsc's own tiled kernel (same dropout mask as
/// the CPU: attentionDropoutKeep).
Status attention(const Tensor &q, const Tensor &k, const Tensor &v,
                 const Tensor &mask, const AttentionAttrs &attrs,
                 const Tensor &out, const Tensor &lse);
Status attentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                         const Tensor &mask, const Tensor &out,
                         const Tensor &lse, const Tensor &gradOut,
                         const AttentionAttrs &attrs, const Tensor &gradQ,
                         const Tensor &gradK, const Tensor &gradV);

//===- Normalization, softmax, losses (norm_loss.cu) ----------------------===//

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
/// Dtypes as cpu::softmaxCrossEntropy: all f32, all f64, or bf16/f16 scores
/// with f32 weights, loss and gradLoss and an f32 or 16-bit gradScores
/// (bitwise the f32 call's results on cast(scores -> f32), the 16-bit
/// gradient rounded to nearest even). Labels stay on the device; no host
/// synchronization beyond the forward's label check (see norm_loss.cu).
Status softmaxCrossEntropy(const Tensor &scores, const Tensor &labels,
                           const Tensor &weights, Reduction reduction,
                           std::optional<int64_t> ignoreIndex,
                           const Tensor &loss);
Status softmaxCrossEntropyBackward(const Tensor &scores, const Tensor &labels,
                                   const Tensor &weights, Reduction reduction,
                                   std::optional<int64_t> ignoreIndex,
                                   const Tensor &gradLoss,
                                   const Tensor &gradScores);
/// softmaxCrossEntropy and softmaxCrossEntropyBackward of the summed loss
/// (no class weights) in one kernel over contiguous rows: the same bits as
/// the two calls, each row read twice instead of three times (scores and
/// gradScores may be one buffer, as the backward's). Other layouts run the
/// two calls.
Status softmaxCrossEntropyWithBackward(const Tensor &scores,
                                       const Tensor &labels,
                                       std::optional<int64_t> ignoreIndex,
                                       const Tensor &gradLoss,
                                       const Tensor &loss,
                                       const Tensor &gradScores);
Status nllLoss(const Tensor &input, const Tensor &labels, const Tensor &weights,
               Reduction reduction, std::optional<int64_t> ignoreIndex,
               const Tensor &loss);
Status nllLossBackward(const Tensor &input, const Tensor &labels,
                       const Tensor &weights, Reduction reduction,
                       std::optional<int64_t> ignoreIndex,
                       const Tensor &gradLoss, const Tensor &gradInput);

//===- Optimizer (optimizer.cu) -------------------------------------------===//

/// One fused kernel over the whole (flat, bucketed) parameter: the
/// multi-tensor AdamW of PyTorch's foreach/fused paths, since
/// dsc-zero-partition packs every parameter of a bucket into one tensor.
Status adamw(const Tensor &param, const Tensor &grad, const Tensor &expAvg,
             const Tensor &expAvgSq, const Tensor &lr, const Tensor &beta1,
             const Tensor &beta2, const Tensor &eps, const Tensor &weightDecay,
             const Tensor &step, const Tensor &newParam,
             const Tensor &newExpAvg, const Tensor &newExpAvgSq);
/// As cpu::adamwMulti (same checks and errors, same bits up to the device's
/// double pow in the bias corrections, as for adamw): every entry in one
/// launch (several past 360 entries, the most one kernel parameter table
/// holds). The launch grid-strides over chunks of 2048 elements of the
/// entries laid end to end, with 16-byte loads and stores where an entry's
/// pointers are aligned. No host synchronization and no allocation, so it
/// can be captured in a CUDA graph; the hyperparameters, step, gradScale
/// and gradPrescale are read on the device. A step below 1 writes nothing
/// (as adamw).
Status adamwMulti(const AdamwTensors *tensors, size_t count, const Tensor &lr,
                  const Tensor &beta1, const Tensor &beta2, const Tensor &eps,
                  const Tensor &weightDecay, const Tensor &step,
                  const Tensor &gradScale = Tensor(),
                  const Tensor &gradPrescale = Tensor());
/// As cpu::sumSquares (same checks, errors and chunks; the same result up
/// to the order of the double additions): each table of up to 1024 tensors
/// one launch that grid-strides over their chunks (16-byte loads where
/// aligned, the same elements per thread where not), one double partial per
/// chunk in the scratch buffer, then one block adds the partials in a fixed
/// tree. The bits depend only on the shapes, not on the alignment. No host
/// synchronization, so it can be captured in a CUDA graph; scale is read on the
/// device.
Status sumSquares(const Tensor *tensors, size_t count, const Tensor &scale,
                  const Tensor &out);
Status sgd(const Tensor &param, const Tensor &grad,
           const Tensor &momentumBuffer, const Tensor &lr,
           const Tensor &momentum, const Tensor &weightDecay,
           const Tensor &step, double dampening, bool nesterov,
           const Tensor &newParam, const Tensor &newMomentumBuffer);
Status lrSchedule(const Tensor &step, const Tensor &baseLr, LrSchedule kind,
                  int64_t warmupSteps, int64_t totalSteps,
                  double warmupMinRatio, double minRatio, const Tensor &lr);

//===- Offload to host memory (offload.cu) --------------------------------===//

// As cpu/offload.h, on the bound rank's two offload streams beside its
// compute stream (context.h: made by its first offload call, which a step's
// first, never captured, run makes): copies on its copy stream, in issue
// order, and host tasks on its host stream, in issue order; between them
// only the per-buffer events below, so a step's copies down, host tasks and
// copies up overlap. Host memory is pinned (Device::allocateHost, pinHost).
// Captured into a CUDA graph, the forks and joins become the graph's edges,
// copies its memcpy nodes and host tasks its host nodes. An event counts
// only where it was recorded: in the capture being made, or outside any
// when not capturing (one recorded elsewhere is an earlier step's, which
// that step's offloadJoin ordered).

/// The copy stream waits for an event recorded on the compute stream now
/// (the work issued so far: a copy to the host reads its result, a copy to
/// the device overwrites memory it may have used) and, to the device
/// (!toHost), for the last host task whose `writes` had src; then
/// cudaMemcpyAsync(dst, src, cudaMemcpyDefault) and the copy event of dst
/// (keyed by dst.data) after it. Outside a capture src and dst are checked
/// to be device and pinned host memory (or the reverse, !toHost).
Status offloadCopy(const Tensor &src, const Tensor &dst, bool toHost,
                   const char *what);
/// The host stream waits for the copy events of `reads` and `writes` (a
/// copy into a tensor the task overwrites lands first), then
/// cudaLaunchHostFunc on it (in a capture that did not bring the host
/// stream in yet, forked from the compute stream first), then records the
/// host-write event of each of `writes` (keyed by data), which later copies
/// from it to the device wait for. A host task does not wait for the
/// compute stream, nor for copies out of what it writes issued before it.
/// One object per (rank, site) holds fn and what and is handed to CUDA: fn
/// is replaced on every call (a site's last launch has run first) and a
/// captured graph calls the one of its capture, so fn owns what it reads
/// (captured by value, never a pointer into the caller's stack) and is the
/// same work for every buffer set of the step. A site is called once per
/// captured step. The first failure of the rank's host tasks ("host task
/// <what>: <message>", an exception included) is kept, its later host tasks
/// skipped, and Device::synchronize returns it (clearing it).
Status hostTask(int site, std::function<Status()> fn, const char *what,
                std::initializer_list<Tensor> reads,
                std::initializer_list<Tensor> writes);
/// cudaStreamWaitEvent(compute, copy event of dst). No copy into dst
/// recorded (in this capture, when capturing; outside one, when not) is an
/// error.
Status offloadWait(const Tensor &dst, const char *what);
/// The compute stream waits for all offload work issued so far: an event
/// recorded on each of the copy and host streams. A no-op without offload
/// streams; while capturing, a stream the capture did not fork onto is left
/// out. A capture (replayStep) joins both streams itself too.
Status offloadJoin();

} // namespace dsc::cuda

#endif // DSC_RUNTIME_CUDA_KERNELS_H
