//===- Passes.td - every dsc pass -----------------------------------------===//
#ifndef DSC_PASSES_TD
#define DSC_PASSES_TD

include "mlir/Pass/PassBase.td"

def DscVerifyStatic : Pass<"dsc-verify-static", "mlir::ModuleOp"> {
  let summary = "Check that a module is in the form every later pass expects";
  let description = [{
    The importer promises static shapes and no shape arithmetic. This pass
    checks that promise on any module, e.g. one written by hand for a lit
    test: every value is a tensor of static shape, every function argument
    says what it is (`dsc.param`, `dsc.input` or `dsc.buffer`), and the
    `@forward` function returns the loss as a scalar first.

    Example that passes:
    ```mlir
    func.func @forward(%w: tensor<4x4xf32> {dsc.param = "w"},
                       %x: tensor<2x4xf32> {dsc.input = "x"})
        -> (tensor<f32> {dsc.output = "loss"}) {
      %0 = dsc.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
      %1 = dsc.reduce_mean %0 {axes = array<i64: 0, 1>, keepdims = false}
          : tensor<2x4xf32> -> tensor<f32>
      return %1 : tensor<f32>
    }
    ```
  }];
  let options = [
    Option<"requireLoss", "require-loss", "bool", /*default=*/"true",
           "Require @forward to return a scalar loss as its first result">
  ];
}

#endif // DSC_PASSES_TD
