// RUN: dsc-opt %s --split-input-file --dsc-mixed-precision="precision=bf16" -verify-diagnostics

// A module without the training step: the pass needs dsc-optimizer's output.
// expected-error @+1 {{dsc-mixed-precision: needs @train_step and @forward_backward; run dsc-optimizer first}}
module {
  func.func @forward(%w: tensor<2x2xf32> {dsc.param = "w"}) -> (tensor<f32> {dsc.output = "loss"}) {
    %l = dsc.reduce_sum %w {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x2xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// Twice is refused: the masters are already fp32 and the copies 16-bit.
// expected-error @+1 {{dsc-mixed-precision: the module is already in "bf16"}}
module attributes {dsc.precision = "bf16"} {
  func.func @forward_backward(%w: tensor<2x2xf32> {dsc.param = "w"}) -> (tensor<f32> {dsc.output = "loss"}) {
    %l = dsc.reduce_sum %w {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x2xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
  func.func @train_step(%w: tensor<2x2xf32> {dsc.param = "w"}) -> (tensor<f32> {dsc.output = "loss"}) {
    %l = call @forward_backward(%w) : (tensor<2x2xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
