//===- workspaces.h - Library workspaces beside the planned arena --------===//
//
// Device memory the CUDA runtime holds besides a program's planned tensors:
// cuBLASLt's fixed workspace and the scratch buffer its kernels share
// (sized by the largest call that needs one). Plain C++: the compiler's
// memory report estimates the same bytes from the step's ops with these
// rules (compiler/codegen/Workspaces.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef DSC_RUNTIME_WORKSPACES_H
#define DSC_RUNTIME_WORKSPACES_H

#include <cstddef>
#include <cstdint>

namespace dsc {

/// cuBLASLt's workspace, one per rank.
constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

/// The size the shared scratch buffer takes for a request of `bytes`: at
/// least 1 MiB, in 64 KiB steps.
inline size_t scratchBufferBytes(size_t bytes) {
  size_t want = bytes > (size_t(1) << 20) ? bytes : size_t(1) << 20;
  return (want + 0xFFFF) & ~size_t(0xFFFF);
}

/// The workspace one cuDNN attention backward call may take when the step
/// recomputes activations to save memory (dsc-recompute sets it as the
/// attention backward's workspace_limit); without one the call takes the
/// whole batch, which is faster.
constexpr int64_t kAttentionBackwardWorkspaceCap = int64_t(256) << 20;

/// Batch elements per cuDNN attention backward call, given the workspace
/// `wholeBytes` of one call over all `batch` elements. cuDNN's deterministic
/// backward keeps fp32 partial dQ sums, one set per 128 keys (1.1 GiB for
/// the Llama-3.2-1B shape at 4 x 2048 tokens): calls over equal slices of
/// the batch, the largest divisor whose share fits `cap` (one element at
/// least), share one smaller workspace (1.2% slower on that shape).
inline int64_t
attentionBackwardSlice(int64_t batch, int64_t wholeBytes,
                       int64_t cap = kAttentionBackwardWorkspaceCap) {
  if (batch <= 1 || wholeBytes <= cap)
    return batch;
  int64_t best = 1;
  for (int64_t d = 1; d < batch; ++d)
    if (batch % d == 0 && wholeBytes / batch * d <= cap)
      best = d;
  return best;
}

/// dsc.sum_squares on CUDA cuts each tensor into chunks of
/// sumSquaresChunk(total) elements (its last one shorter), `total` the
/// elements of all its tensors, and keeps one double partial per chunk in
/// the scratch buffer: at most about kSumSquaresTargetChunks chunks, plus
/// one per tensor. Chunks are multiples of 2048 elements, so every chunk of
/// a 16-byte aligned tensor starts aligned.
constexpr int64_t kSumSquaresTargetChunks = 8192;
inline int64_t sumSquaresChunk(int64_t total) {
  const int64_t unit = 2048, least = 4 * unit;
  int64_t want = total / kSumSquaresTargetChunks + 1;
  want = (want + unit - 1) / unit * unit;
  return want > least ? want : least;
}

} // namespace dsc

#endif // DSC_RUNTIME_WORKSPACES_H
