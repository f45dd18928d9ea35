//===- Workspaces.cpp - Library workspaces a compiled step will take -----===//
//
// The scratch requests of the CUDA kernels that need the most, from the
// shapes of their ops:
//   - attention backward through cuDNN (16-bit, no dropout, no bool mask):
//     its deterministic algorithm's workspace, measured with cuDNN 9.14 on
//     an H200 (GPT-2 124M at 16 x 1024 and the Llama-3.2-1B shape at
//     4 x 2048, 2026-12-03): fp32 partial dQ sums, one set per 128 keys,
//     a row sum per query, and with grouped heads the key and value
//     gradients of every query head before they are summed; the batch
//     sliced as the runtime slices it under the op's workspace_limit;
//     then the lse of every row;
//   - attention backward through the runtime's own kernel: three floats
//     per row;
//   - layer norm backward: per-row statistics and fp64 column partials;
//   - the gradient norm's sum_squares: a double per chunk.
// Smaller requests (reductions, loss flags) are not counted.
//
//===----------------------------------------------------------------------===//
#include "compiler/codegen/Workspaces.h"

#include "dialects/dsc/IR/DscOps.h"
#include "dialects/dsc/IR/Target.h"
#include "runtime/include/dsc/workspaces.h"

#include <algorithm>

using namespace mlir;

namespace dsc::codegen {

namespace {

int64_t elementBytes(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return std::max<int64_t>(1, t.getElementTypeBitWidth() / 8);
}

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

uint64_t align256(uint64_t v) { return (v + 255) & ~uint64_t(255); }

/// Scratch bytes of one attention backward call.
uint64_t attentionBackwardScratch(AttentionBackwardOp op, bool &cudnn) {
  bool sm = op.getSeqMajor();
  SmallVector<int64_t> q = attentionHeadsFirst(shapeOf(op.getQuery()), sm),
                       k = attentionHeadsFirst(shapeOf(op.getKey()), sm),
                       v = attentionHeadsFirst(shapeOf(op.getValue()), sm);
  if (q.size() != 4 || k.size() != 4 || v.size() != 4)
    return 0;
  int64_t b = q[0], hq = q[1], tq = q[2], d = q[3], hkv = k[1], tk = k[2],
          dv = v[3];
  int64_t rows = b * hq * tq;
  int64_t es = elementBytes(op.getQuery());
  bool boolMask = op.getMask() && cast<RankedTensorType>(op.getMask().getType())
                                      .getElementType()
                                      .isInteger(1);
  cudnn =
      es == 2 && op.getDropout().convertToDouble() == 0 && !boolMask && tk > 0;
  if (!cudnn) // the own kernel: delta, shift and inv per row, in T
    return uint64_t(3 * rows + 1) * uint64_t(es == 8 ? 8 : 4);
  int64_t perElement = hq * tq * d * 4 * ((tk + 127) / 128) + hq * tq * 4;
  if (hq != hkv)
    perElement += hq * tk * (d + dv) * es;
  int64_t limit = int64_t(op.getWorkspaceLimit());
  int64_t slice =
      limit > 0 ? attentionBackwardSlice(b, b * perElement, limit) : b;
  return align256(uint64_t(slice * perElement)) + uint64_t(rows) * 4 + 1;
}

/// Scratch bytes of one matmul_bias_grad's column sums of a 16-bit
/// gradient (rt::matmulBiasGrad's columnSums16: a double per column for
/// each chunk of 256 rows); 0 where it takes cuBLASLt's BGRAD epilogue.
uint64_t biasGradScratch(MatMulBiasGradOp op) {
  Value summed = op.getSumRhs() ? op.getRhs() : op.getLhs();
  ArrayRef<int64_t> x = shapeOf(summed);
  if (x.size() != 2 || elementBytes(summed) != 2 || x[1] % 8 != 0)
    return 0;
  int64_t chunks = std::max<int64_t>(1, (x[0] + 255) / 256);
  return chunks > 65535 ? 0 : align256(uint64_t(chunks * x[1]) * 8);
}

/// Scratch bytes of one layer norm backward call with scale or bias
/// gradients (rows of the last axis).
uint64_t layerNormBackwardScratch(LayerNormBackwardOp op) {
  ArrayRef<int64_t> x = shapeOf(op.getInput());
  if (x.empty())
    return 0;
  int64_t cols = x.back(), rows = 1;
  for (int64_t e : x.drop_back())
    rows *= e;
  int64_t chunks = std::clamp<int64_t>((rows + 31) / 32, 1, 1024);
  // The statistics' type: f64 for f64 inputs, else f32.
  uint64_t t = elementBytes(op.getInput()) == 8 ? 8 : 4;
  uint64_t rowKernels = align256(uint64_t(rows) * t) * 2 +
                        align256(uint64_t(2 * chunks * cols) * 8);
  // The held-row kernels (runtime/cuda/norm_loss.cu) write one partial row
  // of the scale's and the bias's sums per block of rows: 32 rows a block
  // for rows up to 1024 columns (layerNormBackwardWarp), 16 above
  // (layerNormBackwardHeld, kHeldRows), unbounded in count.
  int64_t held = (rows + 15) / 16;
  return std::max(rowKernels, align256(uint64_t(2 * held * cols) * 8));
}

/// Scratch bytes of one sum_squares call: a double per chunk.
uint64_t sumSquaresScratch(SumSquaresOp op) {
  int64_t total = 0, chunks = 0;
  for (Value t : op.getTensors())
    total += cast<RankedTensorType>(t.getType()).getNumElements();
  int64_t chunk = sumSquaresChunk(total);
  for (Value t : op.getTensors())
    chunks +=
        (cast<RankedTensorType>(t.getType()).getNumElements() + chunk - 1) /
        chunk;
  return uint64_t(chunks) * 8;
}

} // namespace

WorkspaceEstimate estimateWorkspaces(ModuleOp module) {
  WorkspaceEstimate est;
  FailureOr<TargetDescription> target = TargetDescription::of(module);
  if (failed(target) || !target->deviceMemory)
    return est;
  est.fixed = kGemmWorkspaceBytes;
  auto need = [&](uint64_t bytes, const char *what) {
    if (bytes > est.scratch)
      est.scratch = bytes, est.scratchFor = what;
  };
  module.walk([&](Operation *op) {
    if (auto a = dyn_cast<AttentionBackwardOp>(op)) {
      bool cudnn = false;
      uint64_t bytes = attentionBackwardScratch(a, cudnn);
      need(bytes, cudnn ? "cuDNN attention backward workspace"
                        : "attention backward rows");
    } else if (auto n = dyn_cast<LayerNormBackwardOp>(op)) {
      need(layerNormBackwardScratch(n), "layer norm backward partials");
    } else if (auto s = dyn_cast<SumSquaresOp>(op)) {
      need(sumSquaresScratch(s), "sum of squares partials");
    } else if (auto m = dyn_cast<MatMulBiasGradOp>(op)) {
      need(biasGradScratch(m), "bias gradient partials");
    }
  });
  if (est.scratch)
    est.scratch = scratchBufferBytes(est.scratch);
  return est;
}

} // namespace dsc::codegen
