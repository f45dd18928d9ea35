// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer | FileCheck %s --check-prefix=ADAMW
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer="optimizer=sgd momentum=0.8 nesterov=true" | FileCheck %s --check-prefix=SGD
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer="accum-steps=2 clip=1.0 no-decay=bias schedule=warmup_cosine warmup-steps=10 total-steps=100" | FileCheck %s --check-prefix=ACCUM
// RUN: not dsc-opt %s --dsc-autodiff --dsc-optimizer="optimizer=lamb" 2>&1 | FileCheck %s --check-prefix=BADOPT
// RUN: not dsc-opt %s --dsc-optimizer 2>&1 | FileCheck %s --check-prefix=NOAD
// RUN: not dsc-opt %s --dsc-autodiff --dsc-optimizer="schedule=warmup_cosine warmup-steps=10 total-steps=5" 2>&1 | FileCheck %s --check-prefix=BADSCHED

func.func @forward(%w: tensor<3x2xf32> {dsc.param = "fc.weight"},
                   %b: tensor<3xf32> {dsc.param = "fc.bias"},
                   %x: tensor<4x2xf32> {dsc.input = "x"},
                   %y: tensor<4xi64> {dsc.input = "y"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %0 = dsc.gemm %x, %w, %b {trans_b = true}
      : tensor<4x2xf32>, tensor<3x2xf32>, tensor<3xf32> -> tensor<4x3xf32>
  %1 = dsc.softmax_cross_entropy %0, %y {reduction = "mean"}
      : tensor<4x3xf32>, tensor<4xi64> -> tensor<f32>
  return %1 : tensor<f32>
}

// ADAMW: module attributes {dsc.accum_steps = 1 : i64, dsc.hypers = {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, clip = 0.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64}, dsc.micro_batch = 4 : i64, dsc.optimizer = "adamw", dsc.tokens_per_example = 1 : i64}
// ADAMW-LABEL: func.func @train_step
// ADAMW-SAME: {dsc.param = "fc.weight"}
// ADAMW-SAME: {dsc.opt_state = "fc.weight/exp_avg"}
// ADAMW-SAME: {dsc.opt_state = "fc.weight/exp_avg_sq"}
// ADAMW-SAME: tensor<4x2xf32> {dsc.input = "x"}
// ADAMW-SAME: {dsc.hyper = "lr"}
// ADAMW-SAME: tensor<i64> {dsc.step}, %{{.*}}: tensor<i64> {dsc.seed}
// ADAMW-SAME: -> (tensor<f32> {dsc.output = "loss"}, tensor<3x2xf32> {dsc.param_update = "fc.weight"}
// ADAMW-SAME: {dsc.grad_norm}, tensor<f32> {dsc.lr})
// ADAMW: %[[FB:.*]]:3 = call @forward_backward
// ADAMW: dsc.lr_schedule %{{.*}}, %{{.*}} {kind = "constant"}
// ADAMW: dsc.adamw
// ADAMW: dsc.adamw
// ADAMW: return %[[FB]]#0

// SGD: dsc.optimizer = "sgd"
// SGD-LABEL: func.func @train_step
// SGD-SAME: {dsc.opt_state = "fc.weight/momentum_buffer"}
// SGD-SAME: {dsc.hyper = "momentum"}
// SGD: dsc.sgd {{.*}} {nesterov = true}

// Two micro-batches: the global batch is sliced; bias gets no decay.
// ACCUM: dsc.accum_steps = 2 : i64
// ACCUM-SAME: clip = 1.000000e+00 : f64
// ACCUM-LABEL: func.func @train_step
// ACCUM-SAME: tensor<8x2xf32> {dsc.input = "x"}
// ACCUM: dsc.slice %{{.*}} {offsets = array<i64: 0, 0>, sizes = array<i64: 4, 2>
// ACCUM: call @forward_backward
// ACCUM: dsc.slice %{{.*}} {offsets = array<i64: 4, 0>, sizes = array<i64: 4, 2>
// ACCUM: call @forward_backward
// The gradient norm: both gradients (scaled by 1 / accum-steps) in one
// dsc.sum_squares, no per-parameter reductions.
// ACCUM: %[[GW:.*]] = dsc.mul %{{.*}}, %{{.*}} : tensor<3x2xf32>, tensor<f32>
// ACCUM: %[[GB:.*]] = dsc.mul %{{.*}}, %{{.*}} : tensor<3xf32>, tensor<f32>
// ACCUM-NOT: dsc.reduce_sum
// ACCUM: %[[SQ:.*]] = dsc.sum_squares scale %{{.*}}, (%[[GW]], %[[GB]]) : tensor<f32>, (tensor<3x2xf32>, tensor<3xf32>) -> tensor<f32>
// ACCUM-NOT: dsc.reduce_sum
// ACCUM: dsc.sqrt %[[SQ]]
// ACCUM: dsc.lr_schedule {{.*}} {kind = "warmup_cosine", total_steps = 100 : i64, warmup_steps = 10 : i64}
// ACCUM: %[[ZERO:.*]] = dsc.constant dense<0.000000e+00> : tensor<f32>
// ACCUM: dsc.adamw %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ZERO]]

// BADOPT: error: dsc-optimizer: optimizer must be adamw or sgd, not 'lamb'
// NOAD: error: dsc-optimizer: no @forward_backward; run dsc-autodiff first
// BADSCHED: error: {{.*}}total_steps must exceed warmup_steps
