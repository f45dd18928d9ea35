// dsc-offload overlap=true: the host AdamW runs during backward. The step's
// call is inlined (its random numbers drawn as call 1's), the chunks follow
// the order in which backward makes their gradients (w2's before w1's
// here), each gradient's normalization and copy to the host move up to
// right after backward makes it, and clipping's coefficient becomes its 1
// with the clip hyperparameter gone from the step and from dsc.hypers.
// RUN: dsc-opt %s --split-input-file --dsc-offload="optimizer=cpu overlap=true chunk-elements=4" --verify-diagnostics | FileCheck %s
// The effects keep every copy in place through CSE and canonicalization.
// RUN: dsc-opt %s --split-input-file --dsc-offload="optimizer=cpu overlap=true chunk-elements=4" --cse --canonicalize --verify-diagnostics | FileCheck %s --check-prefix=PIPE
// With a ratio (0.3: at most 8 of the 12 elements on the device) the chunk
// whose gradient comes last (w1's) stays on the device.
// RUN: dsc-opt %s --split-input-file --dsc-offload="optimizer=cpu overlap=true chunk-elements=4 ratio=0.3" --verify-diagnostics | FileCheck %s --check-prefix=RATIO
// Without overlap: the chunks in the parameters' order, after the call.
// RUN: dsc-opt %s --split-input-file --dsc-offload="optimizer=cpu chunk-elements=4" | FileCheck %s --check-prefix=PLAIN

// CHECK: module attributes {dsc.hypers = {lr = 1.000000e-03 : f64}}
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W1:[a-z0-9]+]]: tensor<4x2xf32> {dsc.memory = "host", dsc.param = "w1"}
// CHECK-NOT: dsc.hyper = "clip"
// CHECK-SAME: attributes {dsc.rng_call = 1 : i64}
// CHECK-NOT: call @forward_backward
// CHECK: dsc.constant {dsc.backward_begin}
// CHECK: %[[G2:.*]] = dsc.matmul {{.*}} -> tensor<2x2xbf16>
// CHECK: %[[G2F:.*]] = dsc.cast %[[G2]] {to = f32} : tensor<2x2xbf16> -> tensor<2x2xf32>
// CHECK-NEXT: %[[N2:.*]] = dsc.mul %[[G2F]]
// CHECK-NEXT: %[[H2:.*]] = dsc.offload_copy %[[N2]] {to = "host"} : tensor<2x2xf32>
// CHECK: %[[G1:.*]] = dsc.matmul {{.*}} -> tensor<4x2xbf16>
// CHECK: %[[G1F:.*]] = dsc.cast %[[G1]] {to = f32} : tensor<4x2xbf16> -> tensor<4x2xf32>
// CHECK-NEXT: %[[N1:.*]] = dsc.mul %[[G1F]]
// CHECK-NEXT: %[[H1:.*]] = dsc.offload_copy %[[N1]] {to = "host"} : tensor<4x2xf32>
// CHECK: dsc.sum_squares
// CHECK: %[[ONE:.*]] = dsc.constant {dsc.on_host} dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[ONE2:.*]] = dsc.constant {dsc.on_host} dense<1.000000e+00>
// CHECK-NEXT: dsc.adamw_multi {{.*}}, scale %[[ONE]] after %[[ONE2]], (%{{.*}}, %[[H2]], %{{.*}}, %{{.*}}) {dsc.on_host}
// CHECK: dsc.adamw_multi {{.*}}, (%[[W1]], %[[H1]], %{{.*}}, %{{.*}}) {dsc.on_host}
// CHECK-NOT: dsc.where
// CHECK: return
// PIPE-LABEL: func.func @train_step
// PIPE-COUNT-2: dsc.offload_copy {{.*}} {to = "host"} : tensor<{{[0-9]}}x2xf32>
// PIPE: dsc.adamw_multi {{.*}} {dsc.on_host}
// PIPE: dsc.adamw_multi {{.*}} {dsc.on_host}
// RATIO-LABEL: func.func @train_step
// RATIO-SAME: %{{[a-z0-9]+}}: tensor<4x2xf32> {dsc.param = "w1"}
// RATIO-SAME: %{{[a-z0-9]+}}: tensor<2x2xf32> {dsc.memory = "host", dsc.param = "w2"}
// RATIO: dsc.adamw_multi {{.*}} {dsc.on_host}
// RATIO: dsc.adamw_multi
// RATIO-NOT: dsc.on_host
// RATIO-SAME: tensor<4x2xf32>
// PLAIN-LABEL: func.func @train_step
// PLAIN-SAME: {dsc.hyper = "clip"}
// PLAIN: call @forward_backward
// PLAIN: dsc.adamw_multi {{.*}} tensor<4x2xf32>
// PLAIN: dsc.adamw_multi {{.*}} tensor<2x2xf32>
module attributes {dsc.hypers = {clip = 0.0 : f64, lr = 1.0e-3 : f64}} {
func.func @forward_backward(%c1: tensor<4x2xbf16>, %c2: tensor<2x2xbf16>,
    %x: tensor<3x4xbf16>)
    -> (tensor<f32>, tensor<f32>, tensor<4x2xf32>, tensor<2x2xf32>) {
  %h = dsc.matmul %x, %c1 : tensor<3x4xbf16>, tensor<4x2xbf16> -> tensor<3x2xbf16>
  %y = dsc.matmul %h, %c2 : tensor<3x2xbf16>, tensor<2x2xbf16> -> tensor<3x2xbf16>
  %yf = dsc.cast %y {to = f32} : tensor<3x2xbf16> -> tensor<3x2xf32>
  %loss = dsc.reduce_sum %yf {axes = array<i64: 0, 1>, keepdims = false} : tensor<3x2xf32> -> tensor<f32>
  %count = dsc.constant dense<6.0> : tensor<f32>
  %dy = dsc.constant {dsc.backward_begin} dense<1.0> : tensor<3x2xbf16>
  %ht = dsc.transpose %h {perm = array<i64: 1, 0>} : tensor<3x2xbf16> -> tensor<2x3xbf16>
  %g2 = dsc.matmul %ht, %dy : tensor<2x3xbf16>, tensor<3x2xbf16> -> tensor<2x2xbf16>
  %g2f = dsc.cast %g2 {to = f32} : tensor<2x2xbf16> -> tensor<2x2xf32>
  %c2t = dsc.transpose %c2 {perm = array<i64: 1, 0>} : tensor<2x2xbf16> -> tensor<2x2xbf16>
  %dh = dsc.matmul %dy, %c2t : tensor<3x2xbf16>, tensor<2x2xbf16> -> tensor<3x2xbf16>
  %xt = dsc.transpose %x {perm = array<i64: 1, 0>} : tensor<3x4xbf16> -> tensor<4x3xbf16>
  %g1 = dsc.matmul %xt, %dh : tensor<4x3xbf16>, tensor<3x2xbf16> -> tensor<4x2xbf16>
  %g1f = dsc.cast %g1 {to = f32} : tensor<4x2xbf16> -> tensor<4x2xf32>
  return %loss, %count, %g1f, %g2f : tensor<f32>, tensor<f32>, tensor<4x2xf32>, tensor<2x2xf32>
}
func.func @train_step(%w1: tensor<4x2xf32> {dsc.param = "w1"},
    %w2: tensor<2x2xf32> {dsc.param = "w2"},
    %m1: tensor<4x2xf32> {dsc.opt_state = "w1/exp_avg"},
    %v1: tensor<4x2xf32> {dsc.opt_state = "w1/exp_avg_sq"},
    %m2: tensor<2x2xf32> {dsc.opt_state = "w2/exp_avg"},
    %v2: tensor<2x2xf32> {dsc.opt_state = "w2/exp_avg_sq"},
    %x: tensor<3x4xbf16> {dsc.input = "x"},
    %b1: tensor<f32> {dsc.hyper = "beta1"}, %b2: tensor<f32> {dsc.hyper = "beta2"},
    %eps: tensor<f32> {dsc.hyper = "eps"}, %wd: tensor<f32> {dsc.hyper = "weight_decay"},
    %clip: tensor<f32> {dsc.hyper = "clip"},
    %step: tensor<i64> {dsc.step}, %base: tensor<f32> {dsc.hyper = "lr"})
    -> (tensor<f32> {dsc.output = "loss"},
        tensor<4x2xf32> {dsc.param_update = "w1"},
        tensor<2x2xf32> {dsc.param_update = "w2"},
        tensor<4x2xf32> {dsc.opt_state_update = "w1/exp_avg"},
        tensor<4x2xf32> {dsc.opt_state_update = "w1/exp_avg_sq"},
        tensor<2x2xf32> {dsc.opt_state_update = "w2/exp_avg"},
        tensor<2x2xf32> {dsc.opt_state_update = "w2/exp_avg_sq"},
        tensor<f32> {dsc.grad_norm}) {
  %c1 = dsc.cast %w1 {dsc.compute_copy, to = bf16} : tensor<4x2xf32> -> tensor<4x2xbf16>
  %c2 = dsc.cast %w2 {dsc.compute_copy, to = bf16} : tensor<2x2xf32> -> tensor<2x2xbf16>
  %r:4 = call @forward_backward(%c1, %c2, %x) : (tensor<4x2xbf16>, tensor<2x2xbf16>, tensor<3x4xbf16>) -> (tensor<f32>, tensor<f32>, tensor<4x2xf32>, tensor<2x2xf32>)
  %inv = dsc.reciprocal %r#1 {dsc.loss_normalizer} : tensor<f32>
  %loss = dsc.mul %r#0, %inv : tensor<f32>, tensor<f32> -> tensor<f32>
  %n1 = dsc.mul %r#2, %inv : tensor<4x2xf32>, tensor<f32> -> tensor<4x2xf32>
  %n2 = dsc.mul %r#3, %inv : tensor<2x2xf32>, tensor<f32> -> tensor<2x2xf32>
  %one = dsc.constant dense<1.0> : tensor<f32>
  %sq = dsc.sum_squares scale %one, (%n1, %n2) : tensor<f32>, (tensor<4x2xf32>, tensor<2x2xf32>) -> tensor<f32>
  %norm = dsc.sqrt %sq : tensor<f32>
  %tiny = dsc.constant dense<1.0e-6> : tensor<f32>
  %den = dsc.add %norm, %tiny : tensor<f32>, tensor<f32> -> tensor<f32>
  %q = dsc.div %clip, %den : tensor<f32>, tensor<f32> -> tensor<f32>
  %one2 = dsc.constant dense<1.0> : tensor<f32>
  %coef = dsc.min %one2, %q : tensor<f32>, tensor<f32> -> tensor<f32>
  %zero = dsc.constant dense<0.0> : tensor<f32>
  %on = dsc.greater %clip, %zero : tensor<f32>, tensor<f32> -> tensor<i1>
  %scale = dsc.where %on, %coef, %one2 : tensor<i1>, tensor<f32>, tensor<f32> -> tensor<f32>
  %lr = dsc.lr_schedule %step, %base {kind = "constant"} : tensor<i64>, tensor<f32>
  %u:6 = dsc.adamw_multi %lr, %b1, %b2, %eps, %wd, %step, scale %scale after %scale, (%w1, %w2, %n1, %n2, %m1, %m2, %v1, %v2) : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<f32>, (tensor<4x2xf32>, tensor<2x2xf32>, tensor<4x2xf32>, tensor<2x2xf32>, tensor<4x2xf32>, tensor<2x2xf32>, tensor<4x2xf32>, tensor<2x2xf32>) -> tensor<4x2xf32>, tensor<2x2xf32>, tensor<4x2xf32>, tensor<2x2xf32>, tensor<4x2xf32>, tensor<2x2xf32>
  return %loss, %u#0, %u#1, %u#2, %u#4, %u#3, %u#5, %norm : tensor<f32>, tensor<4x2xf32>, tensor<2x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<f32>
}
}

// -----

// Clipping at compile time: every update would wait for the global norm.
module attributes {dsc.hypers = {clip = 1.0 : f64}} {
func.func @forward_backward(%x: tensor<2xf32>) -> (tensor<f32>, tensor<2xf32>) {
  %l = dsc.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : tensor<2xf32> -> tensor<f32>
  return %l, %x : tensor<f32>, tensor<2xf32>
}
// expected-error @+1 {{dsc-offload: overlap (the host optimizer running during backward) needs --clip 0}}
func.func @train_step(%w: tensor<2xf32> {dsc.param = "w"},
    %m: tensor<2xf32> {dsc.opt_state = "w/exp_avg"},
    %v: tensor<2xf32> {dsc.opt_state = "w/exp_avg_sq"},
    %lr: tensor<f32> {dsc.hyper = "lr"}, %step: tensor<i64> {dsc.step})
    -> (tensor<2xf32> {dsc.param_update = "w"}, tensor<2xf32> {dsc.opt_state_update = "w/exp_avg"},
        tensor<2xf32> {dsc.opt_state_update = "w/exp_avg_sq"}) {
  %r:2 = call @forward_backward(%w) : (tensor<2xf32>) -> (tensor<f32>, tensor<2xf32>)
  %u:3 = dsc.adamw %w, %r#1, %m, %v, %lr, %lr, %lr, %lr, %lr, %step : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  return %u#0, %u#1, %u#2 : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
}
}
