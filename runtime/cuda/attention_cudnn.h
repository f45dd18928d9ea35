//===- attention_cudnn.h - cuDNN's fused attention for dsc ------*- C++ -*-===//
//
// Internal to runtime/cuda: the cuDNN path of cuda::attention (SDPA graphs of
// the cuDNN frontend, attention_cudnn.cpp) and the small kernels it needs
// (attention.cu). Each entry returns std::nullopt when cuDNN does not take
// the request (then the caller runs dsc's own kernel), else the status of
// the enqueued cuDNN call.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CUDA_ATTENTION_CUDNN_H
#define DSC_RUNTIME_CUDA_ATTENTION_CUDNN_H

#include "cpu/checks_math.h"
#include "cuda/kernels.h"

#include <cstdint>
#include <optional>

namespace dsc::cuda::detail {

using cpu::detail::AttentionShape;

std::optional<Status> cudnnAttentionForward(const AttentionShape &s,
                                            const Tensor &q, const Tensor &k,
                                            const Tensor &v, const Tensor &mask,
                                            const AttentionAttrs &attrs,
                                            const Tensor &out,
                                            const Tensor &lse);
std::optional<Status> cudnnAttentionBackward(
    const AttentionShape &s, const Tensor &q, const Tensor &k, const Tensor &v,
    const Tensor &mask, const Tensor &out, const Tensor &lse,
    const Tensor &gradOut, const AttentionAttrs &attrs, const Tensor &gradQ,
    const Tensor &gradK, const Tensor &gradV);

/// Whether cuda::attention may use cuDNN: DSC_ATTENTION_CUDNN=0 in the
/// environment turns it off; benchmarks and tests set it to compare paths.
bool attentionCudnnEnabled();
void setAttentionCudnnEnabled(bool enabled);
/// How many forward and backward calls cuDNN has run in this process.
int64_t attentionCudnnForwardRuns();
int64_t attentionCudnnBackwardRuns();
/// The cuDNN backward calls those made (more than one where the batch was
/// sliced).
int64_t attentionCudnnBackwardCalls();

/// After cuDNN's forward: rows whose stats are -inf or NaN (no key left)
/// get out 0 and lse -inf, as the CPU defines them. lse is f32 [rows] with
/// rows = B x `heads` x `queries`; out is [B, heads, queries, dv], or
/// [B, queries, heads, dv] with `seqMajor`.
Status attentionFixEmptyRows(void *out, DType dtype, float *lse, int64_t rows,
                             int64_t heads, int64_t queries, int64_t dv,
                             bool seqMajor);
/// The stats cuDNN's backward reads: lse with -inf (empty rows) replaced by
/// +inf, so that exp(s - stats) = 0 there and their gradients are 0.
Status attentionStatsForCudnn(const float *lse, float *stats, int64_t rows);

} // namespace dsc::cuda::detail

#endif // DSC_RUNTIME_CUDA_ATTENTION_CUDNN_H
