// RUN: dsc-opt %s --split-input-file --dsc-fuse-classifier="chunk-bytes=96" | FileCheck %s
// The pass's result survives the generic passes the pipeline runs after it.
// RUN: dsc-opt %s --split-input-file --dsc-fuse-classifier="chunk-bytes=96" --canonicalize --cse | FileCheck %s --check-prefix=CANON

// A tied bf16 classifier (w [V, C] read transposed), its summed loss and the
// two gradient matmuls become one op at the gradient's place; 96 bytes hold
// 8 rows of 6 bf16 logits: 8 rows a chunk, 2 chunks; the weight's gradient
// accumulates in f32 and its widening cast reads the op's result.
// CHECK-LABEL: func.func @tied_bf16
// CHECK-NOT: dsc.softmax_cross_entropy
// CHECK-NOT: dsc.class_loss_backward
// CHECK: %[[L:.*]], %[[DX:.*]], %[[DW:.*]], %{{.*}}, %{{.*}} = dsc.linear_cross_entropy %arg0, %arg1, %arg2, %arg3 {chunk_rows = 8 : i64, f32_weight_grad = true, ignore_index = -100 : i64, transpose_weight = true} : tensor<2x8x4xbf16>, tensor<6x4xbf16>, tensor<16xi64>, tensor<f32>
// CHECK-NOT: dsc.matmul
// CHECK: return %[[L]], %[[DX]], %[[DW]] : tensor<f32>, tensor<2x8x4xbf16>, tensor<6x4xf32>
// CANON-LABEL: func.func @tied_bf16
// CANON: dsc.linear_cross_entropy
func.func @tied_bf16(%x: tensor<2x8x4xbf16>, %w: tensor<6x4xbf16>, %labels: tensor<16xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<2x8x4xbf16>, tensor<6x4xf32>) {
  %mm = dsc.matmul %x, %w {transpose_rhs = true} : tensor<2x8x4xbf16>, tensor<6x4xbf16> -> tensor<2x8x6xbf16>
  %s = dsc.reshape %mm {shape = array<i64: 16, 6>} : tensor<2x8x6xbf16> -> tensor<16x6xbf16>
  %loss = dsc.softmax_cross_entropy %s, %labels {ignore_index = -100 : i64, reduction = "sum"} : tensor<16x6xbf16>, tensor<16xi64> -> tensor<f32>
  %g = dsc.class_loss_backward %seed, %s, %labels {ignore_index = -100 : i64, kind = "softmax_cross_entropy", reduction = "sum"} : tensor<f32>, tensor<16x6xbf16>, tensor<16xi64> -> tensor<16x6xbf16>
  %g3 = dsc.reshape %g {shape = array<i64: 2, 8, 6>} : tensor<16x6xbf16> -> tensor<2x8x6xbf16>
  %dx = dsc.matmul %g3, %w : tensor<2x8x6xbf16>, tensor<6x4xbf16> -> tensor<2x8x4xbf16>
  %x2 = dsc.reshape %x {shape = array<i64: 16, 4>} : tensor<2x8x4xbf16> -> tensor<16x4xbf16>
  %dw = dsc.matmul %g, %x2 {transpose_lhs = true} : tensor<16x6xbf16>, tensor<16x4xbf16> -> tensor<6x4xbf16>
  %dw32 = dsc.cast %dw {to = f32} : tensor<6x4xbf16> -> tensor<6x4xf32>
  return %loss, %dx, %dw32 : tensor<f32>, tensor<2x8x4xbf16>, tensor<6x4xf32>
}

// -----

// An untied f32 classifier (w [C, V]); the weight's gradient stays f32.
// Rows of 6 f32 logits: 4 a chunk in 96 bytes.
// CHECK-LABEL: func.func @untied_f32
// CHECK: dsc.linear_cross_entropy %arg0, %arg1, %arg2, %arg3 {chunk_rows = 4 : i64, f32_weight_grad = false, transpose_weight = false}
// CHECK-NOT: dsc.matmul
func.func @untied_f32(%x: tensor<16x4xf32>, %w: tensor<4x6xf32>, %labels: tensor<16xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<16x4xf32>, tensor<4x6xf32>) {
  %mm = dsc.matmul %x, %w : tensor<16x4xf32>, tensor<4x6xf32> -> tensor<16x6xf32>
  %loss = dsc.softmax_cross_entropy %mm, %labels {reduction = "sum"} : tensor<16x6xf32>, tensor<16xi64> -> tensor<f32>
  %g = dsc.class_loss_backward %seed, %mm, %labels {kind = "softmax_cross_entropy", reduction = "sum"} : tensor<f32>, tensor<16x6xf32>, tensor<16xi64> -> tensor<16x6xf32>
  %dx = dsc.matmul %g, %w {transpose_rhs = true} : tensor<16x6xf32>, tensor<4x6xf32> -> tensor<16x4xf32>
  %dw = dsc.matmul %x, %g {transpose_lhs = true} : tensor<16x4xf32>, tensor<16x6xf32> -> tensor<4x6xf32>
  return %loss, %dx, %dw : tensor<f32>, tensor<16x4xf32>, tensor<4x6xf32>
}

// -----

// The logits are returned too: they must exist whole, nothing is fused.
// CHECK-LABEL: func.func @logits_returned
// CHECK-NOT: dsc.linear_cross_entropy
// CHECK: dsc.softmax_cross_entropy
func.func @logits_returned(%x: tensor<16x4xf32>, %w: tensor<4x6xf32>, %labels: tensor<16xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<16x4xf32>, tensor<4x6xf32>, tensor<16x6xf32>) {
  %mm = dsc.matmul %x, %w : tensor<16x4xf32>, tensor<4x6xf32> -> tensor<16x6xf32>
  %loss = dsc.softmax_cross_entropy %mm, %labels {reduction = "sum"} : tensor<16x6xf32>, tensor<16xi64> -> tensor<f32>
  %g = dsc.class_loss_backward %seed, %mm, %labels {kind = "softmax_cross_entropy", reduction = "sum"} : tensor<f32>, tensor<16x6xf32>, tensor<16xi64> -> tensor<16x6xf32>
  %dx = dsc.matmul %g, %w {transpose_rhs = true} : tensor<16x6xf32>, tensor<4x6xf32> -> tensor<16x4xf32>
  %dw = dsc.matmul %x, %g {transpose_lhs = true} : tensor<16x4xf32>, tensor<16x6xf32> -> tensor<4x6xf32>
  return %loss, %dx, %dw, %mm : tensor<f32>, tensor<16x4xf32>, tensor<4x6xf32>, tensor<16x6xf32>
}

// -----

// A mean reduction (its divisor is over all rows, not a chunk's) and a
// loss read before its gradient are left as they are.
// CHECK-LABEL: func.func @mean_and_early_reader
// CHECK-NOT: dsc.linear_cross_entropy
func.func @mean_and_early_reader(%x: tensor<16x4xf32>, %w: tensor<4x6xf32>, %labels: tensor<16xi64>) -> (tensor<f32>, tensor<16x4xf32>, tensor<4x6xf32>, tensor<f32>) {
  %mm = dsc.matmul %x, %w : tensor<16x4xf32>, tensor<4x6xf32> -> tensor<16x6xf32>
  %loss = dsc.softmax_cross_entropy %mm, %labels {reduction = "mean"} : tensor<16x6xf32>, tensor<16xi64> -> tensor<f32>
  %g = dsc.class_loss_backward %loss, %mm, %labels {kind = "softmax_cross_entropy", reduction = "mean"} : tensor<f32>, tensor<16x6xf32>, tensor<16xi64> -> tensor<16x6xf32>
  %dx = dsc.matmul %g, %w {transpose_rhs = true} : tensor<16x6xf32>, tensor<4x6xf32> -> tensor<16x4xf32>
  %dw = dsc.matmul %x, %g {transpose_lhs = true} : tensor<16x4xf32>, tensor<16x6xf32> -> tensor<4x6xf32>
  %mm2 = dsc.matmul %x, %w : tensor<16x4xf32>, tensor<4x6xf32> -> tensor<16x6xf32>
  %sum = dsc.softmax_cross_entropy %mm2, %labels {reduction = "sum"} : tensor<16x6xf32>, tensor<16xi64> -> tensor<f32>
  %g2 = dsc.class_loss_backward %sum, %mm2, %labels {kind = "softmax_cross_entropy", reduction = "sum"} : tensor<f32>, tensor<16x6xf32>, tensor<16xi64> -> tensor<16x6xf32>
  %dx2 = dsc.matmul %g2, %w {transpose_rhs = true} : tensor<16x6xf32>, tensor<4x6xf32> -> tensor<16x4xf32>
  %dw2 = dsc.matmul %x, %g2 {transpose_lhs = true} : tensor<16x4xf32>, tensor<16x6xf32> -> tensor<4x6xf32>
  %dxs = dsc.add %dx, %dx2 : tensor<16x4xf32>, tensor<16x4xf32> -> tensor<16x4xf32>
  %dws = dsc.add %dw, %dw2 : tensor<4x6xf32>, tensor<4x6xf32> -> tensor<4x6xf32>
  return %loss, %dxs, %dws, %sum : tensor<f32>, tensor<16x4xf32>, tensor<4x6xf32>, tensor<f32>
}

// -----

// HF's causal-LM loss reads the logits of all but the last position
// (logits[:, :-1]) and pads the gradient back: the fused op takes those
// input rows, and its input gradient is padded back the same way.
// CHECK-LABEL: func.func @sliced_rows
// CHECK: %[[X:.*]] = dsc.slice %arg0 {offsets = array<i64: 0, 0, 0>, sizes = array<i64: 2, 7, 4>, strides = array<i64: 1, 1, 1>}
// CHECK: %[[L:.*]], %[[DX:.*]], %[[DW:.*]], %{{.*}}, %{{.*}} = dsc.linear_cross_entropy %[[X]], %arg1, %arg2, %arg3
// CHECK: %[[PAD:.*]] = dsc.insert_slice %[[DX]] {offsets = array<i64: 0, 0, 0>, shape = array<i64: 2, 8, 4>, strides = array<i64: 1, 1, 1>}
// CHECK-NOT: dsc.matmul
// CHECK: return %[[L]], %[[PAD]], %[[DW]]
func.func @sliced_rows(%x: tensor<2x8x4xf32>, %w: tensor<6x4xf32>, %labels: tensor<14xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<2x8x4xf32>, tensor<6x4xf32>) {
  %mm = dsc.matmul %x, %w {transpose_rhs = true} : tensor<2x8x4xf32>, tensor<6x4xf32> -> tensor<2x8x6xf32>
  %sl = dsc.slice %mm {offsets = array<i64: 0, 0, 0>, sizes = array<i64: 2, 7, 6>, strides = array<i64: 1, 1, 1>} : tensor<2x8x6xf32> -> tensor<2x7x6xf32>
  %s = dsc.reshape %sl {shape = array<i64: 14, 6>} : tensor<2x7x6xf32> -> tensor<14x6xf32>
  %loss = dsc.softmax_cross_entropy %s, %labels {reduction = "sum"} : tensor<14x6xf32>, tensor<14xi64> -> tensor<f32>
  %g = dsc.class_loss_backward %seed, %s, %labels {kind = "softmax_cross_entropy", reduction = "sum"} : tensor<f32>, tensor<14x6xf32>, tensor<14xi64> -> tensor<14x6xf32>
  %g3 = dsc.reshape %g {shape = array<i64: 2, 7, 6>} : tensor<14x6xf32> -> tensor<2x7x6xf32>
  %gp = dsc.insert_slice %g3 {offsets = array<i64: 0, 0, 0>, shape = array<i64: 2, 8, 6>, strides = array<i64: 1, 1, 1>} : tensor<2x7x6xf32> -> tensor<2x8x6xf32>
  %dx = dsc.matmul %gp, %w : tensor<2x8x6xf32>, tensor<6x4xf32> -> tensor<2x8x4xf32>
  %x2 = dsc.reshape %x {shape = array<i64: 16, 4>} : tensor<2x8x4xf32> -> tensor<16x4xf32>
  %g2 = dsc.reshape %gp {shape = array<i64: 16, 6>} : tensor<2x8x6xf32> -> tensor<16x6xf32>
  %dw = dsc.matmul %g2, %x2 {transpose_lhs = true} : tensor<16x6xf32>, tensor<16x4xf32> -> tensor<6x4xf32>
  return %loss, %dx, %dw : tensor<f32>, tensor<2x8x4xf32>, tensor<6x4xf32>
}
