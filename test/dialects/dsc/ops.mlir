// RUN: %dsc-opt %s | %dsc-opt | FileCheck %s
// RUN: %dsc-opt %s --mlir-print-op-generic | %dsc-opt | FileCheck %s

// Every op of the dsc dialect parses, verifies and prints in a form that
// parses again to the same op. Attributes equal to their default are elided.

//===----------------------------------------------------------------------===//
// Constants and casts
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @constant_and_cast
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3xf32>)
func.func @constant_and_cast(%x: tensor<2x3xf32>)
    -> (tensor<2xi64>, tensor<2x3xf32>, tensor<2x3xbf16>) {
  // CHECK: dsc.constant dense<[1, 2]> : tensor<2xi64>
  %0 = dsc.constant dense<[1, 2]> : tensor<2xi64>
  // CHECK: dsc.constant dense<5.000000e-01> : tensor<2x3xf32>
  %1 = dsc.constant dense<0.5> : tensor<2x3xf32>
  // CHECK: dsc.cast %[[X]] {to = bf16} : tensor<2x3xf32> -> tensor<2x3xbf16>
  %2 = dsc.cast %x {to = bf16} : tensor<2x3xf32> -> tensor<2x3xbf16>
  return %0, %1, %2 : tensor<2xi64>, tensor<2x3xf32>, tensor<2x3xbf16>
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @unary
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3xf32>, %[[I:[^:]+]]: tensor<4xi32>, %[[B:[^:]+]]: tensor<4xi1>)
func.func @unary(%x: tensor<2x3xf32>, %i: tensor<4xi32>, %b: tensor<4xi1>) {
  // CHECK: dsc.neg %[[I]] : tensor<4xi32>
  %0 = dsc.neg %i : tensor<4xi32>
  // CHECK: dsc.abs %[[I]] : tensor<4xi32>
  %1 = dsc.abs %i : tensor<4xi32>
  // CHECK: dsc.exp %[[X]] : tensor<2x3xf32>
  %2 = dsc.exp %x : tensor<2x3xf32>
  // CHECK: dsc.log %[[X]] : tensor<2x3xf32>
  %3 = dsc.log %x : tensor<2x3xf32>
  // CHECK: dsc.sqrt %[[X]] : tensor<2x3xf32>
  %4 = dsc.sqrt %x : tensor<2x3xf32>
  // CHECK: dsc.reciprocal %[[X]] : tensor<2x3xf32>
  %5 = dsc.reciprocal %x : tensor<2x3xf32>
  // CHECK: dsc.tanh %[[X]] : tensor<2x3xf32>
  %6 = dsc.tanh %x : tensor<2x3xf32>
  // CHECK: dsc.erf %[[X]] : tensor<2x3xf32>
  %7 = dsc.erf %x : tensor<2x3xf32>
  // CHECK: dsc.sigmoid %[[X]] : tensor<2x3xf32>
  %8 = dsc.sigmoid %x : tensor<2x3xf32>
  // CHECK: dsc.relu %[[X]] : tensor<2x3xf32>
  %9 = dsc.relu %x : tensor<2x3xf32>
  // CHECK: dsc.floor %[[X]] : tensor<2x3xf32>
  %10 = dsc.floor %x : tensor<2x3xf32>
  // CHECK: dsc.ceil %[[X]] : tensor<2x3xf32>
  %11 = dsc.ceil %x : tensor<2x3xf32>
  // CHECK: dsc.sin %[[X]] : tensor<2x3xf32>
  %12 = dsc.sin %x : tensor<2x3xf32>
  // CHECK: dsc.cos %[[X]] : tensor<2x3xf32>
  %13 = dsc.cos %x : tensor<2x3xf32>
  // CHECK: dsc.softplus %[[X]] : tensor<2x3xf32>
  %14 = dsc.softplus %x : tensor<2x3xf32>
  // CHECK: dsc.not %[[B]] : tensor<4xi1>
  %15 = dsc.not %b : tensor<4xi1>
  return
}

// CHECK-LABEL: func.func @unary_with_attributes
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3xbf16>)
func.func @unary_with_attributes(%x: tensor<2x3xbf16>) {
  // CHECK: dsc.leaky_relu %[[X]] {alpha = 1.000000e-02 : f64} : tensor<2x3xbf16>
  %0 = dsc.leaky_relu %x {alpha = 0.01 : f64} : tensor<2x3xbf16>
  // CHECK: dsc.gelu %[[X]] : tensor<2x3xbf16>
  %1 = dsc.gelu %x : tensor<2x3xbf16>
  // CHECK: dsc.gelu %[[X]] : tensor<2x3xbf16>
  %2 = dsc.gelu %x {tanh_approximation = false} : tensor<2x3xbf16>
  // CHECK: dsc.gelu %[[X]] {tanh_approximation = true} : tensor<2x3xbf16>
  %3 = dsc.gelu %x {tanh_approximation = true} : tensor<2x3xbf16>
  // CHECK: dsc.clip %[[X]] {max = 6.000000e+00 : f64, min = 0.000000e+00 : f64} : tensor<2x3xbf16>
  %4 = dsc.clip %x {min = 0.0 : f64, max = 6.0 : f64} : tensor<2x3xbf16>
  // CHECK: dsc.clip %[[X]] {min = -1.000000e+00 : f64} : tensor<2x3xbf16>
  %5 = dsc.clip %x {min = -1.0 : f64} : tensor<2x3xbf16>
  return
}

// CHECK-LABEL: func.func @binary
// CHECK-SAME: (%[[A:[^:]+]]: tensor<2x3xf32>, %[[B:[^:]+]]: tensor<3xf32>, %[[S:[^:]+]]: tensor<f32>)
func.func @binary(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %s: tensor<f32>) {
  // CHECK: dsc.add %[[A]], %[[B]] : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
  %0 = dsc.add %a, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
  // CHECK: dsc.sub %[[B]], %[[A]] : tensor<3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  %1 = dsc.sub %b, %a : tensor<3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  // CHECK: dsc.mul %[[A]], %[[S]] : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
  %2 = dsc.mul %a, %s : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
  // CHECK: dsc.div %[[S]], %[[S]] : tensor<f32>, tensor<f32> -> tensor<f32>
  %3 = dsc.div %s, %s : tensor<f32>, tensor<f32> -> tensor<f32>
  // CHECK: dsc.pow %[[A]], %[[A]] : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  %4 = dsc.pow %a, %a : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  // CHECK: dsc.max %[[A]], %[[B]] : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
  %5 = dsc.max %a, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
  // CHECK: dsc.min %[[A]], %[[B]] : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
  %6 = dsc.min %a, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
  return
}

// CHECK-LABEL: func.func @logical_and_compare
// CHECK-SAME: (%[[P:[^:]+]]: tensor<4x1xi1>, %[[Q:[^:]+]]: tensor<5xi1>, %[[X:[^:]+]]: tensor<4x1xi64>, %[[Y:[^:]+]]: tensor<5xi64>)
func.func @logical_and_compare(%p: tensor<4x1xi1>, %q: tensor<5xi1>,
                               %x: tensor<4x1xi64>, %y: tensor<5xi64>) {
  // CHECK: dsc.and %[[P]], %[[Q]] : tensor<4x1xi1>, tensor<5xi1> -> tensor<4x5xi1>
  %0 = dsc.and %p, %q : tensor<4x1xi1>, tensor<5xi1> -> tensor<4x5xi1>
  // CHECK: dsc.or %[[P]], %[[Q]] : tensor<4x1xi1>, tensor<5xi1> -> tensor<4x5xi1>
  %1 = dsc.or %p, %q : tensor<4x1xi1>, tensor<5xi1> -> tensor<4x5xi1>
  // CHECK: dsc.xor %[[P]], %[[Q]] : tensor<4x1xi1>, tensor<5xi1> -> tensor<4x5xi1>
  %2 = dsc.xor %p, %q : tensor<4x1xi1>, tensor<5xi1> -> tensor<4x5xi1>
  // CHECK: dsc.equal %[[X]], %[[Y]] : tensor<4x1xi64>, tensor<5xi64> -> tensor<4x5xi1>
  %3 = dsc.equal %x, %y : tensor<4x1xi64>, tensor<5xi64> -> tensor<4x5xi1>
  // CHECK: dsc.less %[[X]], %[[Y]] : tensor<4x1xi64>, tensor<5xi64> -> tensor<4x5xi1>
  %4 = dsc.less %x, %y : tensor<4x1xi64>, tensor<5xi64> -> tensor<4x5xi1>
  // CHECK: dsc.less_equal %[[X]], %[[Y]] : tensor<4x1xi64>, tensor<5xi64> -> tensor<4x5xi1>
  %5 = dsc.less_equal %x, %y : tensor<4x1xi64>, tensor<5xi64> -> tensor<4x5xi1>
  // CHECK: dsc.greater %[[X]], %[[Y]] : tensor<4x1xi64>, tensor<5xi64> -> tensor<4x5xi1>
  %6 = dsc.greater %x, %y : tensor<4x1xi64>, tensor<5xi64> -> tensor<4x5xi1>
  // CHECK: dsc.greater_equal %[[X]], %[[Y]] : tensor<4x1xi64>, tensor<5xi64> -> tensor<4x5xi1>
  %7 = dsc.greater_equal %x, %y : tensor<4x1xi64>, tensor<5xi64> -> tensor<4x5xi1>
  return
}

// CHECK-LABEL: func.func @where
// CHECK-SAME: (%[[C:[^:]+]]: tensor<1x4xi1>, %[[X:[^:]+]]: tensor<3x1xf16>, %[[Y:[^:]+]]: tensor<f16>)
func.func @where(%c: tensor<1x4xi1>, %x: tensor<3x1xf16>, %y: tensor<f16>)
    -> tensor<3x4xf16> {
  // CHECK: dsc.where %[[C]], %[[X]], %[[Y]] : tensor<1x4xi1>, tensor<3x1xf16>, tensor<f16> -> tensor<3x4xf16>
  %0 = dsc.where %c, %x, %y : tensor<1x4xi1>, tensor<3x1xf16>, tensor<f16> -> tensor<3x4xf16>
  return %0 : tensor<3x4xf16>
}

//===----------------------------------------------------------------------===//
// Linear algebra, convolution and pooling
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @matmul
// CHECK-SAME: (%[[A:[^:]+]]: tensor<2x4x3xf32>, %[[B:[^:]+]]: tensor<3x5xf32>, %[[V:[^:]+]]: tensor<3xf32>)
func.func @matmul(%a: tensor<2x4x3xf32>, %b: tensor<3x5xf32>, %v: tensor<3xf32>) {
  // CHECK: dsc.matmul %[[A]], %[[B]] : tensor<2x4x3xf32>, tensor<3x5xf32> -> tensor<2x4x5xf32>
  %0 = dsc.matmul %a, %b : tensor<2x4x3xf32>, tensor<3x5xf32> -> tensor<2x4x5xf32>
  // CHECK: dsc.matmul %[[A]], %[[V]] : tensor<2x4x3xf32>, tensor<3xf32> -> tensor<2x4xf32>
  %1 = dsc.matmul %a, %v : tensor<2x4x3xf32>, tensor<3xf32> -> tensor<2x4xf32>
  // CHECK: dsc.matmul %[[V]], %[[V]] : tensor<3xf32>, tensor<3xf32> -> tensor<f32>
  %2 = dsc.matmul %v, %v : tensor<3xf32>, tensor<3xf32> -> tensor<f32>
  return
}

// A product of 16-bit operands may keep its f32 accumulator.
// CHECK-LABEL: func.func @matmul_widened
// CHECK: dsc.matmul %arg0, %arg1 {transpose_lhs = true} : tensor<3x4xbf16>, tensor<3x5xbf16> -> tensor<4x5xf32>
func.func @matmul_widened(%a: tensor<3x4xbf16>, %b: tensor<3x5xbf16>) -> tensor<4x5xf32> {
  %0 = dsc.matmul %a, %b {transpose_lhs = true} : tensor<3x4xbf16>, tensor<3x5xbf16> -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// CHECK-LABEL: func.func @gemm
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4x3xf32>, %[[B:[^:]+]]: tensor<5x3xf32>, %[[C:[^:]+]]: tensor<5xf32>, %[[D:[^:]+]]: tensor<3x4xf32>)
func.func @gemm(%a: tensor<4x3xf32>, %b: tensor<5x3xf32>, %c: tensor<5xf32>,
                %d: tensor<3x4xf32>) {
  // CHECK: dsc.gemm %[[A]], %[[B]], %[[C]] {alpha = 5.000000e-01 : f64, trans_b = true} : tensor<4x3xf32>, tensor<5x3xf32>, tensor<5xf32> -> tensor<4x5xf32>
  %0 = dsc.gemm %a, %b, %c {alpha = 0.5 : f64, beta = 1.0 : f64, trans_b = true}
      : tensor<4x3xf32>, tensor<5x3xf32>, tensor<5xf32> -> tensor<4x5xf32>
  // CHECK: dsc.gemm %[[D]], %[[B]] {trans_a = true, trans_b = true} : tensor<3x4xf32>, tensor<5x3xf32> -> tensor<4x5xf32>
  %1 = dsc.gemm %d, %b {trans_a = true, trans_b = true}
      : tensor<3x4xf32>, tensor<5x3xf32> -> tensor<4x5xf32>
  // CHECK: dsc.gemm %[[A]], %[[D]] : tensor<4x3xf32>, tensor<3x4xf32> -> tensor<4x4xf32>
  %2 = dsc.gemm %a, %d : tensor<4x3xf32>, tensor<3x4xf32> -> tensor<4x4xf32>
  return
}

// CHECK-LABEL: func.func @conv
// CHECK-SAME: (%[[X:[^:]+]]: tensor<1x4x9x9xf32>, %[[W:[^:]+]]: tensor<8x2x3x3xf32>, %[[B:[^:]+]]: tensor<8xf32>)
func.func @conv(%x: tensor<1x4x9x9xf32>, %w: tensor<8x2x3x3xf32>, %b: tensor<8xf32>) {
  // CHECK: dsc.conv %[[X]], %[[W]], %[[B]] {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : tensor<1x4x9x9xf32>, tensor<8x2x3x3xf32>, tensor<8xf32> -> tensor<1x8x5x5xf32>
  %0 = dsc.conv %x, %w, %b {strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>,
                            dilations = array<i64: 1, 1>, group = 2 : i64}
      : tensor<1x4x9x9xf32>, tensor<8x2x3x3xf32>, tensor<8xf32> -> tensor<1x8x5x5xf32>
  // CHECK: dsc.conv %[[X]], %{{.*}} {dilations = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x4x9x9xf32>, tensor<6x4x3x3xf32> -> tensor<1x6x5x5xf32>
  %w1 = dsc.constant dense<0.0> : tensor<6x4x3x3xf32>
  %1 = dsc.conv %x, %w1 {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>,
                         dilations = array<i64: 2, 2>}
      : tensor<1x4x9x9xf32>, tensor<6x4x3x3xf32> -> tensor<1x6x5x5xf32>
  return
}

// CHECK-LABEL: func.func @pooling
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3x5x5xf32>)
func.func @pooling(%x: tensor<2x3x5x5xf32>) {
  // CHECK: dsc.max_pool %[[X]] {ceil_mode = true, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<2x3x5x5xf32> -> tensor<2x3x3x3xf32>
  %0 = dsc.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>,
                        pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>,
                        ceil_mode = true}
      : tensor<2x3x5x5xf32> -> tensor<2x3x3x3xf32>
  // CHECK: dsc.avg_pool %[[X]] {count_include_pad = true, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<2x3x5x5xf32> -> tensor<2x3x5x5xf32>
  %1 = dsc.avg_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 1, 1>,
                        pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>,
                        ceil_mode = false, count_include_pad = true}
      : tensor<2x3x5x5xf32> -> tensor<2x3x5x5xf32>
  // CHECK: dsc.global_avg_pool %[[X]] : tensor<2x3x5x5xf32> -> tensor<2x3x1x1xf32>
  %2 = dsc.global_avg_pool %x : tensor<2x3x5x5xf32> -> tensor<2x3x1x1xf32>
  // CHECK: dsc.global_max_pool %[[X]] : tensor<2x3x5x5xf32> -> tensor<2x3x1x1xf32>
  %3 = dsc.global_max_pool %x : tensor<2x3x5x5xf32> -> tensor<2x3x1x1xf32>
  return
}

//===----------------------------------------------------------------------===//
// Normalization, softmax and losses
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @batch_norm
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3x4x4xf32>, %[[P:[^:]+]]: tensor<3xf32>)
func.func @batch_norm(%x: tensor<2x3x4x4xf32>, %p: tensor<3xf32>) {
  // CHECK: %{{.*}}, %{{.*}}, %{{.*}} = dsc.batch_norm_train %[[X]], %[[P]], %[[P]], %[[P]], %[[P]] {epsilon = 1.000000e-05 : f64, momentum = 9.000000e-01 : f64} : tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
  %0:3 = dsc.batch_norm_train %x, %p, %p, %p, %p {epsilon = 1.0e-5 : f64, momentum = 0.9 : f64}
      : tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
  // CHECK: dsc.batch_norm %[[X]], %[[P]], %[[P]], %[[P]], %[[P]] {epsilon = 1.000000e-05 : f64} : tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
  %1 = dsc.batch_norm %x, %p, %p, %p, %p {epsilon = 1.0e-5 : f64}
      : tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
  return
}

// CHECK-LABEL: func.func @layer_norm_and_softmax
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x5x8xf32>, %[[S:[^:]+]]: tensor<8xf32>, %[[S2:[^:]+]]: tensor<5x8xf32>)
func.func @layer_norm_and_softmax(%x: tensor<2x5x8xf32>, %s: tensor<8xf32>,
                                  %s2: tensor<5x8xf32>) {
  // CHECK: dsc.layer_norm %[[X]], %[[S]], %[[S]] {axis = -1 : i64, epsilon = 1.000000e-05 : f64} : tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<2x5x8xf32>
  %0 = dsc.layer_norm %x, %s, %s {axis = -1 : i64, epsilon = 1.0e-5 : f64}
      : tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<2x5x8xf32>
  // CHECK: dsc.layer_norm %[[X]], %[[S2]] {axis = 1 : i64, epsilon = 1.000000e-05 : f64} : tensor<2x5x8xf32>, tensor<5x8xf32> -> tensor<2x5x8xf32>
  %1 = dsc.layer_norm %x, %s2 {axis = 1 : i64, epsilon = 1.0e-5 : f64}
      : tensor<2x5x8xf32>, tensor<5x8xf32> -> tensor<2x5x8xf32>
  // CHECK: dsc.softmax %[[X]] {axis = -1 : i64} : tensor<2x5x8xf32>
  %2 = dsc.softmax %x {axis = -1 : i64} : tensor<2x5x8xf32>
  // CHECK: dsc.log_softmax %[[X]] {axis = 1 : i64} : tensor<2x5x8xf32>
  %3 = dsc.log_softmax %x {axis = 1 : i64} : tensor<2x5x8xf32>
  // CHECK: dsc.softmax_backward %[[X]], %{{.*}} {axis = -1 : i64} : tensor<2x5x8xf32>, tensor<2x5x8xf32>
  %4 = dsc.softmax_backward %x, %2 {axis = -1 : i64}
      : tensor<2x5x8xf32>, tensor<2x5x8xf32>
  // CHECK: dsc.softmax_backward %[[X]], %{{.*}} {axis = 1 : i64, log = true} : tensor<2x5x8xf32>, tensor<2x5x8xf32>
  %5 = dsc.softmax_backward %x, %3 {axis = 1 : i64, log = true}
      : tensor<2x5x8xf32>, tensor<2x5x8xf32>
  return
}

// CHECK-LABEL: func.func @losses
// CHECK-SAME: (%[[S:[^:]+]]: tensor<4x10xf32>, %[[L:[^:]+]]: tensor<4xi64>, %[[W:[^:]+]]: tensor<10xf32>, %[[S3:[^:]+]]: tensor<4x10x7xf32>, %[[L3:[^:]+]]: tensor<4x7xi32>)
func.func @losses(%s: tensor<4x10xf32>, %l: tensor<4xi64>, %w: tensor<10xf32>,
                  %s3: tensor<4x10x7xf32>, %l3: tensor<4x7xi32>) {
  // CHECK: dsc.softmax_cross_entropy %[[S]], %[[L]] {ignore_index = -100 : i64, reduction = "mean"} : tensor<4x10xf32>, tensor<4xi64> -> tensor<f32>
  %0 = dsc.softmax_cross_entropy %s, %l {reduction = "mean", ignore_index = -100 : i64}
      : tensor<4x10xf32>, tensor<4xi64> -> tensor<f32>
  // CHECK: dsc.softmax_cross_entropy %[[S3]], %[[L3]], %[[W]] {reduction = "none"} : tensor<4x10x7xf32>, tensor<4x7xi32>, tensor<10xf32> -> tensor<4x7xf32>
  %1 = dsc.softmax_cross_entropy %s3, %l3, %w {reduction = "none"}
      : tensor<4x10x7xf32>, tensor<4x7xi32>, tensor<10xf32> -> tensor<4x7xf32>
  // CHECK: dsc.nll_loss %[[S]], %[[L]], %[[W]] {reduction = "sum"} : tensor<4x10xf32>, tensor<4xi64>, tensor<10xf32> -> tensor<f32>
  %2 = dsc.nll_loss %s, %l, %w {reduction = "sum"}
      : tensor<4x10xf32>, tensor<4xi64>, tensor<10xf32> -> tensor<f32>
  // CHECK: dsc.nll_loss %[[S]], %[[L]] {reduction = "none"} : tensor<4x10xf32>, tensor<4xi64> -> tensor<4xf32>
  %3 = dsc.nll_loss %s, %l {reduction = "none"} : tensor<4x10xf32>, tensor<4xi64> -> tensor<4xf32>
  return
}

// CHECK-LABEL: func.func @dropout
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3xf32>)
func.func @dropout(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>) {
  // CHECK: %[[R:[^,]+]], %[[M:[^ ]+]] = dsc.dropout %[[X]] {ratio = 1.000000e-01 : f64, seed = 42 : i64} : tensor<2x3xf32>
  %0:2 = dsc.dropout %x {ratio = 0.1 : f64, seed = 42 : i64} : tensor<2x3xf32>
  // CHECK: dsc.dropout %[[X]] {ratio = 0.000000e+00 : f64} : tensor<2x3xf32>
  %1:2 = dsc.dropout %x {ratio = 0.0 : f64} : tensor<2x3xf32>
  // CHECK: return %[[R]], %[[M]] : tensor<2x3xf32>, tensor<2x3xi1>
  return %0#0, %0#1 : tensor<2x3xf32>, tensor<2x3xi1>
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @reductions
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3x4xf32>)
func.func @reductions(%x: tensor<2x3x4xf32>) {
  // CHECK: dsc.reduce_sum %[[X]] {axes = array<i64: 0, 2>} : tensor<2x3x4xf32> -> tensor<1x3x1xf32>
  %0 = dsc.reduce_sum %x {axes = array<i64: 0, 2>} : tensor<2x3x4xf32> -> tensor<1x3x1xf32>
  // CHECK: dsc.reduce_mean %[[X]] {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<2x3x4xf32> -> tensor<f32>
  %1 = dsc.reduce_mean %x {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<2x3x4xf32> -> tensor<f32>
  // CHECK: dsc.reduce_max %[[X]] {axes = array<i64: 1>} : tensor<2x3x4xf32> -> tensor<2x1x4xf32>
  %2 = dsc.reduce_max %x {axes = array<i64: 1>, keepdims = true} : tensor<2x3x4xf32> -> tensor<2x1x4xf32>
  // CHECK: dsc.reduce_min %[[X]] {axes = array<i64: 2>, keepdims = false} : tensor<2x3x4xf32> -> tensor<2x3xf32>
  %3 = dsc.reduce_min %x {axes = array<i64: 2>, keepdims = false} : tensor<2x3x4xf32> -> tensor<2x3xf32>
  // CHECK: dsc.reduce_prod %[[X]] {axes = array<i64>} : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  %4 = dsc.reduce_prod %x {axes = array<i64>} : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  return
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @shapes
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3x4xf32>, %[[C:[^:]+]]: tensor<3x1xf32>)
func.func @shapes(%x: tensor<2x3x4xf32>, %c: tensor<3x1xf32>) {
  // CHECK: dsc.reshape %[[X]] {shape = array<i64: 6, 4>} : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %0 = dsc.reshape %x {shape = array<i64: 6, 4>} : tensor<2x3x4xf32> -> tensor<6x4xf32>
  // CHECK: dsc.transpose %[[X]] {perm = array<i64: 2, 0, 1>} : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  %1 = dsc.transpose %x {perm = array<i64: 2, 0, 1>} : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  // CHECK: dsc.expand %[[C]] {shape = array<i64: 2, 3, 4>} : tensor<3x1xf32> -> tensor<2x3x4xf32>
  %2 = dsc.expand %c {shape = array<i64: 2, 3, 4>} : tensor<3x1xf32> -> tensor<2x3x4xf32>
  return
}

// CHECK-LABEL: func.func @slicing
// CHECK-SAME: (%[[X:[^:]+]]: tensor<8x6xf32>, %[[Y:[^:]+]]: tensor<8x2xf32>)
func.func @slicing(%x: tensor<8x6xf32>, %y: tensor<8x2xf32>) {
  // CHECK: dsc.slice %[[X]] {offsets = array<i64: 7, 0>, sizes = array<i64: 4, 3>, strides = array<i64: -2, 2>} : tensor<8x6xf32> -> tensor<4x3xf32>
  %0 = dsc.slice %x {offsets = array<i64: 7, 0>, sizes = array<i64: 4, 3>, strides = array<i64: -2, 2>}
      : tensor<8x6xf32> -> tensor<4x3xf32>
  // CHECK: dsc.concat %[[X]], %[[Y]], %[[X]] {axis = 1 : i64} : tensor<8x6xf32>, tensor<8x2xf32>, tensor<8x6xf32> -> tensor<8x14xf32>
  %1 = dsc.concat %x, %y, %x {axis = 1 : i64}
      : tensor<8x6xf32>, tensor<8x2xf32>, tensor<8x6xf32> -> tensor<8x14xf32>
  // CHECK: %{{.*}}:3 = dsc.split %[[X]] {axis = -1 : i64, sizes = array<i64: 1, 2, 3>} : tensor<8x6xf32> -> tensor<8x1xf32>, tensor<8x2xf32>, tensor<8x3xf32>
  %2:3 = dsc.split %x {axis = -1 : i64, sizes = array<i64: 1, 2, 3>}
      : tensor<8x6xf32> -> tensor<8x1xf32>, tensor<8x2xf32>, tensor<8x3xf32>
  return
}

// CHECK-LABEL: func.func @pad
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x3xf32>)
func.func @pad(%x: tensor<2x3xf32>) {
  // CHECK: dsc.pad %[[X]] {pads = array<i64: 1, -1, 2, 0>} : tensor<2x3xf32> -> tensor<5x2xf32>
  %0 = dsc.pad %x {pads = array<i64: 1, -1, 2, 0>, value = 0.0 : f64} : tensor<2x3xf32> -> tensor<5x2xf32>
  // CHECK: dsc.pad %[[X]] {pads = array<i64: 0, 0, 0, 1>, value = -1.000000e+00 : f64} : tensor<2x3xf32> -> tensor<2x4xf32>
  %1 = dsc.pad %x {pads = array<i64: 0, 0, 0, 1>, value = -1.0 : f64} : tensor<2x3xf32> -> tensor<2x4xf32>
  return
}

// CHECK-LABEL: func.func @gather_and_trilu
// CHECK-SAME: (%[[E:[^:]+]]: tensor<10x4xf32>, %[[I:[^:]+]]: tensor<2x3xi64>, %[[M:[^:]+]]: tensor<2x5x5xf32>)
func.func @gather_and_trilu(%e: tensor<10x4xf32>, %i: tensor<2x3xi64>,
                            %m: tensor<2x5x5xf32>) {
  // CHECK: dsc.gather %[[E]], %[[I]] {axis = 0 : i64} : tensor<10x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
  %0 = dsc.gather %e, %i {axis = 0 : i64} : tensor<10x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
  // CHECK: dsc.trilu %[[M]] {k = 1 : i64, upper = true} : tensor<2x5x5xf32>
  %1 = dsc.trilu %m {upper = true, k = 1 : i64} : tensor<2x5x5xf32>
  // CHECK: dsc.trilu %[[M]] {upper = false} : tensor<2x5x5xf32>
  %2 = dsc.trilu %m {upper = false, k = 0 : i64} : tensor<2x5x5xf32>
  return
}

//===----------------------------------------------------------------------===//
// Collectives: input points, waits, releases
//===----------------------------------------------------------------------===//

shard.grid @dsc_ranks(shape = 1x4)

// CHECK-LABEL: func.func @collective_points
// CHECK-SAME: (%[[S:[^:]+]]: tensor<2xbf16>)
func.func @collective_points(%s: tensor<2xbf16>) -> tensor<8xbf16> {
  // CHECK: %[[I:.*]] = dsc.collective_input %[[S]] : tensor<2xbf16>
  %i = dsc.collective_input %s : tensor<2xbf16>
  // CHECK: %[[G:.*]] = shard.all_gather %[[I]]
  %g = shard.all_gather %i on @dsc_ranks grid_axes = [1] gather_axis = 0
      : tensor<2xbf16> -> tensor<8xbf16>
  // CHECK: %[[W:.*]] = dsc.wait %[[G]] : tensor<8xbf16>
  %w = dsc.wait %g : tensor<8xbf16>
  // CHECK: %[[E:.*]] = dsc.exp %[[W]]
  %e = dsc.exp %w : tensor<8xbf16>
  // CHECK: dsc.release %[[W]], %[[E]] : tensor<8xbf16>, tensor<8xbf16>
  dsc.release %w, %e : tensor<8xbf16>, tensor<8xbf16>
  return %e : tensor<8xbf16>
}

// adamw_multi with the rounded new parameters (dsc-offload's compute copies).
// CHECK-LABEL: func.func @adamw_multi_copies
// CHECK: dsc.adamw_multi {{.*}} -> tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xbf16>
func.func @adamw_multi_copies(%p: tensor<4xf32>, %s: tensor<f32>, %t: tensor<i64>) -> tensor<4xbf16> {
  %r:4 = dsc.adamw_multi %s, %s, %s, %s, %s, %t, scale %s after %s, (%p, %p, %p, %p) : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<f32>, (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xbf16>
  return %r#3 : tensor<4xbf16>
}

// sum_squares over f32 tensors of any shapes, and over f64 ones.
// CHECK-LABEL: func.func @sum_squares
// CHECK: dsc.sum_squares scale %{{.*}}, (%{{.*}}, %{{.*}}) : tensor<f32>, (tensor<4x3xf32>, tensor<f32>) -> tensor<f32>
// CHECK: dsc.sum_squares scale %{{.*}}, (%{{.*}}) : tensor<f32>, (tensor<2xf64>) -> tensor<f32>
func.func @sum_squares(%a: tensor<4x3xf32>, %b: tensor<f32>, %c: tensor<2xf64>) -> (tensor<f32>, tensor<f32>) {
  %r = dsc.sum_squares scale %b, (%a, %b) : tensor<f32>, (tensor<4x3xf32>, tensor<f32>) -> tensor<f32>
  %q = dsc.sum_squares scale %b, (%c) : tensor<f32>, (tensor<2xf64>) -> tensor<f32>
  return %r, %q : tensor<f32>, tensor<f32>
}
