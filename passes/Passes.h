//===- Passes.h - dsc pass declarations and registration --------*- C++ -*-===//
#ifndef DSC_PASSES_PASSES_H
#define DSC_PASSES_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace dsc {

/// dsc-fuse-classifier's default chunk of logits (dsc compile's
/// --classifier-chunk). Each chunk past the first re-reads and re-writes the
/// f32 weight gradient it accumulates into (Llama-3.2-1B's 128256 x 2048:
/// 2 GiB of traffic; those GEMMs took 1.05 ms each in an H100 breakdown,
/// bench/results/2026-12-07-h100-callD-llama_kernels.txt, against 0.64 ms
/// for the same FLOPs without the accumulation), so fewer, larger chunks
/// pay until the scratch itself matters: 1 GiB is 2 chunks for GPT-2 124M
/// at 16 x 1024 and for the Llama-3.2-1B shape at 4 x 2048.
constexpr int64_t kDefaultClassifierChunkBytes = int64_t(1) << 30;

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace dsc

#endif // DSC_PASSES_PASSES_H
