//===- Target.h - what the backend of a module can do -----------*- C++ -*-===//
//
// The module attribute `dsc.target` describes the backend a module is
// compiled for; passes (dsc-fuse-elementwise) and code generation consult
// its capabilities instead of branching on a target name:
//
//   module attributes {dsc.target = {name = "cuda", arch = "sm_90a"}}
//
// `name` selects a known target ("cpu", "cuda") and its defaults; the
// capability keys below may override them. A module without the attribute
// is for the CPU.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_DIALECTS_DSC_IR_TARGET_H
#define DSC_DIALECTS_DSC_IR_TARGET_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <string>

namespace dsc {

struct TargetDescription {
  /// "cpu" (the CPU runtime, dsc::cpu) or "cuda" (dsc::cuda: cuBLASLt,
  /// cuDNN, NCCL, generated kernels).
  std::string name = "cpu";
  /// The GPU code a cuda program carries ("sm_90a"); empty for the CPU.
  std::string arch;
  /// `generated_kernels`: dsc.fused ops become kernels generated into the
  /// program (dsc-fuse-elementwise forms them).
  bool generatedKernels = false;
  /// `device_memory`: tensors and constants live in device memory, so the
  /// step reads its seed and step counter from the rank's host copies.
  bool deviceMemory = false;
  /// `async_collectives`: collectives run on their own stream and a
  /// dsc.wait waits for their completion event (else they are synchronous
  /// and a wait is the identity).
  bool asyncCollectives = false;
  /// `strided_attention`: the 16-bit attention kernels (cuDNN's) read and
  /// write [B, T, H, D] operands through strides, so canonicalization folds
  /// head transposes into dsc.attention (seq_major); elsewhere a seq_major
  /// call copies in the runtime, outside the memory plan.
  bool stridedAttention = false;
  /// `gemm_epilogues`: the GEMM library has epilogues (bias, GELU, and an
  /// operand reduced over K: cuBLASLt's BGRADB, which the runtime takes
  /// where its own column sums cannot), so dsc-fuse-gemm-epilogue computes a
  /// linear layer's bias gradient with its weight gradient
  /// (dsc.matmul_bias_grad) and the bias gradient is summed from the
  /// 16-bit gradient the GEMM reads.
  bool gemmEpilogues = false;
  /// `buffer_alignment`: every arena range starts at a multiple of this
  /// many bytes. On CUDA 256, what cudaMalloc gives: cuBLASLt picks its
  /// algorithm by its operands' alignment, so with every buffer as aligned
  /// as any, a GEMM's kernel (and so its bits) does not depend on where
  /// the plan put its operands (with or without recomputation, offload).
  uint64_t bufferAlignment = 64;

  /// The defaults of a known target; failure (with a message in `error`)
  /// for an unknown name.
  static mlir::FailureOr<TargetDescription> forName(llvm::StringRef name,
                                                    llvm::StringRef arch,
                                                    std::string &error);
  /// The module's `dsc.target` (the CPU when absent); errors at the module.
  static mlir::FailureOr<TargetDescription> of(mlir::ModuleOp module);

  mlir::DictionaryAttr toAttr(mlir::MLIRContext *ctx) const;
};

/// Sets `dsc.target` on the module.
void setTarget(mlir::ModuleOp module, const TargetDescription &target);

} // namespace dsc

#endif // DSC_DIALECTS_DSC_IR_TARGET_H
