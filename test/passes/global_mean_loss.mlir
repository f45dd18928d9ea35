// RUN: dsc-opt %s --split-input-file --dsc-global-mean-loss | FileCheck %s

// ignore_index: the mean becomes a sum, and the count of labels that are
// not ignored is returned beside it.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: -> (tensor<f32> {dsc.output = "loss"}, tensor<f32> {dsc.loss_count})
// CHECK: %[[L:.*]] = dsc.softmax_cross_entropy %{{.*}}, %[[Y:.*]] {ignore_index = -1 : i64, reduction = "sum"}
// CHECK: %[[II:.*]] = dsc.constant dense<-1> : tensor<i64>
// CHECK: %[[EQ:.*]] = dsc.equal %[[Y]], %[[II]]
// CHECK: %[[KEEP:.*]] = dsc.not %[[EQ]]
// CHECK: %[[F:.*]] = dsc.cast %[[KEEP]] {to = f32}
// CHECK: %[[N:.*]] = dsc.reduce_sum %[[F]] {axes = array<i64: 0>, keepdims = false}
// CHECK: return %[[L]], %[[N]]
func.func @forward(%s: tensor<4x3xf32> {dsc.param = "s"},
                   %y: tensor<4xi64> {dsc.input = "y"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %0 = dsc.softmax_cross_entropy %s, %y {ignore_index = -1 : i64, reduction = "mean"}
      : tensor<4x3xf32>, tensor<4xi64> -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// Class weights: the count is the summed weight of the labels.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: {dsc.loss_count}
// CHECK: dsc.nll_loss {{.*}} {reduction = "sum"}
// CHECK: %[[W:.*]] = dsc.gather %{{.*}}, %{{.*}} {axis = 0 : i64} : tensor<3xf32>, tensor<4xi64> -> tensor<4xf32>
// CHECK: dsc.reduce_sum %[[W]]
func.func @forward(%s: tensor<4x3xf32> {dsc.param = "s"},
                   %w: tensor<3xf32> {dsc.buffer = "w"},
                   %y: tensor<4xi64> {dsc.input = "y"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %0 = dsc.nll_loss %s, %y, %w {reduction = "mean"}
      : tensor<4x3xf32>, tensor<4xi64>, tensor<3xf32> -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// Softmax cross-entropy of bf16 scores returns an f32 loss and weighs its
// classes in f32 (the importer widens ONNX's bf16 weights): the count is
// f32 like the loss, with no cast.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: -> (tensor<f32> {dsc.output = "loss"}, tensor<f32> {dsc.loss_count})
// CHECK: %[[W:.*]] = dsc.gather %{{.*}}, %{{.*}} {axis = 0 : i64} : tensor<3xf32>, tensor<4xi64> -> tensor<4xf32>
// CHECK-NOT: dsc.cast
// CHECK: %[[Z:.*]] = dsc.constant dense<0.000000e+00> : tensor<f32>
// CHECK: %[[C:.*]] = dsc.where %{{.*}}, %[[W]], %[[Z]]
// CHECK: dsc.reduce_sum %[[C]]
func.func @forward(%s: tensor<4x3xbf16> {dsc.param = "s"},
                   %w: tensor<3xf32> {dsc.buffer = "w"},
                   %y: tensor<4xi64> {dsc.input = "y"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %0 = dsc.softmax_cross_entropy %s, %y, %w {ignore_index = -1 : i64, reduction = "mean"}
      : tensor<4x3xbf16>, tensor<4xi64>, tensor<3xf32> -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// Every label counts 1: equal slices average exactly; nothing changes.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: dsc.loss_count
// CHECK: reduction = "mean"
func.func @forward(%s: tensor<4x3xf32> {dsc.param = "s"},
                   %y: tensor<4xi64> {dsc.input = "y"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %0 = dsc.softmax_cross_entropy %s, %y {reduction = "mean"}
      : tensor<4x3xf32>, tensor<4xi64> -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// The loss is not a class loss directly: left alone.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: dsc.loss_count
func.func @forward(%s: tensor<4x3xf32> {dsc.param = "s"},
                   %y: tensor<4xi64> {dsc.input = "y"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %0 = dsc.softmax_cross_entropy %s, %y {ignore_index = -1 : i64, reduction = "mean"}
      : tensor<4x3xf32>, tensor<4xi64> -> tensor<f32>
  %1 = dsc.mul %0, %0 : tensor<f32>, tensor<f32> -> tensor<f32>
  return %1 : tensor<f32>
}
