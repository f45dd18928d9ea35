// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer="accum-steps=2" --dsc-mixed-precision="precision=bf16" | FileCheck %s --check-prefix=BF16
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-mixed-precision="precision=fp16" | FileCheck %s --check-prefix=FP16
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-mixed-precision="precision=fp16 loss-scale=128" | FileCheck %s --check-prefix=STATIC
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=2" --dsc-mixed-precision="precision=bf16" | FileCheck %s --check-prefix=STAGE3
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=2 world-size=2" --dsc-mixed-precision="precision=bf16 grad-reduce-dtype=bf16" | FileCheck %s --check-prefix=COMM16
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-mixed-precision="precision=fp32" | FileCheck %s --check-prefix=FP32
// RUN: not dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-mixed-precision="grad-reduce-dtype=fp8" 2>&1 | FileCheck %s --check-prefix=BADCOMM
// RUN: not dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-mixed-precision="precision=int8" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not dsc-opt %s --dsc-mixed-precision="precision=bf16" 2>&1 | FileCheck %s --check-prefix=NOSTEP

// A linear layer, a scale by a norm-like weight, softmax, a mean.
func.func @forward(%w: tensor<4x4xf32> {dsc.param = "fc.weight"},
                   %g: tensor<4xf32> {dsc.param = "ln.weight"},
                   %x: tensor<2x4xf32> {dsc.input = "x"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %h = dsc.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %t = dsc.transpose %h {perm = array<i64: 1, 0>} : tensor<2x4xf32> -> tensor<4x2xf32>
  %u = dsc.transpose %t {perm = array<i64: 1, 0>} : tensor<4x2xf32> -> tensor<2x4xf32>
  %n = dsc.mul %u, %g : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %s = dsc.softmax %n {axis = 1 : i64} : tensor<2x4xf32>
  %l = dsc.reduce_mean %s {axes = array<i64: 0, 1>, keepdims = false}
      : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// The module records the precision; @forward itself stays fp32.
// BF16: module attributes {{.*}}dsc.precision = "bf16"
// BF16: func.func @forward(%arg0: tensor<4x4xf32>
// FP16: module attributes {{.*}}dsc.loss_scaler = {dynamic = true, hysteresis = 2 : i64, initial_scale = 6.553600e+04 : f64, min_scale = 1.000000e+00 : f64, window = 1000 : i64}

// Parameters arrive as bf16 compute copies; the matmul and the moves after
// it stay bf16; the fp32 ops get fp32 operands; gradients leave as fp32.
// BF16-LABEL: func.func @forward_backward
// BF16-SAME: %[[W:.*]]: tensor<4x4xbf16> {dsc.param = "fc.weight"}
// BF16-SAME: %[[G:.*]]: tensor<4xbf16> {dsc.param = "ln.weight"}
// BF16-SAME: %[[X:.*]]: tensor<2x4xf32> {dsc.input = "x"}
// BF16-SAME: -> (tensor<f32> {dsc.output = "loss"}, tensor<4x4xf32> {dsc.grad = "fc.weight"}, tensor<4xf32> {dsc.grad = "ln.weight"})
// BF16-DAG: %[[GF:.*]] = dsc.cast %[[G]] {to = f32} : tensor<4xbf16> -> tensor<4xf32>
// BF16-DAG: %[[XL:.*]] = dsc.cast %[[X]] {to = bf16} : tensor<2x4xf32> -> tensor<2x4xbf16>
// BF16: %[[H:.*]] = dsc.matmul %[[XL]], %[[W]] : tensor<2x4xbf16>, tensor<4x4xbf16> -> tensor<2x4xbf16>
// BF16: %[[T:.*]] = dsc.transpose %[[H]] {{.*}} : tensor<2x4xbf16> -> tensor<4x2xbf16>
// BF16: %[[U:.*]] = dsc.transpose %[[T]] {{.*}} : tensor<4x2xbf16> -> tensor<2x4xbf16>
// BF16: %[[UF:.*]] = dsc.cast %[[U]] {to = f32} : tensor<2x4xbf16> -> tensor<2x4xf32>
// BF16: dsc.mul %[[UF]], %[[GF]] : tensor<2x4xf32>, tensor<4xf32>
// BF16: dsc.softmax {{.*}} : tensor<2x4xf32>
// BF16: dsc.softmax_backward {{.*}} : tensor<2x4xf32>, tensor<2x4xf32>
// The backward widens the bf16 activation again instead of keeping the
// forward's fp32 copy alive (half the bytes held across the passes); a
// parameter's small widening (the norm weight) is kept instead, one launch
// a step fewer.
// BF16-NOT: dsc.cast %[[G]] {dsc.recompute
// BF16: dsc.cast %[[U]] {dsc.recompute, to = f32} : tensor<2x4xbf16> -> tensor<2x4xf32>
// BF16-NOT: dsc.cast %[[G]] {dsc.recompute
// The weight gradient: x^T (already bf16) times the bf16 output gradient;
// no fp32 transpose is left behind.
// BF16-NOT: dsc.transpose {{.*}} : tensor<2x4xf32>
// BF16: %[[XT:.*]] = dsc.transpose %[[XL]] {{.*}} : tensor<2x4xbf16> -> tensor<4x2xbf16>
// BF16: %[[GW:.*]] = dsc.matmul %[[XT]], {{.*}} : tensor<4x2xbf16>, tensor<2x4xbf16> -> tensor<4x4xbf16>
// BF16: %[[GWF:.*]] = dsc.cast %[[GW]] {to = f32} : tensor<4x4xbf16> -> tensor<4x4xf32>
// BF16: return {{.*}}, %[[GWF]], {{.*}} : tensor<f32>, tensor<4x4xf32>, tensor<4xf32>

// One compute copy per parameter and step, for both micro-batches; the
// optimizer updates the fp32 masters.
// BF16-LABEL: func.func @train_step
// BF16-SAME: %[[MW:[a-z0-9]+]]: tensor<4x4xf32> {dsc.param = "fc.weight"}
// BF16-COUNT-2: dsc.cast {{.*}} {dsc.compute_copy, to = bf16}
// BF16-NOT: dsc.compute_copy
// BF16: call @forward_backward
// BF16: call @forward_backward
// BF16: dsc.adamw %[[MW]], {{.*}} : tensor<4x4xf32>, tensor<4x4xf32>

// fp16: the loss gradient is seeded with the scale, gradients leave
// unscaled; a step with a non-finite gradient norm keeps the state.
// FP16-LABEL: func.func @forward_backward
// FP16-SAME: %[[S:[a-z0-9]+]]: tensor<f32> {dsc.loss_scale}
// FP16: %[[SEED:.*]] = dsc.constant {dsc.backward_begin} dense<1.000000e+00>
// FP16-NEXT: %[[SCALED:.*]] = dsc.mul %[[SEED]], %[[S]]
// FP16: %[[INV:.*]] = dsc.reciprocal %[[S]]
// FP16: %[[G0:.*]] = dsc.mul {{.*}}, %[[INV]] : tensor<4x4xf32>, tensor<f32>
// FP16: %[[G1:.*]] = dsc.mul {{.*}}, %[[INV]] : tensor<4xf32>, tensor<f32>
// FP16: return {{.*}}, %[[G0]], %[[G1]]
// FP16-LABEL: func.func @train_step
// FP16-SAME: %[[STEP:[a-z0-9]+]]: tensor<i64> {dsc.step}
// FP16-SAME: %[[SCALE:[a-z0-9]+]]: tensor<f32> {dsc.scaler = "loss_scale"}
// FP16-SAME: %[[HYST:[a-z0-9]+]]: tensor<f32> {dsc.scaler = "hysteresis"}
// FP16-SAME: %[[GOOD:[a-z0-9]+]]: tensor<f32> {dsc.scaler = "good_steps"}
// FP16-SAME: %[[APPLIED:[a-z0-9]+]]: tensor<i64> {dsc.scaler = "applied_steps"}
// FP16-SAME: {dsc.scaler_update = "loss_scale"}
// FP16-SAME: {dsc.scaler_update = "applied_steps"}, tensor<f32> {dsc.overflow})
// FP16: call @forward_backward({{.*}}, %[[SCALE]])
// The optimizer and the schedule count applied steps, not the loop's.
// FP16: %[[OPT:.*]] = dsc.add %[[APPLIED]], {{.*}} : tensor<i64>, tensor<i64>
// FP16: dsc.lr_schedule %[[OPT]]
// FP16: %[[NEW:new_param[_0-9]*]], {{.*}} = dsc.adamw {{.*}}, %[[OPT]] :
// FP16: %[[FINITE:.*]] = dsc.less %{{.*}}, %{{.*}} : tensor<f32>, tensor<f32> -> tensor<i1>
// FP16: dsc.where %[[FINITE]], %[[NEW]], %arg0
// FP16: dsc.less_equal %[[HYST]]
// FP16: dsc.cast %[[FINITE]] {to = i64}

// A static scale: a constant, only the applied-step counter as state.
// STATIC: dsc.loss_scaler = {dynamic = false, {{.*}}initial_scale = 1.280000e+02
// STATIC-LABEL: func.func @train_step
// STATIC-NOT: dsc.scaler = "loss_scale"
// STATIC: dsc.constant dense<1.280000e+02> : tensor<f32>

// Stage 3: the shard is cast once per step and gathered in bf16 (half the
// bytes); the gradient bucket is reduced in fp32.
// STAGE3-LABEL: func.func @forward_backward
// STAGE3-SAME: tensor<10xbf16> {dsc.bucket = 0 : i64, dsc.param_shard = "bucket0"}
// STAGE3: %[[IN:.*]] = dsc.collective_input %{{.*}} : tensor<10xbf16>
// STAGE3-NEXT: shard.all_gather %[[IN]] {{.*}} : tensor<10xbf16> -> tensor<20xbf16>
// STAGE3: shard.reduce_scatter %{{.*}} : tensor<20xf32> -> tensor<10xf32>
// STAGE3-LABEL: func.func @train_step
// STAGE3: %[[COPY:.*]] = dsc.cast %{{.*}} {dsc.compute_copy, to = bf16} : tensor<10xf32> -> tensor<10xbf16>
// STAGE3: call @forward_backward(%{{.*}}, %[[COPY]])

// grad-reduce-dtype=bf16: the marked gradient reduction runs on a bf16
// copy and is widened at once; the norm's all-reduce stays fp32.
// COMM16-LABEL: func.func @forward_backward
// COMM16: %[[N:.*]] = dsc.cast %{{.*}} {to = bf16} : tensor<20xf32> -> tensor<20xbf16>
// COMM16-NEXT: %[[IN:.*]] = dsc.collective_input %[[N]] : tensor<20xbf16>
// COMM16-NEXT: %[[R:.*]] = shard.reduce_scatter %[[IN]] {{.*}}{dsc.gradient_reduction} : tensor<20xbf16> -> tensor<10xbf16>
// COMM16: dsc.cast %[[R]] {dsc.widened_reduction, to = f32} : tensor<10xbf16> -> tensor<10xf32>
// COMM16-LABEL: func.func @train_step
// COMM16: shard.all_reduce {{.*}} : tensor<1xf32> -> tensor<1xf32>

// fp32 changes nothing.
// FP32-LABEL: func.func @forward_backward
// FP32-SAME: tensor<4x4xf32> {dsc.param = "fc.weight"}
// FP32-NOT: bf16
// FP32-NOT: dsc.precision

// BAD: error: dsc-mixed-precision: precision must be bf16, fp16 or fp32, not 'int8'
// BADCOMM: error: dsc-mixed-precision: grad-reduce-dtype must be fp32 or bf16, not 'fp8'
// NOSTEP: error: dsc-mixed-precision: needs @train_step and @forward_backward; run dsc-optimizer first
