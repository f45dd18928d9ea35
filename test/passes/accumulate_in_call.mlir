// RUN: dsc-opt %s --split-input-file --dsc-accumulate-in-call | FileCheck %s

// Three micro-batches. The gradient's sum moves into the callee: a new
// argument {dsc.accumulator = 1}, added right where the gradient is made
// (before the loss's reduction, which comes later), and returned in its
// place {dsc.in_place = 2}. The first call adds to zeros, each later call to
// the previous call's result; the last call's result replaces the chain.
// The scalar loss is summed in the step as before.
// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: %[[P:[^:]*]]: tensor<4xf32>, %[[X:[^:]*]]: tensor<2x4xf32>, %[[ACC:[^:]*]]: tensor<4xf32> {dsc.accumulator = 1 : i64})
// CHECK-SAME: -> (tensor<f32> {dsc.output = "loss"}, tensor<4xf32> {dsc.grad = "p", dsc.in_place = 2 : i64})
// CHECK: %[[G:.*]] = dsc.mul %[[P]], %[[P]]
// CHECK-NEXT: %[[S:.*]] = dsc.add %[[ACC]], %[[G]]
// CHECK-NEXT: %[[L:.*]] = dsc.reduce_sum %[[X]]
// CHECK: return %[[L]], %[[S]]
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Z:.*]] = dsc.constant {dsc.accumulator = 1 : i64} dense<0.000000e+00> : tensor<4xf32>
// CHECK: %[[A:.*]]:2 = call @forward_backward(%{{.*}}, %{{.*}}, %[[Z]]) {dsc.tag}
// CHECK: %[[B:.*]]:2 = call @forward_backward(%{{.*}}, %{{.*}}, %[[A]]#1) {dsc.tag}
// CHECK: %[[C:.*]]:2 = call @forward_backward(%{{.*}}, %{{.*}}, %[[B]]#1) {dsc.tag}
// CHECK: %[[L1:.*]] = dsc.add %[[A]]#0, %[[B]]#0
// CHECK: %[[L2:.*]] = dsc.add %[[L1]], %[[C]]#0
// CHECK-NOT: dsc.add
// CHECK: %[[U:.*]] = dsc.mul %[[C]]#1,
// CHECK: return %[[L2]], %[[U]]
func.func @forward_backward(%p: tensor<4xf32>, %x: tensor<2x4xf32>)
    -> (tensor<f32> {dsc.output = "loss"}, tensor<4xf32> {dsc.grad = "p"}) {
  %g = dsc.mul %p, %p : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %l = dsc.reduce_sum %x {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x4xf32> -> tensor<f32>
  return %l, %g : tensor<f32>, tensor<4xf32>
}
func.func @train_step(%p: tensor<4xf32>, %x: tensor<6x4xf32>) -> (tensor<f32>, tensor<4xf32>) {
  %x0 = dsc.slice %x {offsets = array<i64: 0, 0>, sizes = array<i64: 2, 4>, strides = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<2x4xf32>
  %x1 = dsc.slice %x {offsets = array<i64: 2, 0>, sizes = array<i64: 2, 4>, strides = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<2x4xf32>
  %x2 = dsc.slice %x {offsets = array<i64: 4, 0>, sizes = array<i64: 2, 4>, strides = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<2x4xf32>
  %a:2 = func.call @forward_backward(%p, %x0) {dsc.tag} : (tensor<4xf32>, tensor<2x4xf32>) -> (tensor<f32>, tensor<4xf32>)
  %b:2 = func.call @forward_backward(%p, %x1) {dsc.tag} : (tensor<4xf32>, tensor<2x4xf32>) -> (tensor<f32>, tensor<4xf32>)
  %c:2 = func.call @forward_backward(%p, %x2) {dsc.tag} : (tensor<4xf32>, tensor<2x4xf32>) -> (tensor<f32>, tensor<4xf32>)
  %l1 = dsc.add %a#0, %b#0 : tensor<f32>, tensor<f32> -> tensor<f32>
  %l2 = dsc.add %l1, %c#0 : tensor<f32>, tensor<f32> -> tensor<f32>
  %s1 = dsc.add %a#1, %b#1 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %s2 = dsc.add %s1, %c#1 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %k = dsc.constant dense<0.333333343> : tensor<f32>
  %u = dsc.mul %s2, %k : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  return %l2, %u : tensor<f32>, tensor<4xf32>
}

// -----

// A micro-batch's gradient read outside the chain (here, a norm of the
// first call's alone) keeps the sum in the step: nothing changes.
// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: (%{{[^:]*}}: tensor<4xf32>) -> tensor<4xf32>
// CHECK-LABEL: func.func @train_step
// CHECK: %[[A:.*]] = call @forward_backward(%{{[^,]*}}) :
// CHECK: %[[B:.*]] = call @forward_backward(%{{[^,]*}}) :
// CHECK: dsc.add %[[A]], %[[B]]
func.func @forward_backward(%p: tensor<4xf32>) -> tensor<4xf32> {
  %g = dsc.mul %p, %p : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  return %g : tensor<4xf32>
}
func.func @train_step(%p: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = func.call @forward_backward(%p) : (tensor<4xf32>) -> tensor<4xf32>
  %b = func.call @forward_backward(%p) : (tensor<4xf32>) -> tensor<4xf32>
  %s = dsc.add %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %n = dsc.neg %a : tensor<4xf32>
  return %s, %n : tensor<4xf32>, tensor<4xf32>
}

// -----

// A tied classifier's weight gradient (the embedding's rows scattered into
// it): the running sum is the classifier's init, onto which its chunks
// are added; no add, and the returned scatter_add's result is the sum.
// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: %[[ACC:[^:]*]]: tensor<6x4xf32> {dsc.accumulator = 1 : i64})
// CHECK-SAME: tensor<6x4xf32> {dsc.grad = "w", dsc.in_place = 3 : i64}
// CHECK: %{{.*}}, %[[DX:.*]], %[[DW:.*]], %{{.*}}, %{{.*}} = dsc.linear_cross_entropy %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} init %[[ACC]] {
// CHECK-NOT: dsc.add
// CHECK: %[[S:.*]] = dsc.scatter_add %[[DX]], %{{.*}} into %[[DW]]
// CHECK: return %{{.*}}, %[[S]]
// CHECK-LABEL: func.func @train_step
// CHECK: %[[Z:.*]] = dsc.constant {dsc.accumulator = 1 : i64}
// CHECK: %[[A:.*]]:2 = call @forward_backward(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[Z]])
// CHECK: %[[B:.*]]:2 = call @forward_backward(%{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[A]]#1)
// CHECK: return %{{.*}}, %[[B]]#1
func.func @forward_backward(%x: tensor<8x4xf32>, %w: tensor<6x4xf32>, %y: tensor<8xi64>)
    -> (tensor<f32> {dsc.output = "loss"}, tensor<6x4xf32> {dsc.grad = "w"}) {
  %seed = dsc.constant dense<1.0> : tensor<f32>
  %loss, %dx, %dw, %logits, %chunks = dsc.linear_cross_entropy %x, %w, %y, %seed {chunk_rows = 4 : i64, f32_weight_grad = true, transpose_weight = true} : tensor<8x4xf32>, tensor<6x4xf32>, tensor<8xi64>, tensor<f32>
  %s = dsc.scatter_add %dx, %y into %dw {axis = 0 : i64, shape = array<i64: 6, 4>} : tensor<8x4xf32>, tensor<8xi64>, tensor<6x4xf32> -> tensor<6x4xf32>
  return %loss, %s : tensor<f32>, tensor<6x4xf32>
}
func.func @train_step(%x: tensor<8x4xf32>, %w: tensor<6x4xf32>, %y: tensor<8xi64>) -> (tensor<f32>, tensor<6x4xf32>) {
  %a:2 = func.call @forward_backward(%x, %w, %y) : (tensor<8x4xf32>, tensor<6x4xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<6x4xf32>)
  %b:2 = func.call @forward_backward(%x, %w, %y) : (tensor<8x4xf32>, tensor<6x4xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<6x4xf32>)
  %l = dsc.add %a#0, %b#0 : tensor<f32>, tensor<f32> -> tensor<f32>
  %s = dsc.add %a#1, %b#1 : tensor<6x4xf32>, tensor<6x4xf32> -> tensor<6x4xf32>
  return %l, %s : tensor<f32>, tensor<6x4xf32>
}

// -----

// One call (no accumulation): nothing changes.
// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: (%{{[^:]*}}: tensor<4xf32>) -> tensor<4xf32>
// CHECK-NOT: dsc.accumulator
func.func @forward_backward(%p: tensor<4xf32>) -> tensor<4xf32> {
  %g = dsc.mul %p, %p : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  return %g : tensor<4xf32>
}
func.func @train_step(%p: tensor<4xf32>) -> tensor<4xf32> {
  %a = func.call @forward_backward(%p) : (tensor<4xf32>) -> tensor<4xf32>
  return %a : tensor<4xf32>
}
