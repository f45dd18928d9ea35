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

def DscAutodiff : Pass<"dsc-autodiff", "mlir::ModuleOp"> {
  let summary = "Reverse-mode differentiation of the forward function";
  let description = [{
    Builds `@<output>` from `@<function>`: the same forward computation, then
    its reverse sweep, returning the forward results followed by one gradient
    per trainable parameter (`dsc.grad = "<name>"`, in argument order). A
    parameter used several times (a tied weight) gets the sum of its uses.
    Each op states its vector-Jacobian product through the
    `VJPOpInterface`; the pass has no per-op code. Values that do not depend
    on a parameter get no gradient; an op on the gradient path without the
    interface is an error located at its ONNX node.

    Before:
    ```mlir
    func.func @forward(%w: tensor<3xf32> {dsc.param = "w"},
                       %x: tensor<3xf32> {dsc.input = "x"})
        -> (tensor<f32> {dsc.output = "loss"}) {
      %0 = dsc.mul %w, %x : tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
      %1 = dsc.reduce_sum %0 {axes = array<i64: 0>, keepdims = false}
          : tensor<3xf32> -> tensor<f32>
      return %1 : tensor<f32>
    }
    ```
    After (`@forward` is kept):
    ```mlir
    func.func @forward_backward(...) -> (tensor<f32> {dsc.output = "loss"},
                                         tensor<3xf32> {dsc.grad = "w"}) {
      ... forward ...
      %one = dsc.constant dense<1.0> : tensor<f32>
      %g0 = dsc.reshape %one {shape = array<i64: 1>} ...
      %g1 = dsc.expand %g0 {shape = array<i64: 3>} ...
      %gw = dsc.mul %g1, %x ...
      return %1, %gw : tensor<f32>, tensor<3xf32>
    }
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", /*default=*/"\"forward\"",
           "The function to differentiate">,
    Option<"output", "output", "std::string",
           /*default=*/"\"forward_backward\"",
           "Name of the function to create">
  ];
}

#endif // DSC_PASSES_TD
