// RUN: dsc-opt %s --split-input-file --dsc-drop-unused-results | FileCheck %s
// RUN: dsc-opt %s --split-input-file '--dsc-drop-unused-results=entry=forward_backward' | FileCheck %s --check-prefix=ENTRY

// A sharded step: @forward_backward returns the per-parameter gradient and
// the bucket shard reduced from it; the step reads the shard only. The
// gradient is no longer returned (it stays inside, used by the concat), the
// result attributes of what remains stay with their results, and the call
// keeps its attributes. The entry's signature is untouched.
// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: -> (tensor<f32> {dsc.output = "loss"}, tensor<4xf32> {dsc.grad = "bucket0"})
// The program's entry (EmitCppOptions::entry may name it) keeps them all.
// ENTRY-LABEL: func.func @forward_backward
// ENTRY-SAME: -> (tensor<f32> {dsc.output = "loss"}, tensor<4xf32> {dsc.grad = "p"}, tensor<4xf32> {dsc.grad = "bucket0"})
// CHECK: %[[G:.*]] = dsc.mul
// CHECK: %[[C:.*]] = dsc.concat %[[G]]
// CHECK: return %{{.*}}, %[[C]] : tensor<f32>, tensor<4xf32>
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32>, tensor<4xf32>, tensor<4xf32>)
// CHECK: %[[R:.*]]:2 = call @forward_backward(%{{.*}}) {dsc.tag} : (tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>)
// CHECK: dsc.add %arg0, %[[R]]#1
// CHECK: return %[[R]]#0,
func.func @forward_backward(%p: tensor<4xf32>)
    -> (tensor<f32> {dsc.output = "loss"}, tensor<4xf32> {dsc.grad = "p"},
        tensor<4xf32> {dsc.grad = "bucket0"}) {
  %l = dsc.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  %g = dsc.mul %p, %p : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %c = dsc.concat %g {axis = 0 : i64} : tensor<4xf32> -> tensor<4xf32>
  return %l, %g, %c : tensor<f32>, tensor<4xf32>, tensor<4xf32>
}
func.func @train_step(%p: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>, tensor<4xf32>) {
  %r:3 = call @forward_backward(%p) {dsc.tag} : (tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>, tensor<4xf32>)
  %n = dsc.add %p, %r#2 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  return %r#0, %n, %n : tensor<f32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Two calls (gradient accumulation): a result either call reads stays.
// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: -> (tensor<4xf32>, tensor<4xf32>)
// CHECK: return %{{.*}}, %{{.*}} : tensor<4xf32>, tensor<4xf32>
// CHECK-LABEL: func.func @train_step
// CHECK: call @forward_backward(%arg0) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// CHECK: call @forward_backward(%arg0) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
func.func @forward_backward(%p: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %a = dsc.mul %p, %p : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %b = dsc.add %p, %p : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %c = dsc.sub %p, %p : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  return %a, %b, %c : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
func.func @train_step(%p: tensor<4xf32>) -> tensor<4xf32> {
  %r:3 = call @forward_backward(%p) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %s:3 = call @forward_backward(%p) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %t = dsc.add %r#0, %s#2 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  return %t : tensor<4xf32>
}

// -----

// Nothing to drop: every result read; a function without calls is kept as
// it is even with results nobody reads.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: -> (tensor<4xf32>, tensor<4xf32>)
// CHECK-LABEL: func.func @train_step
// CHECK: call @forward_backward(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
func.func @forward(%p: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  return %p, %p : tensor<4xf32>, tensor<4xf32>
}
func.func @forward_backward(%p: tensor<4xf32>) -> tensor<4xf32> {
  return %p : tensor<4xf32>
}
func.func @train_step(%p: tensor<4xf32>) -> tensor<4xf32> {
  %r = call @forward_backward(%p) : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
