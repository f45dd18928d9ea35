// RUN: dsc-opt %s --split-input-file --dsc-autodiff -verify-diagnostics | FileCheck %s

// A weight used twice gets the sum of both uses; the input gets none.
// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: (%[[W:.*]]: tensor<3xf32> {dsc.param = "w"}, %[[X:.*]]: tensor<3xf32> {dsc.input = "x"})
// CHECK-SAME: -> (tensor<f32> {dsc.output = "loss"}, tensor<3xf32> {dsc.grad = "w"})
// CHECK: %[[A:.*]] = dsc.mul %[[W]], %[[X]]
// CHECK: %[[B:.*]] = dsc.mul %[[A]], %[[W]]
// CHECK: %[[L:.*]] = dsc.reduce_sum %[[B]]
// CHECK: %[[ONE:.*]] = dsc.constant {dsc.backward_begin} dense<1.000000e+00> : tensor<f32>
// CHECK: %[[G0:.*]] = dsc.reshape %[[ONE]] {shape = array<i64: 1>}
// CHECK: %[[GB:.*]] = dsc.expand %[[G0]] {shape = array<i64: 3>}
// CHECK-DAG: %[[GA:.*]] = dsc.mul %[[GB]], %[[W]]
// CHECK-DAG: %[[GW2:.*]] = dsc.mul %[[GB]], %[[A]]
// CHECK: %[[GW1:.*]] = dsc.mul %[[GA]], %[[X]]
// CHECK: %[[SUM:.*]] = dsc.add %[[GW2]], %[[GW1]]
// CHECK: return %[[L]], %[[SUM]]
func.func @forward(%w: tensor<3xf32> {dsc.param = "w"},
                   %x: tensor<3xf32> {dsc.input = "x"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %0 = dsc.mul %w, %x : tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
  %1 = dsc.mul %0, %w : tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
  %2 = dsc.reduce_sum %1 {axes = array<i64: 0>, keepdims = false}
      : tensor<3xf32> -> tensor<f32>
  return %2 : tensor<f32>
}

// -----

// Broadcast operands get their gradient summed back to their shape; a
// parameter off the loss's path gets zeros.
// CHECK-LABEL: func.func @forward_backward
// CHECK: dsc.reduce_sum %{{.*}} {axes = array<i64: 0>} : tensor<4x3xf32> -> tensor<1x3xf32>
// CHECK: dsc.reshape %{{.*}} {shape = array<i64: 3>} : tensor<1x3xf32> -> tensor<3xf32>
// CHECK: %[[Z:.*]] = dsc.constant dense<0.000000e+00> : tensor<2xf32>
// CHECK: return %{{.*}}, %{{.*}}, %[[Z]]
func.func @forward(%b: tensor<3xf32> {dsc.param = "b"},
                   %unused: tensor<2xf32> {dsc.param = "unused"},
                   %x: tensor<4x3xf32> {dsc.input = "x"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %0 = dsc.add %x, %b : tensor<4x3xf32>, tensor<3xf32> -> tensor<4x3xf32>
  %1 = dsc.reduce_mean %0 {axes = array<i64: 0, 1>, keepdims = false}
      : tensor<4x3xf32> -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// Global average pooling scales by 1 / (spatial extent): 1/16 for an input
// of batch 0 too, where N x C = 0 used to be a divisor (found by dsc-fuzz).
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[Z:.*]] = dsc.constant dense<6.250000e-02> : tensor<f32>
// CHECK: %[[GQ:.*]] = dsc.mul %{{.*}}, %[[Z]] : tensor<0x3x1x1xf32>, tensor<f32>
// CHECK: dsc.expand %[[GQ]] {shape = array<i64: 0, 3, 4, 4>} : tensor<0x3x1x1xf32> -> tensor<0x3x4x4xf32>
// CHECK: %[[S:.*]] = dsc.constant dense<4.000000e-02> : tensor<f32>
// CHECK: %[[GP:.*]] = dsc.mul %{{.*}}, %[[S]] : tensor<2x3x1x1xf32>, tensor<f32>
// CHECK: dsc.expand %[[GP]] {shape = array<i64: 2, 3, 5, 5>} : tensor<2x3x1x1xf32> -> tensor<2x3x5x5xf32>
func.func @forward(%p: tensor<2x3x5x5xf32> {dsc.param = "p"},
                   %q: tensor<0x3x4x4xf32> {dsc.param = "q"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %0 = dsc.global_avg_pool %p : tensor<2x3x5x5xf32> -> tensor<2x3x1x1xf32>
  %1 = dsc.reduce_sum %0 {axes = array<i64: 0, 1, 2, 3>, keepdims = false}
      : tensor<2x3x1x1xf32> -> tensor<f32>
  %2 = dsc.global_avg_pool %q : tensor<0x3x4x4xf32> -> tensor<0x3x1x1xf32>
  %3 = dsc.reduce_sum %2 {axes = array<i64: 0, 1, 2, 3>, keepdims = false}
      : tensor<0x3x1x1xf32> -> tensor<f32>
  %4 = dsc.add %1, %3 : tensor<f32>, tensor<f32> -> tensor<f32>
  return %4 : tensor<f32>
}

// -----

// Losses, gathers and convolutions use the gradient ops.
// CHECK-LABEL: func.func @forward_backward
// CHECK: dsc.class_loss_backward %{{.*}} {ignore_index = -1 : i64, kind = "softmax_cross_entropy", reduction = "mean"}
// CHECK: dsc.scatter_add %{{.*}} {axis = 0 : i64, shape = array<i64: 10, 4>}
func.func @forward(%emb: tensor<10x4xf32> {dsc.param = "emb"},
                   %ids: tensor<2xi64> {dsc.input = "ids"},
                   %y: tensor<2xi64> {dsc.input = "y"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %0 = dsc.gather %emb, %ids {axis = 0 : i64}
      : tensor<10x4xf32>, tensor<2xi64> -> tensor<2x4xf32>
  %1 = dsc.softmax_cross_entropy %0, %y {ignore_index = -1 : i64, reduction = "mean"}
      : tensor<2x4xf32>, tensor<2xi64> -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// An op on the gradient path without a VJP is an error at its location.
func.func @forward(%w: tensor<3xf32> {dsc.param = "w"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  // expected-error @+1 {{cannot differentiate 'dsc.floor'}}
  %0 = dsc.floor %w : tensor<3xf32>
  %1 = dsc.reduce_sum %0 {axes = array<i64: 0>, keepdims = false}
      : tensor<3xf32> -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// expected-error @+1 {{dsc-autodiff: no function @forward with a body}}
module {
  func.func private @other(tensor<3xf32>) -> tensor<f32>
}

// -----

// expected-error @+1 {{must return a scalar float loss first}}
func.func @forward(%w: tensor<3xf32> {dsc.param = "w"}) -> tensor<3xf32> {
  return %w : tensor<3xf32>
}

// -----

// Softmax and log-softmax differentiate to one dsc.softmax_backward each,
// from the forward result.
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[Y:.*]] = dsc.softmax %{{.*}} {axis = 1 : i64}
// CHECK: %[[L:.*]] = dsc.log_softmax %[[Y]] {axis = 0 : i64}
// CHECK: %[[G:.*]] = dsc.softmax_backward %{{.*}}, %[[L]] {axis = 0 : i64, log = true}
// CHECK: dsc.softmax_backward %[[G]], %[[Y]] {axis = 1 : i64}
func.func @forward(%w: tensor<2x3xf32> {dsc.param = "w"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %0 = dsc.softmax %w {axis = 1 : i64} : tensor<2x3xf32>
  %1 = dsc.log_softmax %0 {axis = 0 : i64} : tensor<2x3xf32>
  %2 = dsc.reduce_sum %1 {axes = array<i64: 0, 1>, keepdims = false}
      : tensor<2x3xf32> -> tensor<f32>
  return %2 : tensor<f32>
}

// -----

// A matmul that reads its weight transposed (canonicalization's form): the
// gradients of op(w) are transposed back to w's layout; canonicalize then
// folds those transposes into flagged matmuls again.
// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: -> (tensor<f32> {dsc.output = "loss"}, tensor<5x3xf32> {dsc.grad = "w"})
// CHECK: dsc.matmul %arg1, %arg0 {transpose_rhs = true} : tensor<4x3xf32>, tensor<5x3xf32> -> tensor<4x5xf32>
// CHECK: %[[T:.*]] = dsc.transpose %arg1 {perm = array<i64: 1, 0>} : tensor<4x3xf32> -> tensor<3x4xf32>
// CHECK: %[[GOP:.*]] = dsc.matmul %[[T]], %{{.*}} : tensor<3x4xf32>, tensor<4x5xf32> -> tensor<3x5xf32>
// CHECK: %[[GW:.*]] = dsc.transpose %[[GOP]] {perm = array<i64: 1, 0>} : tensor<3x5xf32> -> tensor<5x3xf32>
// CHECK: return %{{.*}}, %[[GW]]
// RUN: dsc-opt %s --split-input-file --dsc-autodiff --canonicalize -verify-diagnostics | FileCheck %s --check-prefix=CANON
// CANON-LABEL: func.func @forward_backward
// CANON: dsc.matmul %arg1, %arg0 {transpose_rhs = true}
// CANON-NOT: dsc.transpose
// CANON: %[[GW:.*]] = dsc.matmul %{{.*}}, %arg1 {transpose_lhs = true} : tensor<4x5xf32>, tensor<4x3xf32> -> tensor<5x3xf32>
// CANON: return %{{.*}}, %[[GW]]
func.func @forward(%w: tensor<5x3xf32> {dsc.param = "w"},
                   %x: tensor<4x3xf32> {dsc.input = "x"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %0 = dsc.matmul %x, %w {transpose_rhs = true} : tensor<4x3xf32>, tensor<5x3xf32> -> tensor<4x5xf32>
  %1 = dsc.reduce_sum %0 {axes = array<i64: 0, 1>, keepdims = false}
      : tensor<4x5xf32> -> tensor<f32>
  return %1 : tensor<f32>
}

// -----

// dsc.swiglu's backward reads the gate and up alone: sigmoid(g) is part of
// the derivative, so the forward keeps no sigmoid or silu.
// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: (%[[G:[^:]*]]: tensor<4x8xf32> {dsc.param = "g"}, %[[U:[^:]*]]: tensor<4x8xf32> {dsc.param = "u"})
// CHECK: dsc.swiglu %[[G]], %[[U]] : tensor<4x8xf32>
// CHECK: dsc.backward_begin
// CHECK-NOT: dsc.swiglu
// CHECK: %[[S:.*]] = dsc.sigmoid %[[G]] : tensor<4x8xf32>
// CHECK-DAG: dsc.mul %[[G]], %[[S]]
// CHECK-DAG: dsc.mul %{{.*}}, %[[U]]
// CHECK: return
func.func @forward(%g: tensor<4x8xf32> {dsc.param = "g"},
                   %u: tensor<4x8xf32> {dsc.param = "u"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %y = dsc.swiglu %g, %u : tensor<4x8xf32>
  %l = dsc.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false}
      : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// rotate_half's gradient is rotate_half of the negated output gradient
// (its transpose): one op each way, no slices, pads or concats.
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[R:.*]] = dsc.rotate_half %arg0 : tensor<3x8xf32>
// CHECK: %[[N:.*]] = dsc.neg %{{.*}} : tensor<3x8xf32>
// CHECK-NEXT: %[[G:.*]] = dsc.rotate_half %[[N]] : tensor<3x8xf32>
// CHECK: return %{{.*}}, %[[G]]
func.func @forward(%q: tensor<3x8xf32> {dsc.param = "q"},
                   %c: tensor<3x8xf32> {dsc.input = "c"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %r = dsc.rotate_half %q : tensor<3x8xf32>
  %p = dsc.mul %r, %c : tensor<3x8xf32>, tensor<3x8xf32> -> tensor<3x8xf32>
  %l = dsc.reduce_sum %p {axes = array<i64: 0, 1>, keepdims = false} : tensor<3x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}
