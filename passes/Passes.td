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

def DscOptimizer : Pass<"dsc-optimizer", "mlir::ModuleOp"> {
  let summary = "Build the training step: accumulation, clipping, schedule, "
                "optimizer update";
  let description = [{
    From `@forward_backward` (dsc-autodiff's output) builds `@train_step`:

    1. the global batch (dim 0 = micro-batch x accum-steps) is sliced into
       micro-batches, each runs `@forward_backward` (buffers such as
       batch-norm statistics carry from one to the next), losses and
       gradients are averaged;
    2. the global gradient norm is computed and, when `clip` > 0, gradients
       are scaled by min(1, clip / (norm + 1e-6)) as
       torch.nn.utils.clip_grad_norm_ does;
    3. the learning rate comes from `dsc.lr_schedule` at the step;
    4. every parameter is updated by `dsc.adamw` or `dsc.sgd`; parameters
       whose name matches `no-decay` get no weight decay.

    Hyperparameters are arguments of `@train_step` (`dsc.hyper = "lr"`...)
    so that a compiled program can override them; the option values are
    their defaults, recorded in the module's `dsc.hypers`.

    ```mlir
    func.func @train_step(%p: tensor<3xf32> {dsc.param = "w"},
        %m: tensor<3xf32> {dsc.opt_state = "w/exp_avg"},
        %v: tensor<3xf32> {dsc.opt_state = "w/exp_avg_sq"},
        %x: tensor<4x3xf32> {dsc.input = "x"},
        %lr: tensor<f32> {dsc.hyper = "lr"}, ...,
        %step: tensor<i64> {dsc.step}, %seed: tensor<i64> {dsc.seed})
        -> (tensor<f32> {dsc.output = "loss"},
            tensor<3xf32> {dsc.param_update = "w"}, ...) {
      %r:2 = call @forward_backward(%p, %x) : ...
      ...
      %new:3 = dsc.adamw %p, %g, %m, %v, %lr1, %b1, %b2, %eps, %wd, %step
      return %r#0, %new#0, %new#1, %new#2, ...
    }
    ```
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "adamw or sgd">,
    Option<"lr", "lr", "double", /*default=*/"1e-3", "Base learning rate">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.01",
           "Weight decay (decoupled for AdamW, L2 for SGD)">,
    Option<"momentum", "momentum", "double", /*default=*/"0.9",
           "SGD momentum">,
    Option<"dampening", "dampening", "double", /*default=*/"0.0",
           "SGD dampening">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false",
           "SGD with Nesterov momentum">,
    Option<"schedule", "schedule", "std::string",
           /*default=*/"\"constant\"",
           "constant, warmup_cosine or warmup_linear">,
    Option<"warmupSteps", "warmup-steps", "int64_t", /*default=*/"0",
           "Linear warm-up steps">,
    Option<"totalSteps", "total-steps", "int64_t", /*default=*/"0",
           "Steps at which the schedule ends">,
    Option<"warmupMinRatio", "warmup-min-ratio", "double", /*default=*/"0.0",
           "LR ratio at the start of warm-up">,
    Option<"minRatio", "min-ratio", "double", /*default=*/"0.0",
           "LR ratio at the end of the decay">,
    Option<"clip", "clip", "double", /*default=*/"0.0",
           "Global gradient-norm clipping threshold; 0 disables it">,
    Option<"accumSteps", "accum-steps", "int64_t", /*default=*/"1",
           "Micro-batches per optimizer step">,
    Option<"noDecay", "no-decay", "std::string", /*default=*/"\"\"",
           "Regex: parameters whose name matches get no weight decay">
  ];
}

#endif // DSC_PASSES_TD
