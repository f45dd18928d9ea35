// RUN: dsc-opt %s --split-input-file --dsc-offload=optimizer=cpu --verify-diagnostics | FileCheck %s
// The copies and waits have effects: CSE and canonicalization keep every
// one of them, in place, and the host ops stay marked.
// RUN: dsc-opt %s --split-input-file --dsc-offload=optimizer=cpu --cse --canonicalize --verify-diagnostics | FileCheck %s --check-prefix=PIPE
// Chunks of at most 8 elements: one grouped AdamW per parameter here.
// RUN: dsc-opt %s --split-input-file --dsc-offload="optimizer=cpu chunk-elements=8" --verify-diagnostics | FileCheck %s --check-prefix=CHUNK
// Each chunk's gradients come down one host task ahead (default two).
// RUN: dsc-opt %s --split-input-file --dsc-offload="optimizer=cpu chunk-elements=8 copy-ahead=1" --verify-diagnostics | FileCheck %s --check-prefix=AHEAD
// RUN: dsc-opt %s --split-input-file --dsc-offload="optimizer=cpu chunk-elements=8 copy-ahead=0" --verify-diagnostics | FileCheck %s --check-prefix=AHEAD0
// ratio (DeepSpeed's offload_optimizer.ratio): the last chunks, up to
// 1 - ratio of the elements, stay on the device with their masters, state
// and casts; 0 leaves the IR as it is; out of range, or with params=cpu,
// an error.
// RUN: dsc-opt %s --split-input-file --dsc-offload="optimizer=cpu chunk-elements=8 ratio=0.5" --verify-diagnostics | FileCheck %s --check-prefix=RATIO
// RUN: dsc-opt %s --split-input-file --dsc-offload="optimizer=cpu chunk-elements=8 ratio=0.6" --verify-diagnostics | FileCheck %s --check-prefix=RATIO6
// (With ratio=0 the cases below that expect an error compile: nothing is
// offloaded.)
// RUN: not dsc-opt %s --split-input-file --dsc-offload="optimizer=cpu chunk-elements=8 ratio=0" 2>/dev/null | FileCheck %s --check-prefix=RATIO0
// RUN: not dsc-opt %s --split-input-file --dsc-offload="optimizer=cpu ratio=1.5" 2>&1 | FileCheck %s --check-prefix=RATIO-BAD
// RUN: not dsc-opt %s --split-input-file --dsc-offload="optimizer=cpu params=cpu ratio=0.5" 2>&1 | FileCheck %s --check-prefix=RATIO-PARAMS
// RATIO-BAD: error: dsc-offload: ratio must be between 0 and 1 (the share of the optimizer's elements updated on the host), got 1.5
// RATIO-PARAMS: error: dsc-offload: a ratio below 1 keeps part of the optimizer on the device, which params=cpu

// The masters and the optimizer state go to the host with the grouped
// AdamW, which also writes the next step's compute copy there: the copy
// becomes step state on the device (an argument the matmul reads, no cast
// at the start), brought up after the AdamW into the result that updates
// it. The gradient, the learning rate and the scalars come down; the
// splat 1 scale is cloned onto the host.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4x2xf32> {dsc.memory = "host", dsc.param = "w"}
// CHECK-SAME: %[[M:[a-z0-9]+]]: tensor<4x2xf32> {dsc.memory = "host", dsc.opt_state = "w/exp_avg"}
// CHECK-SAME: %[[V:[a-z0-9]+]]: tensor<4x2xf32> {dsc.memory = "host", dsc.opt_state = "w/exp_avg_sq"}
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<3x4xbf16> {dsc.input = "x"}
// CHECK-SAME: %[[CC:[a-z0-9]+]]: tensor<4x2xbf16> {dsc.compute_copy = "w"}
// CHECK-SAME: -> (tensor<f32> {dsc.output = "loss"}, tensor<4x2xf32> {dsc.in_place = 0 : i64, dsc.memory = "host", dsc.param_update = "w"}
// CHECK-SAME: tensor<4x2xbf16> {dsc.compute_copy_update = "w"})
// CHECK: %[[B1:.*]] = dsc.offload_copy %arg4 {to = "host"}
// CHECK: %[[STEP:.*]] = dsc.offload_copy %arg8 {to = "host"}
// CHECK-NOT: dsc.cast %[[W]]
// CHECK: %[[Y:.*]] = dsc.matmul %[[X]], %[[CC]]
// CHECK: %[[G:.*]] = dsc.matmul
// CHECK-NEXT: %[[GF:.*]] = dsc.cast %[[G]] {to = f32}
// CHECK-NEXT: %[[GH:.*]] = dsc.offload_copy %[[GF]] {to = "host"} : tensor<4x2xf32>
// CHECK: %[[LR:.*]] = dsc.lr_schedule
// CHECK-NEXT: %[[LRH:.*]] = dsc.offload_copy %[[LR]] {to = "host"}
// CHECK: %[[ONE:.*]] = dsc.constant {dsc.on_host} dense<1.000000e+00>
// CHECK-NEXT: %[[ONE2:.*]] = dsc.constant {dsc.on_host} dense<1.000000e+00>
// CHECK-NEXT: %[[R:.*]]:4 = dsc.adamw_multi %[[LRH]], %[[B1]], {{.*}}, %[[STEP]], scale %[[ONE]] after %[[ONE2]], (%[[W]], %[[GH]], %[[M]], %[[V]]) {dsc.on_host} {{.*}} -> tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xbf16>
// CHECK-NEXT: %[[UP:.*]] = dsc.offload_copy %[[R]]#3 {to = "device"} : tensor<4x2xbf16>
// CHECK-NEXT: return %{{.*}}, %[[R]]#0, %[[R]]#1, %[[R]]#2, %[[GF]], %[[UP]]
// PIPE-LABEL: func.func @train_step
// PIPE: dsc.constant {dsc.on_host} dense<1.000000e+00> : tensor<f32>
// PIPE-COUNT-7: dsc.offload_copy {{.*}} {to = "host"}
// PIPE: dsc.adamw_multi {{.*}} {dsc.on_host}
// PIPE-NEXT: dsc.offload_copy {{.*}} {to = "device"}
module {
func.func @train_step(%w: tensor<4x2xf32> {dsc.param = "w"},
    %m: tensor<4x2xf32> {dsc.opt_state = "w/exp_avg"},
    %v: tensor<4x2xf32> {dsc.opt_state = "w/exp_avg_sq"},
    %x: tensor<3x4xbf16> {dsc.input = "x"},
    %b1: tensor<f32> {dsc.hyper = "beta1"}, %b2: tensor<f32> {dsc.hyper = "beta2"},
    %eps: tensor<f32> {dsc.hyper = "eps"}, %wd: tensor<f32> {dsc.hyper = "weight_decay"},
    %step: tensor<i64> {dsc.step}, %base: tensor<f32> {dsc.hyper = "lr"})
    -> (tensor<f32> {dsc.output = "loss"},
        tensor<4x2xf32> {dsc.in_place = 0 : i64, dsc.param_update = "w"},
        tensor<4x2xf32> {dsc.in_place = 1 : i64, dsc.opt_state_update = "w/exp_avg"},
        tensor<4x2xf32> {dsc.in_place = 2 : i64, dsc.opt_state_update = "w/exp_avg_sq"},
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

// A parameter updated by a single dsc.adamw (a group of one): its compute
// copy is made on the host at the step's start, copied up and waited for
// before the forward reads it.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4x2xf32> {dsc.memory = "host", dsc.param = "w"}
// CHECK: %[[C:.*]] = dsc.cast %[[W]] {dsc.compute_copy, dsc.on_host, to = bf16}
// CHECK-NEXT: %[[CD:.*]] = dsc.offload_copy %[[C]] {to = "device"} : tensor<4x2xbf16>
// CHECK-NEXT: %[[CW:.*]] = dsc.offload_wait %[[CD]] : tensor<4x2xbf16>
// CHECK-NEXT: dsc.matmul %{{.*}}, %[[CW]]
// CHECK: dsc.adamw {{.*}} {dsc.on_host}
// PIPE-LABEL: func.func @train_step
// PIPE: dsc.cast {{.*}} {dsc.compute_copy, dsc.on_host, to = bf16}
// PIPE-NEXT: dsc.offload_copy {{.*}} {to = "device"}
// PIPE-NEXT: dsc.offload_wait
module {
func.func @train_step(%w: tensor<4x2xf32> {dsc.param = "w"},
    %m: tensor<4x2xf32> {dsc.opt_state = "w/exp_avg"},
    %v: tensor<4x2xf32> {dsc.opt_state = "w/exp_avg_sq"},
    %x: tensor<3x4xbf16> {dsc.input = "x"}, %g: tensor<4x2xf32> {dsc.input = "g"},
    %s: tensor<f32> {dsc.hyper = "lr"}, %step: tensor<i64> {dsc.step})
    -> (tensor<3x2xbf16> {dsc.output = "loss"},
        tensor<4x2xf32> {dsc.in_place = 0 : i64, dsc.param_update = "w"},
        tensor<4x2xf32> {dsc.in_place = 1 : i64, dsc.opt_state_update = "w/exp_avg"},
        tensor<4x2xf32> {dsc.in_place = 2 : i64, dsc.opt_state_update = "w/exp_avg_sq"}) {
  %c = dsc.cast %w {dsc.compute_copy, to = bf16} : tensor<4x2xf32> -> tensor<4x2xbf16>
  %y = dsc.matmul %x, %c : tensor<3x4xbf16>, tensor<4x2xbf16> -> tensor<3x2xbf16>
  %r:3 = dsc.adamw %w, %g, %m, %v, %s, %s, %s, %s, %s, %step : tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  return %y, %r#0, %r#1, %r#2 : tensor<3x2xbf16>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
}
}

// -----

// Two parameters in one group: one host AdamW (default chunks), or one per
// parameter, each followed by the copy up of its compute copy, so the
// first copy can overlap the second AdamW.
// CHECK-LABEL: func.func @train_step
// CHECK: dsc.adamw_multi {{.*}} (%arg0, %arg1, %{{.*}}, %{{.*}}, %arg2, %arg3, %arg4, %arg5) {dsc.on_host} {{.*}} -> tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xbf16>, tensor<8xbf16>
// CHECK-NEXT: dsc.offload_copy {{.*}} {to = "device"} : tensor<4x2xbf16>
// CHECK-NEXT: dsc.offload_copy {{.*}} {to = "device"} : tensor<8xbf16>
// The gradients come down in the AdamW's order (w's, then u's), so the
// first chunk can start before the second's arrive.
// CHUNK-LABEL: func.func @train_step({{.*}}dsc.param = "u"
// CHUNK: dsc.offload_copy %arg7 {to = "host"} : tensor<4x2xf32>
// CHUNK-NEXT: dsc.offload_copy %arg8 {to = "host"} : tensor<8xf32>
// CHUNK: %[[A:.*]]:4 = dsc.adamw_multi {{.*}} (%arg0, %{{.*}}, %arg2, %arg4) {dsc.on_host} {{.*}} -> tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xbf16>
// CHUNK-NEXT: dsc.offload_copy %[[A]]#3 {to = "device"}
// CHUNK-NEXT: %[[B:.*]]:4 = dsc.adamw_multi {{.*}} (%arg1, %{{.*}}, %arg3, %arg5) {dsc.on_host} {{.*}} -> tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xbf16>
// CHUNK-NEXT: dsc.offload_copy %[[B]]#3 {to = "device"}
// CHUNK: return {{.*}}, %[[A]]#0, %[[B]]#0, %[[A]]#1, %[[B]]#1, %[[A]]#2, %[[B]]#2,
module {
func.func @train_step(%w: tensor<4x2xf32> {dsc.param = "w"}, %u: tensor<8xf32> {dsc.param = "u"},
    %mw: tensor<4x2xf32> {dsc.opt_state = "w/exp_avg"}, %mu: tensor<8xf32> {dsc.opt_state = "u/exp_avg"},
    %vw: tensor<4x2xf32> {dsc.opt_state = "w/exp_avg_sq"}, %vu: tensor<8xf32> {dsc.opt_state = "u/exp_avg_sq"},
    %x: tensor<3x4xbf16> {dsc.input = "x"}, %gw: tensor<4x2xf32> {dsc.input = "gw"},
    %gu: tensor<8xf32> {dsc.input = "gu"}, %s: tensor<f32> {dsc.hyper = "lr"},
    %step: tensor<i64> {dsc.step})
    -> (tensor<3x2xbf16> {dsc.output = "loss"},
        tensor<4x2xf32> {dsc.param_update = "w"}, tensor<8xf32> {dsc.param_update = "u"},
        tensor<4x2xf32> {dsc.opt_state_update = "w/exp_avg"}, tensor<8xf32> {dsc.opt_state_update = "u/exp_avg"},
        tensor<4x2xf32> {dsc.opt_state_update = "w/exp_avg_sq"}, tensor<8xf32> {dsc.opt_state_update = "u/exp_avg_sq"}) {
  %cw = dsc.cast %w {dsc.compute_copy, to = bf16} : tensor<4x2xf32> -> tensor<4x2xbf16>
  %cu = dsc.cast %u {dsc.compute_copy, to = bf16} : tensor<8xf32> -> tensor<8xbf16>
  %y = dsc.matmul %x, %cw : tensor<3x4xbf16>, tensor<4x2xbf16> -> tensor<3x2xbf16>
  %r:6 = dsc.adamw_multi %s, %s, %s, %s, %s, %step, scale %s after %s, (%w, %u, %gw, %gu, %mw, %mu, %vw, %vu) : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<f32>, (tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>) -> tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>
  return %y, %r#0, %r#1, %r#2, %r#3, %r#4, %r#5 : tensor<3x2xbf16>, tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>, tensor<4x2xf32>, tensor<8xf32>
}
}

// -----

// Four chunks: chunk k's gradient comes down `copy-ahead` host tasks
// before chunk k's AdamW (two by default; one; zero: all at the start), so
// the host frame holds a few gradients at a time. The scalars every chunk
// reads stay first.
// CHUNK-LABEL: func.func @train_step({{.*}}dsc.param = "w1"
// CHUNK: dsc.offload_copy %arg16 {to = "host"} : tensor<i64>
// CHUNK-NEXT: dsc.offload_copy %arg12 {to = "host"} : tensor<8xf32>
// CHUNK-NEXT: dsc.offload_copy %arg13 {to = "host"} : tensor<8xf32>
// CHUNK-NOT: dsc.adamw_multi
// CHUNK: dsc.offload_copy %arg14 {to = "host"} : tensor<8xf32>
// CHUNK-NEXT: %[[A:.*]]:4 = dsc.adamw_multi {{.*}} (%arg0,
// CHUNK-NEXT: dsc.offload_copy %[[A]]#3 {to = "device"}
// CHUNK-NEXT: dsc.offload_copy %arg15 {to = "host"} : tensor<8xf32>
// CHUNK-NEXT: dsc.adamw_multi {{.*}} (%arg1,
// CHUNK-NEXT: dsc.offload_copy
// CHUNK-NEXT: dsc.adamw_multi {{.*}} (%arg2,
// CHUNK-NEXT: dsc.offload_copy
// CHUNK-NEXT: dsc.adamw_multi {{.*}} (%arg3,
// AHEAD-LABEL: func.func @train_step({{.*}}dsc.param = "w1"
// AHEAD: dsc.offload_copy %arg16 {to = "host"} : tensor<i64>
// AHEAD-NEXT: dsc.offload_copy %arg12 {to = "host"} : tensor<8xf32>
// AHEAD-NOT: dsc.adamw_multi
// AHEAD: dsc.offload_copy %arg13 {to = "host"} : tensor<8xf32>
// AHEAD-NEXT: %[[A:.*]]:4 = dsc.adamw_multi {{.*}} (%arg0,
// AHEAD-NEXT: dsc.offload_copy %[[A]]#3 {to = "device"}
// AHEAD-NEXT: dsc.offload_copy %arg14 {to = "host"} : tensor<8xf32>
// AHEAD-NEXT: dsc.adamw_multi {{.*}} (%arg1,
// AHEAD-NEXT: dsc.offload_copy
// AHEAD-NEXT: dsc.offload_copy %arg15 {to = "host"} : tensor<8xf32>
// AHEAD-NEXT: dsc.adamw_multi {{.*}} (%arg2,
// RATIO-LABEL: func.func @train_step(%arg0: tensor<8xf32> {dsc.memory = "host", dsc.param = "w1"}, %arg1: tensor<8xf32> {dsc.memory = "host", dsc.param = "w2"}, %arg2: tensor<8xf32> {dsc.param = "w3"}, %arg3: tensor<8xf32> {dsc.param = "w4"}, %arg4: tensor<8xf32> {dsc.memory = "host", dsc.opt_state = "w1/exp_avg"}, %arg5: tensor<8xf32> {dsc.memory = "host", dsc.opt_state = "w2/exp_avg"}, %arg6: tensor<8xf32> {dsc.opt_state = "w3/exp_avg"}
// RATIO-NOT: dsc.cast %arg0
// RATIO-NOT: dsc.cast %arg1
// RATIO: dsc.cast %arg2 {dsc.compute_copy, to = bf16}
// RATIO-NEXT: dsc.cast %arg3 {dsc.compute_copy, to = bf16}
// RATIO: dsc.adamw_multi {{.*}} (%arg0, %{{.*}}, %arg4, %arg8) {dsc.on_host}
// RATIO-NEXT: dsc.offload_copy
// RATIO-NEXT: dsc.adamw_multi {{.*}} (%arg1, %{{.*}}, %arg5, %arg9) {dsc.on_host}
// RATIO-NEXT: dsc.offload_copy
// RATIO-NEXT: dsc.adamw_multi {{.*}} (%arg2, %arg14, %arg6, %arg10) : {{.*}} -> tensor<8xf32>, tensor<8xf32>, tensor<8xf32>{{$}}
// RATIO-NEXT: dsc.adamw_multi {{.*}} (%arg3, %arg15, %arg7, %arg11) : {{.*}} -> tensor<8xf32>, tensor<8xf32>, tensor<8xf32>{{$}}
// RATIO6-LABEL: func.func @train_step({{.*}}{dsc.memory = "host", dsc.param = "w3"}, %arg3: tensor<8xf32> {dsc.param = "w4"}
// RATIO6: dsc.adamw_multi {{.*}} (%arg2, %{{.*}}, %arg6, %arg10) {dsc.on_host}
// RATIO6-NEXT: dsc.offload_copy
// RATIO6-NEXT: dsc.adamw_multi {{.*}} (%arg3, %arg15, %arg7, %arg11) :
// RATIO0-LABEL: func.func @train_step(%arg0: tensor<8xf32> {dsc.param = "w1"}
// RATIO0-NOT: dsc.memory
// RATIO0-NOT: dsc.on_host
// RATIO0: dsc.adamw_multi {{.*}} (%arg0, %arg1, %arg2, %arg3, %arg12,
// RATIO0-NOT: dsc.on_host
// RATIO0: return
// AHEAD0-LABEL: func.func @train_step({{.*}}dsc.param = "w1"
// AHEAD0: dsc.offload_copy %arg12 {to = "host"} : tensor<8xf32>
// AHEAD0-NEXT: dsc.offload_copy %arg13 {to = "host"} : tensor<8xf32>
// AHEAD0-NEXT: dsc.offload_copy %arg14 {to = "host"} : tensor<8xf32>
// AHEAD0-NEXT: dsc.offload_copy %arg15 {to = "host"} : tensor<8xf32>
// AHEAD0: dsc.adamw_multi {{.*}} (%arg0,
module {
func.func @train_step(%w1: tensor<8xf32> {dsc.param = "w1"}, %w2: tensor<8xf32> {dsc.param = "w2"},
    %w3: tensor<8xf32> {dsc.param = "w3"}, %w4: tensor<8xf32> {dsc.param = "w4"},
    %m1: tensor<8xf32> {dsc.opt_state = "w1/exp_avg"}, %m2: tensor<8xf32> {dsc.opt_state = "w2/exp_avg"},
    %m3: tensor<8xf32> {dsc.opt_state = "w3/exp_avg"}, %m4: tensor<8xf32> {dsc.opt_state = "w4/exp_avg"},
    %v1: tensor<8xf32> {dsc.opt_state = "w1/exp_avg_sq"}, %v2: tensor<8xf32> {dsc.opt_state = "w2/exp_avg_sq"},
    %v3: tensor<8xf32> {dsc.opt_state = "w3/exp_avg_sq"}, %v4: tensor<8xf32> {dsc.opt_state = "w4/exp_avg_sq"},
    %g1: tensor<8xf32> {dsc.input = "g1"}, %g2: tensor<8xf32> {dsc.input = "g2"},
    %g3: tensor<8xf32> {dsc.input = "g3"}, %g4: tensor<8xf32> {dsc.input = "g4"},
    %step: tensor<i64> {dsc.step}, %s: tensor<f32> {dsc.hyper = "lr"})
    -> (tensor<8xbf16> {dsc.output = "y"},
        tensor<8xf32> {dsc.param_update = "w1"}, tensor<8xf32> {dsc.param_update = "w2"},
        tensor<8xf32> {dsc.param_update = "w3"}, tensor<8xf32> {dsc.param_update = "w4"}) {
  %c1 = dsc.cast %w1 {dsc.compute_copy, to = bf16} : tensor<8xf32> -> tensor<8xbf16>
  %c2 = dsc.cast %w2 {dsc.compute_copy, to = bf16} : tensor<8xf32> -> tensor<8xbf16>
  %c3 = dsc.cast %w3 {dsc.compute_copy, to = bf16} : tensor<8xf32> -> tensor<8xbf16>
  %c4 = dsc.cast %w4 {dsc.compute_copy, to = bf16} : tensor<8xf32> -> tensor<8xbf16>
  %a = dsc.add %c1, %c2 : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %b = dsc.add %c3, %c4 : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %y = dsc.add %a, %b : tensor<8xbf16>, tensor<8xbf16> -> tensor<8xbf16>
  %r:12 = dsc.adamw_multi %s, %s, %s, %s, %s, %step, scale %s after %s, (%w1, %w2, %w3, %w4, %g1, %g2, %g3, %g4, %m1, %m2, %m3, %m4, %v1, %v2, %v3, %v4) : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<f32>, (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  return %y, %r#0, %r#1, %r#2, %r#3 : tensor<8xbf16>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}
}

// -----

// fp32: the forward reads the masters themselves, copied up at the step's
// start after the arguments' copies to the host; moving gradient copies
// down must not take those copies up with them (each wait stays after its
// copy).
// AHEAD-LABEL: func.func @train_step({{.*}}dsc.param = "w1"}{{.*}}tensor<8xf32> {dsc.output = "y"}
// AHEAD: %[[U1:.*]] = dsc.offload_copy %arg0 {to = "device"}
// AHEAD: dsc.offload_wait %[[U1]]
// AHEAD: dsc.offload_copy %arg14 {to = "host"} : tensor<8xf32>
// AHEAD-NEXT: dsc.adamw_multi {{.*}} (%arg1,
module {
func.func @train_step(%w1: tensor<8xf32> {dsc.param = "w1"}, %w2: tensor<8xf32> {dsc.param = "w2"},
    %w3: tensor<8xf32> {dsc.param = "w3"}, %w4: tensor<8xf32> {dsc.param = "w4"},
    %m1: tensor<8xf32> {dsc.opt_state = "w1/exp_avg"}, %m2: tensor<8xf32> {dsc.opt_state = "w2/exp_avg"},
    %m3: tensor<8xf32> {dsc.opt_state = "w3/exp_avg"}, %m4: tensor<8xf32> {dsc.opt_state = "w4/exp_avg"},
    %v1: tensor<8xf32> {dsc.opt_state = "w1/exp_avg_sq"}, %v2: tensor<8xf32> {dsc.opt_state = "w2/exp_avg_sq"},
    %v3: tensor<8xf32> {dsc.opt_state = "w3/exp_avg_sq"}, %v4: tensor<8xf32> {dsc.opt_state = "w4/exp_avg_sq"},
    %g1: tensor<8xf32> {dsc.input = "g1"}, %g2: tensor<8xf32> {dsc.input = "g2"},
    %g3: tensor<8xf32> {dsc.input = "g3"}, %g4: tensor<8xf32> {dsc.input = "g4"},
    %step: tensor<i64> {dsc.step}, %s: tensor<f32> {dsc.hyper = "lr"})
    -> (tensor<8xf32> {dsc.output = "y"},
        tensor<8xf32> {dsc.param_update = "w1"}, tensor<8xf32> {dsc.param_update = "w2"},
        tensor<8xf32> {dsc.param_update = "w3"}, tensor<8xf32> {dsc.param_update = "w4"}) {
  %a = dsc.add %w1, %w2 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %b = dsc.add %w3, %w4 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %y = dsc.add %a, %b : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %r:12 = dsc.adamw_multi %s, %s, %s, %s, %s, %step, scale %s after %s, (%w1, %w2, %w3, %w4, %g1, %g2, %g3, %g4, %m1, %m2, %m3, %m4, %v1, %v2, %v3, %v4) : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<f32>, (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  return %y, %r#0, %r#1, %r#2, %r#3 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}
}

// -----

// State reached through a slice (ZeRO stage 1-3) is refused.
module {
func.func @train_step(%w: tensor<4xf32> {dsc.param = "w"},
    %m: tensor<2xf32> {dsc.opt_state = "w/exp_avg"},
    %v: tensor<2xf32> {dsc.opt_state = "w/exp_avg_sq"},
    %g: tensor<2xf32> {dsc.input = "g"}, %s: tensor<f32> {dsc.hyper = "lr"},
    %step: tensor<i64> {dsc.step})
    -> (tensor<2xf32> {dsc.param_update = "w"}) {
  %p = dsc.slice %w {offsets = array<i64: 0>, sizes = array<i64: 2>, strides = array<i64: 1>} : tensor<4xf32> -> tensor<2xf32>
  // expected-error @+1 {{dsc-offload: the optimizer updates a value that is not an argument of the step}}
  %r:3 = dsc.adamw %p, %g, %m, %v, %s, %s, %s, %s, %s, %step : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  return %r#0 : tensor<2xf32>
}
}

// -----

// An update the device computes after the optimizer (fp16's skipped
// steps) is refused.
module {
func.func @train_step(%w: tensor<2xf32> {dsc.param = "w"},
    %m: tensor<2xf32> {dsc.opt_state = "w/exp_avg"},
    %v: tensor<2xf32> {dsc.opt_state = "w/exp_avg_sq"},
    %g: tensor<2xf32> {dsc.input = "g"}, %s: tensor<f32> {dsc.hyper = "lr"},
    %step: tensor<i64> {dsc.step}, %ok: tensor<i1> {dsc.input = "ok"})
    -> (tensor<2xf32> {dsc.param_update = "w"}) {
  %r:3 = dsc.adamw %w, %g, %m, %v, %s, %s, %s, %s, %s, %step : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  // expected-error @+1 {{dsc-offload: the update of 'w' is computed on the device}}
  %k = dsc.where %ok, %r#0, %w : tensor<i1>, tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
  return %k : tensor<2xf32>
}
}

// -----

// A step without an optimizer has nothing to offload.
// expected-error @+1 {{dsc-offload: @train_step has no optimizer op}}
func.func @train_step(%x: tensor<2xf32> {dsc.input = "x"}) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}
