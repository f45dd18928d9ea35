// RUN: dsc-opt %s --split-input-file --dsc-offload="optimizer=cpu params=cpu" --verify-diagnostics | FileCheck %s
// The copies and waits in the callee survive CSE and canonicalization (two
// gathers of one shard are two copies, not one).
// RUN: dsc-opt %s --split-input-file --dsc-offload="optimizer=cpu params=cpu" --cse --canonicalize --verify-diagnostics | FileCheck %s --check-prefix=PIPE

// dsc-offload params=cpu (--offload-param cpu): a ZeRO-3 shard's 16-bit
// compute copy stays on the host. The step's argument and its update are
// host memory: the host AdamW's bf16 result is returned as it is, with no
// copy up. In the callee the shard is copied up at the gather before
// (the function's start for the first) and waited for right before its
// own collective_input, at each gather: forward (%s0, then %s1) and the
// backward re-gather of %s1.
// CHECK-LABEL: func.func private @forward_backward
// CHECK-SAME: %[[S0:[a-z0-9]+]]: tensor<4xbf16> {dsc.bucket = 0 : i64, dsc.memory = "host", dsc.param_shard = "bucket0"}
// CHECK-SAME: %[[S1:[a-z0-9]+]]: tensor<4xbf16> {dsc.bucket = 1 : i64, dsc.memory = "host", dsc.param_shard = "bucket1"}
// CHECK-NEXT: %[[U0:.*]] = dsc.offload_copy %[[S0]] {to = "device"}
// CHECK-NEXT: %[[U1:.*]] = dsc.offload_copy %[[S1]] {to = "device"}
// CHECK-NEXT: %[[W0:.*]] = dsc.offload_wait %[[U0]]
// CHECK-NEXT: %[[C0:.*]] = dsc.collective_input %[[W0]]
// CHECK: %[[U2:.*]] = dsc.offload_copy %[[S1]] {to = "device"}
// CHECK-NEXT: %[[W1:.*]] = dsc.offload_wait %[[U1]]
// CHECK-NEXT: dsc.collective_input %[[W1]]
// CHECK: %[[W2:.*]] = dsc.offload_wait %[[U2]]
// CHECK-NEXT: dsc.collective_input %[[W2]]
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: {dsc.bucket = 0 : i64, dsc.memory = "host", dsc.param = "bucket0"}
// CHECK-SAME: %[[CC0:[a-z0-9]+]]: tensor<4xbf16> {dsc.compute_copy = "bucket0", dsc.memory = "host"}
// CHECK-SAME: %[[CC1:[a-z0-9]+]]: tensor<4xbf16> {dsc.compute_copy = "bucket1", dsc.memory = "host"}
// CHECK-SAME: tensor<4xbf16> {dsc.compute_copy_update = "bucket0", dsc.memory = "host"}
// CHECK-SAME: tensor<4xbf16> {dsc.compute_copy_update = "bucket1", dsc.memory = "host"}
// CHECK-NOT: dsc.offload_copy %[[CC0]]
// CHECK-NOT: dsc.offload_copy %[[CC1]]
// CHECK: call @forward_backward(%[[CC0]], %[[CC1]])
// CHECK: %[[R:.*]]:8 = dsc.adamw_multi {{.*}} {dsc.on_host}
// CHECK-NOT: {to = "device"}
// CHECK: return %[[R]]#0, %[[R]]#1, %[[R]]#6, %[[R]]#7 :
// PIPE-LABEL: func.func private @forward_backward
// PIPE-COUNT-3: dsc.offload_copy
// PIPE-LABEL: func.func @train_step
module {
shard.grid @dsc_ranks(shape = 1x2)
func.func private @forward_backward(%s0: tensor<4xbf16> {dsc.bucket = 0 : i64, dsc.param_shard = "bucket0"},
    %s1: tensor<4xbf16> {dsc.bucket = 1 : i64, dsc.param_shard = "bucket1"})
    -> (tensor<4xf32>, tensor<4xf32>) {
  %c0 = dsc.collective_input %s0 : tensor<4xbf16>
  %a0 = shard.all_gather %c0 on @dsc_ranks grid_axes = [1] gather_axis = 0 : tensor<4xbf16> -> tensor<8xbf16>
  %w0 = dsc.wait %a0 : tensor<8xbf16>
  %f0 = dsc.cast %w0 {to = f32} : tensor<8xbf16> -> tensor<8xf32>
  %c1 = dsc.collective_input %s1 : tensor<4xbf16>
  %a1 = shard.all_gather %c1 on @dsc_ranks grid_axes = [1] gather_axis = 0 : tensor<4xbf16> -> tensor<8xbf16>
  %w1 = dsc.wait %a1 : tensor<8xbf16>
  %f1 = dsc.cast %w1 {to = f32} : tensor<8xbf16> -> tensor<8xf32>
  %y = dsc.mul %f0, %f1 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %c2 = dsc.collective_input %s1 : tensor<4xbf16>
  %a2 = shard.all_gather %c2 on @dsc_ranks grid_axes = [1] gather_axis = 0 : tensor<4xbf16> -> tensor<8xbf16>
  %w2 = dsc.wait %a2 : tensor<8xbf16>
  %f2 = dsc.cast %w2 {to = f32} : tensor<8xbf16> -> tensor<8xf32>
  %g = dsc.mul %y, %f2 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %g0 = dsc.slice %g {offsets = array<i64: 0>, sizes = array<i64: 4>, strides = array<i64: 1>} : tensor<8xf32> -> tensor<4xf32>
  %g1 = dsc.slice %g {offsets = array<i64: 4>, sizes = array<i64: 4>, strides = array<i64: 1>} : tensor<8xf32> -> tensor<4xf32>
  return %g0, %g1 : tensor<4xf32>, tensor<4xf32>
}
func.func @train_step(%w0: tensor<4xf32> {dsc.bucket = 0 : i64, dsc.param = "bucket0"},
    %w1: tensor<4xf32> {dsc.bucket = 1 : i64, dsc.param = "bucket1"},
    %m0: tensor<4xf32> {dsc.bucket = 0 : i64, dsc.opt_state = "bucket0/exp_avg"},
    %m1: tensor<4xf32> {dsc.bucket = 1 : i64, dsc.opt_state = "bucket1/exp_avg"},
    %v0: tensor<4xf32> {dsc.bucket = 0 : i64, dsc.opt_state = "bucket0/exp_avg_sq"},
    %v1: tensor<4xf32> {dsc.bucket = 1 : i64, dsc.opt_state = "bucket1/exp_avg_sq"},
    %lr: tensor<f32> {dsc.hyper = "lr"}, %b1: tensor<f32> {dsc.hyper = "beta1"},
    %b2: tensor<f32> {dsc.hyper = "beta2"}, %eps: tensor<f32> {dsc.hyper = "eps"},
    %wd: tensor<f32> {dsc.hyper = "weight_decay"}, %step: tensor<i64> {dsc.step})
    -> (tensor<4xf32> {dsc.bucket = 0 : i64, dsc.in_place = 0 : i64, dsc.param_update = "bucket0"},
        tensor<4xf32> {dsc.bucket = 1 : i64, dsc.in_place = 1 : i64, dsc.param_update = "bucket1"}) {
  %c0 = dsc.cast %w0 {dsc.compute_copy, to = bf16} : tensor<4xf32> -> tensor<4xbf16>
  %c1 = dsc.cast %w1 {dsc.compute_copy, to = bf16} : tensor<4xf32> -> tensor<4xbf16>
  %g:2 = call @forward_backward(%c0, %c1) : (tensor<4xbf16>, tensor<4xbf16>) -> (tensor<4xf32>, tensor<4xf32>)
  %one = dsc.constant dense<1.0> : tensor<f32>
  %r:6 = dsc.adamw_multi %lr, %b1, %b2, %eps, %wd, %step, scale %one after %one, (%w0, %w1, %g#0, %g#1, %m0, %m1, %v0, %v1) : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<f32>, (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return %r#0, %r#1 : tensor<4xf32>, tensor<4xf32>
}
}

// -----

// Without ZeRO-3 shards (the compute copy is read by the step itself):
// nothing is only gathered, and params=cpu says what it needs.
// expected-error @+1 {{dsc-offload: params=cpu found no parameter shard that is only gathered; parameter offload needs --stage 3}}
func.func @train_step(%w: tensor<4xf32> {dsc.param = "w"},
    %m: tensor<4xf32> {dsc.opt_state = "w/exp_avg"},
    %v: tensor<4xf32> {dsc.opt_state = "w/exp_avg_sq"},
    %lr: tensor<f32> {dsc.hyper = "lr"}, %step: tensor<i64> {dsc.step})
    -> (tensor<4xf32> {dsc.in_place = 0 : i64, dsc.param_update = "w"}, tensor<4xf32>) {
  %c = dsc.cast %w {dsc.compute_copy, to = bf16} : tensor<4xf32> -> tensor<4xbf16>
  %y = dsc.cast %c {to = f32} : tensor<4xbf16> -> tensor<4xf32>
  %one = dsc.constant dense<1.0> : tensor<f32>
  %r:3 = dsc.adamw_multi %lr, %lr, %lr, %lr, %lr, %step, scale %one after %one, (%w, %y, %m, %v) : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<f32>, (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return %r#0, %y : tensor<4xf32>, tensor<4xf32>
}
