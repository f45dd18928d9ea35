// dsc-offload optimizer=nvme: the masters and moments that only the host
// AdamW reads live in files (dsc.memory = "nvme"); each is read into the
// host frame right before the AdamW and its update written back right after
// it, which the step returns in place of its argument.
// RUN: dsc-opt %s --split-input-file --dsc-offload=optimizer=nvme --verify-diagnostics | FileCheck %s
// The reads and writes have effects: CSE and canonicalization keep every
// one, in order, and dsc-in-place-updates writes each update into its
// argument's file.
// RUN: dsc-opt %s --split-input-file --dsc-offload=optimizer=nvme --cse --canonicalize --dsc-in-place-updates | FileCheck %s --check-prefix=PIPE
// Chunks of one parameter each: each chunk reads its own state just before
// it and writes it right after.
// RUN: dsc-opt %s --split-input-file --dsc-offload="optimizer=nvme chunk-elements=8" | FileCheck %s --check-prefix=CHUNK

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4x2xf32> {dsc.memory = "nvme", dsc.param = "w"}
// CHECK-SAME: %[[M:[a-z0-9]+]]: tensor<4x2xf32> {dsc.memory = "nvme", dsc.opt_state = "w/exp_avg"}
// CHECK-SAME: %[[V:[a-z0-9]+]]: tensor<4x2xf32> {dsc.memory = "nvme", dsc.opt_state = "w/exp_avg_sq"}
// CHECK-SAME: -> (tensor<f32> {dsc.output = "loss"}, tensor<4x2xf32> {dsc.memory = "nvme", dsc.param_update = "w"}
// CHECK-SAME: {dsc.memory = "nvme", dsc.opt_state_update = "w/exp_avg"}
// CHECK-SAME: {dsc.memory = "nvme", dsc.opt_state_update = "w/exp_avg_sq"}
// CHECK: %[[GH:.*]] = dsc.offload_copy %{{.*}} {to = "host"} : tensor<4x2xf32>
// CHECK: %[[SW:.*]] = dsc.nvme_read %[[W]] {dsc.on_host} : tensor<4x2xf32>
// CHECK-NEXT: %[[SM:.*]] = dsc.nvme_read %[[M]] {dsc.on_host} : tensor<4x2xf32>
// CHECK-NEXT: %[[SV:.*]] = dsc.nvme_read %[[V]] {dsc.on_host} : tensor<4x2xf32>
// CHECK-NEXT: %[[R:.*]]:4 = dsc.adamw_multi {{.*}}(%[[SW]], %[[GH]], %[[SM]], %[[SV]]) {dsc.on_host}
// CHECK-NEXT: %[[NW:.*]] = dsc.nvme_write %[[R]]#0 {dsc.on_host} : tensor<4x2xf32>
// CHECK-NEXT: %[[NM:.*]] = dsc.nvme_write %[[R]]#1 {dsc.on_host} : tensor<4x2xf32>
// CHECK-NEXT: %[[NV:.*]] = dsc.nvme_write %[[R]]#2 {dsc.on_host} : tensor<4x2xf32>
// CHECK-NEXT: dsc.offload_copy %[[R]]#3 {to = "device"} : tensor<4x2xbf16>
// CHECK-NEXT: return %{{.*}}, %[[NW]], %[[NM]], %[[NV]], %{{.*}}, %{{.*}}
// PIPE-LABEL: func.func @train_step
// PIPE-SAME: {dsc.in_place = 0 : i64, dsc.memory = "nvme", dsc.param_update = "w"}
// PIPE-SAME: {dsc.in_place = 1 : i64, dsc.memory = "nvme", dsc.opt_state_update = "w/exp_avg"}
// PIPE-SAME: {dsc.in_place = 2 : i64, dsc.memory = "nvme", dsc.opt_state_update = "w/exp_avg_sq"}
// PIPE-COUNT-3: dsc.nvme_read
// PIPE-NEXT: dsc.adamw_multi
// PIPE-COUNT-3: dsc.nvme_write
module {
func.func @train_step(%w: tensor<4x2xf32> {dsc.param = "w"},
    %m: tensor<4x2xf32> {dsc.opt_state = "w/exp_avg"},
    %v: tensor<4x2xf32> {dsc.opt_state = "w/exp_avg_sq"},
    %x: tensor<3x4xbf16> {dsc.input = "x"},
    %b1: tensor<f32> {dsc.hyper = "beta1"}, %b2: tensor<f32> {dsc.hyper = "beta2"},
    %eps: tensor<f32> {dsc.hyper = "eps"}, %wd: tensor<f32> {dsc.hyper = "weight_decay"},
    %step: tensor<i64> {dsc.step}, %base: tensor<f32> {dsc.hyper = "lr"})
    -> (tensor<f32> {dsc.output = "loss"},
        tensor<4x2xf32> {dsc.param_update = "w"},
        tensor<4x2xf32> {dsc.opt_state_update = "w/exp_avg"},
        tensor<4x2xf32> {dsc.opt_state_update = "w/exp_avg_sq"},
        tensor<4x2xf32> {dsc.grad = "w"}) {
  %c = dsc.cast %w {dsc.compute_copy, to = bf16} : tensor<4x2xf32> -> tensor<4x2xbf16>
  %y = dsc.matmul %x, %c : tensor<3x4xbf16>, tensor<4x2xbf16> -> tensor<3x2xbf16>
  %yf = dsc.cast %y {to = f32} : tensor<3x2xbf16> -> tensor<3x2xf32>
  %loss = dsc.reduce_sum %yf {axes = array<i64: 0, 1>, keepdims = false} : tensor<3x2xf32> -> tensor<f32>
  %xt = dsc.transpose %x {perm = array<i64: 1, 0>} : tensor<3x4xbf16> -> tensor<4x3xbf16>
  %ones = dsc.constant dense<1.0> : tensor<3x2xbf16>
  %g = dsc.matmul %xt, %ones : tensor<4x3xbf16>, tensor<3x2xbf16> -> tensor<4x2xbf16>
  %gf = dsc.cast %g {to = f32} : tensor<4x2xbf16> -> tensor<4x2xf32>
  %lr = dsc.lr_schedule %step, %base {kind = "constant"} : tensor<i64>, tensor<f32>
  %one = dsc.constant dense<1.0> : tensor<f32>
  %r:3 = dsc.adamw_multi %lr, %b1, %b2, %eps, %wd, %step, scale %one after %one, (%w, %gf, %m, %v) : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<f32>, (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
  return %loss, %r#0, %r#1, %r#2, %gf : tensor<f32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
}
}

// -----

// fp32 compute: the device reads the master itself (copied up after the
// update), so the master stays in host memory; only the moments, which the
// host AdamW alone reads, go to NVMe.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4x2xf32> {dsc.memory = "host", dsc.param = "w"}
// CHECK-SAME: {dsc.memory = "nvme", dsc.opt_state = "w/exp_avg"}
// CHECK-SAME: {dsc.memory = "nvme", dsc.opt_state = "w/exp_avg_sq"}
// CHECK-SAME: tensor<4x2xf32> {dsc.memory = "host", dsc.param_update = "w"}
// CHECK-SAME: {dsc.memory = "nvme", dsc.opt_state_update = "w/exp_avg"}
// CHECK-NOT: dsc.nvme_read %[[W]]
// CHECK: dsc.nvme_read
// CHECK-NEXT: dsc.nvme_read
// CHECK-NEXT: dsc.adamw_multi {{.*}}(%[[W]],
// CHUNK-LABEL: func.func @train_step
module {
func.func @train_step(%w: tensor<4x2xf32> {dsc.param = "w"},
    %m: tensor<4x2xf32> {dsc.opt_state = "w/exp_avg"},
    %v: tensor<4x2xf32> {dsc.opt_state = "w/exp_avg_sq"},
    %x: tensor<3x4xf32> {dsc.input = "x"}, %g: tensor<4x2xf32> {dsc.input = "g"},
    %s: tensor<f32> {dsc.hyper = "lr"}, %step: tensor<i64> {dsc.step})
    -> (tensor<3x2xf32> {dsc.output = "loss"},
        tensor<4x2xf32> {dsc.param_update = "w"},
        tensor<4x2xf32> {dsc.opt_state_update = "w/exp_avg"},
        tensor<4x2xf32> {dsc.opt_state_update = "w/exp_avg_sq"}) {
  %y = dsc.matmul %x, %w : tensor<3x4xf32>, tensor<4x2xf32> -> tensor<3x2xf32>
  %one = dsc.constant dense<1.0> : tensor<f32>
  %r:3 = dsc.adamw_multi %s, %s, %s, %s, %s, %step, scale %one after %one, (%w, %g, %m, %v) : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<f32>, (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>) -> tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
  return %y, %r#0, %r#1, %r#2 : tensor<3x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
}
}

// -----

// Two parameters in chunks of one: each chunk's state is read right before
// it, and the second chunk's reads move up before the first chunk's AdamW
// (they run on the I/O threads while it updates); each chunk's writes come
// right after it.
// CHUNK-LABEL: func.func @train_step({{.*}}dsc.param = "u"
// CHUNK: dsc.nvme_read %arg0
// CHUNK-NEXT: dsc.nvme_read %arg2
// CHUNK-NEXT: dsc.nvme_read %arg4
// CHUNK-NEXT: dsc.nvme_read %arg1
// CHUNK-NEXT: dsc.nvme_read %arg3
// CHUNK-NEXT: dsc.nvme_read %arg5
// CHUNK-NEXT: %[[A:.*]]:4 = dsc.adamw_multi
// CHUNK-NEXT: dsc.nvme_write %[[A]]#0
// CHUNK-NEXT: dsc.nvme_write %[[A]]#1
// CHUNK-NEXT: dsc.nvme_write %[[A]]#2
// CHUNK: %[[B:.*]]:4 = dsc.adamw_multi
// CHUNK-NEXT: dsc.nvme_write %[[B]]#0
module {
func.func @train_step(%w: tensor<4x2xf32> {dsc.param = "w"}, %u: tensor<8xf32> {dsc.param = "u"},
    %mw: tensor<4x2xf32> {dsc.opt_state = "w/exp_avg"}, %mu: tensor<8xf32> {dsc.opt_state = "u/exp_avg"},
    %vw: tensor<4x2xf32> {dsc.opt_state = "w/exp_avg_sq"}, %vu: tensor<8xf32> {dsc.opt_state = "u/exp_avg_sq"},
    %x: tensor<3x4xbf16> {dsc.input = "x"}, %gw: tensor<4x2xf32> {dsc.input = "gw"}, %gu: tensor<8xf32> {dsc.input = "gu"},
    %s: tensor<f32> {dsc.hyper = "lr"}, %step: tensor<i64> {dsc.step})
    -> (tensor<3x2xbf16> {dsc.output = "y"},
        tensor<4x2xf32> {dsc.param_update = "w"}, tensor<8xf32> {dsc.param_update = "u"},
        tensor<4x2xf32> {dsc.opt_state_update = "w/exp_avg"}, tensor<8xf32> {dsc.opt_state_update = "u/exp_avg"},
        tensor<4x2xf32> {dsc.opt_state_update = "w/exp_avg_sq"}, tensor<8xf32> {dsc.opt_state_update = "u/exp_avg_sq"}) {
  %c = dsc.cast %w {dsc.compute_copy, to = bf16} : tensor<4x2xf32> -> tensor<4x2xbf16>
  %cu = dsc.cast %u {dsc.compute_copy, to = bf16} : tensor<8xf32> -> tensor<8xbf16>
  %y = dsc.matmul %x, %c : tensor<3x4xbf16>, tensor<4x2xbf16> -> tensor<3x2xbf16>
  %one = dsc.constant dense<1.0> : tensor<f32>
  %r:6 = dsc.adamw_multi %s, %s, %s, %s, %s, %step, scale %one after %one, (%w, %u, %gw, %gu, %mw, %mu, %vw, %vu) : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<f32>, (tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>) -> tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>
  return %y, %r#0, %r#1, %r#2, %r#3, %r#4, %r#5 : tensor<3x2xbf16>, tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>
}
}
