// RUN: dsc-opt %s --split-input-file --dsc-in-place-temporaries | FileCheck %s

// The classifier's gradient is written over the logits (operand 1), which
// nothing reads after it: not even through the reshape the loss reads.
// CHECK-LABEL: func.func @logits_die
// CHECK: dsc.class_loss_backward %arg2, %[[S:.*]], %arg1 {dsc.overwrites = 1 : i64
func.func @logits_die(%x: tensor<2x4x4xbf16>, %labels: tensor<8xi64>, %d: tensor<f32>, %w: tensor<4x6xbf16>) -> tensor<8x6xbf16> {
  %mm = dsc.matmul %x, %w : tensor<2x4x4xbf16>, tensor<4x6xbf16> -> tensor<2x4x6xbf16>
  %s = dsc.reshape %mm {shape = array<i64: 8, 6>} : tensor<2x4x6xbf16> -> tensor<8x6xbf16>
  %g = dsc.class_loss_backward %d, %s, %labels {kind = "softmax_cross_entropy", reduction = "mean"} : tensor<f32>, tensor<8x6xbf16>, tensor<8xi64> -> tensor<8x6xbf16>
  return %g : tensor<8x6xbf16>
}

// -----

// Not when the logits are read later (through a view) or are an argument;
// nor for nll (its kernels are not checked for it).
// CHECK-LABEL: func.func @logits_live
// CHECK-NOT: dsc.overwrites
func.func @logits_live(%x: tensor<8x6xbf16>, %labels: tensor<8xi64>, %d: tensor<f32>, %y: tensor<8x6xbf16>) -> (tensor<8x6xbf16>, tensor<48xbf16>, tensor<8x6xbf16>, tensor<8x6xbf16>) {
  %a = dsc.cast %y {to = f32} : tensor<8x6xbf16> -> tensor<8x6xf32>
  %b = dsc.cast %a {to = bf16} : tensor<8x6xf32> -> tensor<8x6xbf16>
  %g = dsc.class_loss_backward %d, %b, %labels {kind = "softmax_cross_entropy", reduction = "mean"} : tensor<f32>, tensor<8x6xbf16>, tensor<8xi64> -> tensor<8x6xbf16>
  %v = dsc.reshape %b {shape = array<i64: 48>} : tensor<8x6xbf16> -> tensor<48xbf16>
  %h = dsc.class_loss_backward %d, %x, %labels {kind = "softmax_cross_entropy", reduction = "mean"} : tensor<f32>, tensor<8x6xbf16>, tensor<8xi64> -> tensor<8x6xbf16>
  %l = dsc.cast %y {to = f32} : tensor<8x6xbf16> -> tensor<8x6xf32>
  %m = dsc.cast %l {to = bf16} : tensor<8x6xf32> -> tensor<8x6xbf16>
  %n = dsc.class_loss_backward %d, %m, %labels {kind = "nll", reduction = "mean"} : tensor<f32>, tensor<8x6xbf16>, tensor<8xi64> -> tensor<8x6xbf16>
  return %g, %v, %h, %n : tensor<8x6xbf16>, tensor<48xbf16>, tensor<8x6xbf16>, tensor<8x6xbf16>
}

// -----

// A fused elementwise chain writes its first result over an input of the
// same type that dies there (the gradient a step scales as it returns it),
// not over a broadcast input, nor over one read later.
// CHECK-LABEL: func.func @fused_scale
// CHECK: dsc.fused "elementwise"(%[[G:.*]], %arg1) {dsc.overwrites = 0 : i64}
// CHECK: dsc.fused "elementwise"(%arg1, %[[H:.*]]) {dsc.overwrites = 1 : i64}
// CHECK: dsc.fused "elementwise"(%[[K:.*]], %arg1) :
func.func @fused_scale(%x: tensor<4x8xf32>, %s: tensor<f32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %g = dsc.exp %x : tensor<4x8xf32>
  %0:2 = dsc.fused "elementwise"(%g, %s) : (tensor<4x8xf32>, tensor<f32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<f32>):
    %m = dsc.mul %a, %b : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
    %q = dsc.mul %m, %m : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    dsc.yield %m, %q : tensor<4x8xf32>, tensor<4x8xf32>
  }
  %h = dsc.exp %0#1 : tensor<4x8xf32>
  %1 = dsc.fused "elementwise"(%s, %h) : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%b: tensor<f32>, %a: tensor<4x8xf32>):
    %m = dsc.mul %a, %b : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
    %n = dsc.neg %m : tensor<4x8xf32>
    dsc.yield %n : tensor<4x8xf32>
  }
  %k = dsc.exp %x : tensor<4x8xf32>
  %2 = dsc.fused "elementwise"(%k, %s) : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<f32>):
    %m = dsc.mul %a, %b : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
    %n = dsc.neg %m : tensor<4x8xf32>
    dsc.yield %n : tensor<4x8xf32>
  }
  return %0#0, %1, %2, %k : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// A norm backward's residual (dsc-fuse-norm-residual) is written over when
// it dies there, and not when its storage is also the gradient the norm
// reads (y = x + norm(x): the column sums read the gradient again after
// the input gradient is written). A scatter_add into init likewise.
// CHECK-LABEL: func.func @norm_residual
// CHECK: dsc.layer_norm_backward %[[G:.*]], %arg0, %arg1 residual %[[R:.*]] {axis = 1 : i64, dsc.overwrites = 3 : i64
// CHECK: dsc.layer_norm_backward %[[G2:.*]], %arg0, %arg1 residual %[[G2]] {axis = 1 : i64, epsilon
// CHECK: dsc.scatter_add %{{.*}}, %arg2 into %{{.*}} {axis = 0 : i64, dsc.overwrites = 2 : i64
func.func @norm_residual(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %i: tensor<4xi64>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<6x8xf32>) {
  %g = dsc.exp %x : tensor<4x8xf32>
  %r = dsc.sin %x : tensor<4x8xf32>
  %a, %as, %ab = dsc.layer_norm_backward %g, %x, %w residual %r {axis = 1 : i64, epsilon = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>
  %g2 = dsc.cos %x : tensor<4x8xf32>
  %b, %bs, %bb = dsc.layer_norm_backward %g2, %x, %w residual %g2 {axis = 1 : i64, epsilon = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>
  %z = dsc.constant dense<1.0> : tensor<6x8xf32>
  %y = dsc.mul %z, %z : tensor<6x8xf32>, tensor<6x8xf32> -> tensor<6x8xf32>
  %s = dsc.scatter_add %a, %i into %y {axis = 0 : i64, shape = array<i64: 6, 8>} : tensor<4x8xf32>, tensor<4xi64>, tensor<6x8xf32> -> tensor<6x8xf32>
  return %a, %b, %as, %bs, %s : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<6x8xf32>
}

// -----

// A fused kernel that reads an input rotated (rotate_half: each lane also
// reads its partner, which another lane may have written) never writes its
// result over that input, nor over another view of the same storage; an
// input it reads only lane by lane still serves.
// CHECK-LABEL: func.func @fused_rotated
// CHECK: dsc.fused "elementwise"(%[[G:.*]], %[[V:.*]]) :
// CHECK: dsc.fused "elementwise"(%[[A:.*]], %[[B:.*]]) {dsc.overwrites = 1 : i64}
func.func @fused_rotated(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %g = dsc.exp %x : tensor<2x8xf32>
  %v = dsc.reshape %g {shape = array<i64: 2, 8>} : tensor<2x8xf32> -> tensor<2x8xf32>
  %r = dsc.fused "elementwise"(%g, %v) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32> {
  ^bb0(%a: tensor<2x8xf32>, %b: tensor<2x8xf32>):
    %0 = dsc.rotate_half %a : tensor<2x8xf32>
    %1 = dsc.add %0, %b : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
    dsc.yield %1 : tensor<2x8xf32>
  }
  %p = dsc.exp %x : tensor<2x8xf32>
  %q = dsc.sqrt %x : tensor<2x8xf32>
  %s = dsc.fused "elementwise"(%p, %q) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32> {
  ^bb0(%a: tensor<2x8xf32>, %b: tensor<2x8xf32>):
    %0 = dsc.rotate_half %a : tensor<2x8xf32>
    %1 = dsc.add %0, %b : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
    dsc.yield %1 : tensor<2x8xf32>
  }
  return %r, %s : tensor<2x8xf32>, tensor<2x8xf32>
}
