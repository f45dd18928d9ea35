//===- WorkspacesTest.cpp - the library workspaces a step will take -------===//
//
// estimateWorkspaces against the figures the rules give for the two
// benchmark shapes, whole and sliced under a workspace_limit of 256 MiB
// (measured on an H200, 2026-12-03: GPT-2 124M's scratch 385.6 MiB whole
// and 193.2 MiB sliced, the Llama-3.2-1B shape's 1.1 GiB whole and 273.3
// MiB sliced), the own kernel's rows, and no workspace for the CPU.
//
//===----------------------------------------------------------------------===//

#include "compiler/codegen/Workspaces.h"

#include "dialects/dsc/IR/DscOps.h"
#include "dialects/dsc/IR/Target.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include "gtest/gtest.h"

#include <string>

using namespace mlir;

namespace {

class WorkspacesTest : public ::testing::Test {
protected:
  WorkspacesTest() { ctx.loadDialect<dsc::DscDialect, func::FuncDialect>(); }

  /// A step with one attention backward of query [b, hq, t, 64] and
  /// key/value [b, hkv, t, 64] in `element`, for `target`, with
  /// `workspace_limit` (0: none).
  dsc::codegen::WorkspaceEstimate estimate(int64_t b, int64_t hq, int64_t hkv,
                                           int64_t t, const char *element,
                                           const char *target,
                                           int64_t limit = 0) {
    std::string q = "tensor<" + std::to_string(b) + "x" + std::to_string(hq) +
                    "x" + std::to_string(t) + "x64x" + element + ">";
    std::string k = "tensor<" + std::to_string(b) + "x" + std::to_string(hkv) +
                    "x" + std::to_string(t) + "x64x" + element + ">";
    std::string lse = "tensor<" + std::to_string(b) + "x" + std::to_string(hq) +
                      "x" + std::to_string(t) + "xf32>";
    std::string text =
        "func.func @step(%g: " + q + ", %q: " + q + ", %k: " + k +
        ", %v: " + k + ", %o: " + q + ", %l: " + lse + ") -> (" + q + ", " + k +
        ", " + k +
        ") {\n  %a, %b, %c = dsc.attention_backward %g, %q, %k, %v, %o, "
        "%l {causal = true, scale = 1.250000e-01 : f64, workspace_limit = " +
        std::to_string(limit) + " : i64} : " + q + ", " + q + ", " + k + ", " +
        k + ", " + q + ", " + lse + " -> " + q + ", " + k + ", " + k +
        "\n  return %a, %b, %c : " + q + ", " + k + ", " + k + "\n}\n";
    module = parseSourceString<ModuleOp>(text, &ctx);
    EXPECT_TRUE(module);
    std::string error;
    FailureOr<dsc::TargetDescription> desc =
        dsc::TargetDescription::forName(target, "sm_90a", error);
    EXPECT_TRUE(succeeded(desc)) << error;
    dsc::setTarget(*module, *desc);
    return dsc::codegen::estimateWorkspaces(*module);
  }

  MLIRContext ctx;
  OwningOpRef<ModuleOp> module;
};

constexpr uint64_t kMiB = uint64_t(1) << 20;
constexpr int64_t kLimit = int64_t(256) << 20;

TEST_F(WorkspacesTest, LlamaShape) {
  // Per element: 32 x 2048 x 64 x 4 B per 128 keys (16 sets) + a float per
  // row + the 32 heads' key and value gradients in bf16 = 272.25 MiB; then
  // the lse of all rows (1 MiB). Whole: 4 elements, 1090 MiB.
  dsc::codegen::WorkspaceEstimate e = estimate(4, 32, 8, 2048, "bf16", "cuda");
  EXPECT_EQ(e.fixed, 32 * kMiB);
  EXPECT_EQ(e.scratch, uint64_t(1143013376));
  EXPECT_EQ(e.scratchFor, "cuDNN attention backward workspace");
  // Over the limit: one element per call, 273.3 MiB.
  e = estimate(4, 32, 8, 2048, "bf16", "cuda", kLimit);
  EXPECT_EQ(e.scratch, uint64_t(286588928));
}

TEST_F(WorkspacesTest, Gpt2Shape) {
  // 24.05 MiB per element (8 sets of 12 x 1024 x 64 x 4 B, no grouped
  // heads): 385.6 MiB for 16 elements; 8 per call under the limit.
  EXPECT_EQ(estimate(16, 12, 12, 1024, "bf16", "cuda").scratch,
            uint64_t(404291584));
  EXPECT_EQ(estimate(16, 12, 12, 1024, "bf16", "cuda", kLimit).scratch,
            uint64_t(202571776));
  // 2 elements fit the limit: one call (48.1 MiB + 96 KiB of lse).
  EXPECT_EQ(estimate(2, 12, 12, 1024, "bf16", "cuda", kLimit).scratch,
            uint64_t(50593792));
}

TEST_F(WorkspacesTest, OwnKernelAndCpu) {
  // f32 attention runs the own kernel: three floats per row.
  dsc::codegen::WorkspaceEstimate e = estimate(2, 4, 4, 512, "f32", "cuda");
  EXPECT_EQ(e.scratchFor, "attention backward rows");
  EXPECT_EQ(e.scratch, kMiB); // (3 x 4096 + 1) x 4 B, at least 1 MiB
  EXPECT_EQ(estimate(4, 32, 8, 2048, "bf16", "cpu").total(), 0u);
}

} // namespace
