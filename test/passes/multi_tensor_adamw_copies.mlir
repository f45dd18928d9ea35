// RUN: dsc-opt %s --split-input-file --dsc-multi-tensor-adamw=compute-copies=true | FileCheck %s
// RUN: dsc-opt %s --split-input-file --dsc-multi-tensor-adamw | FileCheck %s --check-prefix=OFF

// Both parameters' compute copies (read by the forward only) become step
// state: no cast at the start; the group writes each new parameter rounded
// to bf16 as a fourth set of results, returned as the copies' updates.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[C0:[a-z0-9_]+]]: tensor<4x4xbf16> {dsc.compute_copy = "w0"}, %[[C1:[a-z0-9_]+]]: tensor<4xbf16> {dsc.compute_copy = "w1"})
// CHECK-SAME: tensor<4x4xbf16> {dsc.compute_copy_update = "w0"}, tensor<4xbf16> {dsc.compute_copy_update = "w1"})
// CHECK-NOT: dsc.cast
// CHECK: dsc.matmul %{{.*}}, %[[C0]]
// CHECK: dsc.add %{{.*}}, %[[C1]]
// CHECK: %[[M:.*]]:8 = dsc.adamw_multi {{.*}} -> tensor<4x4xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<4xf32>, tensor<4x4xbf16>, tensor<4xbf16>
// CHECK: return {{.*}}, %[[M]]#6, %[[M]]#7 :
// OFF-LABEL: func.func @train_step
// OFF: dsc.cast %arg0 {dsc.compute_copy, to = bf16}
// OFF: dsc.adamw_multi {{.*}} -> tensor<4x4xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<4xf32>{{$}}
func.func @train_step(%w0: tensor<4x4xf32> {dsc.param = "w0"}, %w1: tensor<4xf32> {dsc.param = "w1"},
                      %m0: tensor<4x4xf32> {dsc.opt_state = "w0/exp_avg"}, %m1: tensor<4xf32> {dsc.opt_state = "w1/exp_avg"},
                      %x: tensor<2x4xbf16> {dsc.input = "x"}, %s: tensor<f32> {dsc.hyper = "lr"}, %t: tensor<i64> {dsc.step})
    -> (tensor<2x4xbf16> {dsc.output = "y"}, tensor<4x4xf32> {dsc.param_update = "w0"}, tensor<4xf32> {dsc.param_update = "w1"}) {
  %c0 = dsc.cast %w0 {dsc.compute_copy, to = bf16} : tensor<4x4xf32> -> tensor<4x4xbf16>
  %c1 = dsc.cast %w1 {dsc.compute_copy, to = bf16} : tensor<4xf32> -> tensor<4xbf16>
  %h = dsc.matmul %x, %c0 : tensor<2x4xbf16>, tensor<4x4xbf16> -> tensor<2x4xbf16>
  %y = dsc.add %h, %c1 : tensor<2x4xbf16>, tensor<4xbf16> -> tensor<2x4xbf16>
  %a:3 = dsc.adamw %w0, %m0, %m0, %m0, %s, %s, %s, %s, %s, %t : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %b:3 = dsc.adamw %w1, %m1, %m1, %m1, %s, %s, %s, %s, %s, %t : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  return %y, %a#0, %b#0 : tensor<2x4xbf16>, tensor<4x4xf32>, tensor<4xf32>
}

// -----

// A new parameter the step may still replace by the old one (a skipped
// fp16 step's dsc.where): the copy would round the wrong value, so the
// casts stay.
// CHECK-LABEL: func.func @train_step
// CHECK: dsc.cast %arg0 {dsc.compute_copy, to = f16}
// CHECK: dsc.cast %arg1 {dsc.compute_copy, to = f16}
// CHECK: dsc.adamw_multi {{.*}} -> tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>{{$}}
func.func @train_step(%w0: tensor<4xf32> {dsc.param = "w0"}, %w1: tensor<4xf32> {dsc.param = "w1"},
                      %s: tensor<f32>, %t: tensor<i64>, %ok: tensor<i1>)
    -> (tensor<4xf16>, tensor<4xf32> {dsc.param_update = "w0"}, tensor<4xf32> {dsc.param_update = "w1"}) {
  %c0 = dsc.cast %w0 {dsc.compute_copy, to = f16} : tensor<4xf32> -> tensor<4xf16>
  %c1 = dsc.cast %w1 {dsc.compute_copy, to = f16} : tensor<4xf32> -> tensor<4xf16>
  %y = dsc.add %c0, %c1 : tensor<4xf16>, tensor<4xf16> -> tensor<4xf16>
  %a:3 = dsc.adamw %w0, %w0, %w0, %w0, %s, %s, %s, %s, %s, %t : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %b:3 = dsc.adamw %w1, %w1, %w1, %w1, %s, %s, %s, %s, %s, %t : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %n0 = dsc.where %ok, %a#0, %w0 : tensor<i1>, tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  return %y, %n0, %b#0 : tensor<4xf16>, tensor<4xf32>, tensor<4xf32>
}

// -----

// A copy read after the update (here returned) cannot be overwritten by
// it; nor can a parameter with two compute copies be one state.
// CHECK-LABEL: func.func @train_step
// CHECK: dsc.cast %arg0 {dsc.compute_copy, to = bf16}
// CHECK: dsc.adamw_multi {{.*}} -> tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>{{$}}
// CHECK-LABEL: func.func @two_copies
// CHECK: dsc.cast %arg0 {dsc.compute_copy, to = bf16}
// CHECK: dsc.cast %arg0 {dsc.compute_copy, to = f16}
// CHECK: dsc.adamw_multi {{.*}} -> tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>{{$}}
func.func @train_step(%w0: tensor<4xf32> {dsc.param = "w0"}, %w1: tensor<4xf32> {dsc.param = "w1"},
                      %s: tensor<f32>, %t: tensor<i64>)
    -> (tensor<4xbf16>, tensor<4xf32> {dsc.param_update = "w0"}, tensor<4xf32> {dsc.param_update = "w1"}) {
  %c0 = dsc.cast %w0 {dsc.compute_copy, to = bf16} : tensor<4xf32> -> tensor<4xbf16>
  %c1 = dsc.cast %w1 {dsc.compute_copy, to = bf16} : tensor<4xf32> -> tensor<4xbf16>
  %y = dsc.add %c0, %c1 : tensor<4xbf16>, tensor<4xbf16> -> tensor<4xbf16>
  %a:3 = dsc.adamw %w0, %w0, %w0, %w0, %s, %s, %s, %s, %s, %t : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %b:3 = dsc.adamw %w1, %w1, %w1, %w1, %s, %s, %s, %s, %s, %t : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  return %c0, %a#0, %b#0 : tensor<4xbf16>, tensor<4xf32>, tensor<4xf32>
}
func.func @two_copies(%w0: tensor<4xf32> {dsc.param = "w0"}, %w1: tensor<4xf32> {dsc.param = "w1"},
                      %s: tensor<f32>, %t: tensor<i64>)
    -> (tensor<4xbf16>, tensor<4xf16>, tensor<4xf32> {dsc.param_update = "w0"}, tensor<4xf32> {dsc.param_update = "w1"}) {
  %c0 = dsc.cast %w0 {dsc.compute_copy, to = bf16} : tensor<4xf32> -> tensor<4xbf16>
  %h0 = dsc.cast %w0 {dsc.compute_copy, to = f16} : tensor<4xf32> -> tensor<4xf16>
  %c1 = dsc.cast %w1 {dsc.compute_copy, to = bf16} : tensor<4xf32> -> tensor<4xbf16>
  %y = dsc.add %c0, %c1 : tensor<4xbf16>, tensor<4xbf16> -> tensor<4xbf16>
  %z = dsc.neg %h0 : tensor<4xf16>
  %a:3 = dsc.adamw %w0, %w0, %w0, %w0, %s, %s, %s, %s, %s, %t : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %b:3 = dsc.adamw %w1, %w1, %w1, %w1, %s, %s, %s, %s, %s, %t : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  return %y, %z, %a#0, %b#0 : tensor<4xbf16>, tensor<4xf16>, tensor<4xf32>, tensor<4xf32>
}
