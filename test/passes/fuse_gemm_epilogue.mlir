// RUN: dsc-opt %s --split-input-file --dsc-fuse-gemm-epilogue | FileCheck %s
// RUN: dsc-opt %s --split-input-file --dsc-fuse-gemm-epilogue --dsc-fuse-elementwise | FileCheck %s --check-prefix=FUSED

// A bf16 linear layer's backward as mixed precision writes it: the bias
// gradient sums the f32 gradient, the weight gradient reads its bf16 cast
// as [T, C]. One dsc.matmul_bias_grad at the weight gradient, summing the
// bf16 values; the [1, 1, C] -> [C] reshape of the sum, which stood before
// the GEMM, reads the fused op's bias gradient.
// CHECK-LABEL: func.func @linear_backward
// CHECK: %[[G:.*]] = dsc.cast %{{.*}} {to = bf16}
// CHECK-NOT: dsc.reduce_sum
// CHECK: %[[G2:.*]] = dsc.reshape %[[G]] {shape = array<i64: 8, 16>}
// CHECK: %[[W:.*]], %[[B:.*]] = dsc.matmul_bias_grad %[[G2]], %{{.*}} : tensor<8x16xbf16>, tensor<8x24xbf16> -> tensor<16x24xbf16>, tensor<16xf32>
// CHECK-NOT: dsc.reshape %[[B]]
// CHECK-NOT: dsc.matmul {{.*}}transpose_lhs
// CHECK: %[[WF:.*]] = dsc.cast %[[W]] {to = f32}
// CHECK: return %[[WF]], %[[B]], %{{.*}}
//
// Then elementwise fusion writes the gradient only in bf16 (no f32 copy
// for a sum) and widens the weight gradient to the GEMM's f32 accumulator.
// FUSED-LABEL: func.func @linear_backward
// FUSED: dsc.fused "elementwise"(%arg0, %arg1) : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xbf16>
// FUSED: dsc.matmul_bias_grad {{.*}} -> tensor<16x24xf32>, tensor<16xf32>
// FUSED-NOT: dsc.cast
// FUSED: return
module attributes {dsc.target = {name = "cuda"}} {
func.func @linear_backward(%a: tensor<2x4x16xf32>, %b: tensor<2x4x16xf32>, %x: tensor<8x24xbf16>, %w: tensor<16x24xbf16>) -> (tensor<16x24xf32>, tensor<16xf32>, tensor<2x4x24xbf16>) {
  %g = dsc.mul %a, %b : tensor<2x4x16xf32>, tensor<2x4x16xf32> -> tensor<2x4x16xf32>
  %gh = dsc.cast %g {to = bf16} : tensor<2x4x16xf32> -> tensor<2x4x16xbf16>
  %s = dsc.reduce_sum %g {axes = array<i64: 0, 1>} : tensor<2x4x16xf32> -> tensor<1x1x16xf32>
  %bias = dsc.reshape %s {shape = array<i64: 16>} : tensor<1x1x16xf32> -> tensor<16xf32>
  %dx = dsc.matmul %gh, %w : tensor<2x4x16xbf16>, tensor<16x24xbf16> -> tensor<2x4x24xbf16>
  %g2 = dsc.reshape %gh {shape = array<i64: 8, 16>} : tensor<2x4x16xbf16> -> tensor<8x16xbf16>
  %dw = dsc.matmul %g2, %x {transpose_lhs = true} : tensor<8x16xbf16>, tensor<8x24xbf16> -> tensor<16x24xbf16>
  %dwf = dsc.cast %dw {to = f32} : tensor<16x24xbf16> -> tensor<16x24xf32>
  return %dwf, %bias, %dx : tensor<16x24xf32>, tensor<16xf32>, tensor<2x4x24xbf16>
}
}

// -----

// A 16-bit gradient summed directly (the attention's q, k, v gradients
// concatenated), 2-D already: the sum goes into the GEMM; keepdims = false
// needs no reshape. The sum's reader stands before the GEMM, so the fused
// op stands at the sum, where the GEMM's operands are ready.
// CHECK-LABEL: func.func @direct
// CHECK: %[[W:.*]], %[[B:.*]] = dsc.matmul_bias_grad %arg0, %arg1 : tensor<8x16xbf16>, tensor<8x24xbf16> -> tensor<16x24xbf16>, tensor<16xf32>
// CHECK-NEXT: %[[N:.*]] = dsc.mul %[[B]], %[[B]]
// CHECK-NEXT: return %[[W]], %[[N]]
module attributes {dsc.target = {name = "cuda"}} {
func.func @direct(%g: tensor<8x16xbf16>, %x: tensor<8x24xbf16>) -> (tensor<16x24xbf16>, tensor<16xf32>) {
  %s = dsc.reduce_sum %g {axes = array<i64: 0>, keepdims = false} : tensor<8x16xbf16> -> tensor<16xf32>
  %n = dsc.mul %s, %s : tensor<16xf32>, tensor<16xf32> -> tensor<16xf32>
  %dw = dsc.matmul %g, %x {transpose_lhs = true} : tensor<8x16xbf16>, tensor<8x24xbf16> -> tensor<16x24xbf16>
  return %dw, %n : tensor<16x24xbf16>, tensor<16xf32>
}
}

// -----

// Left alone: a sum over another axis (not a bias gradient), a product that
// reads the gradient untransposed, a sum in f64, and a target without GEMM
// epilogues (next case).
// CHECK-LABEL: func.func @not_bias_gradients
// CHECK-NOT: dsc.matmul_bias_grad
// CHECK: dsc.reduce_sum %arg0 {axes = array<i64: 1>, keepdims = false}
// CHECK: dsc.reduce_sum %arg2 {axes = array<i64: 0>, keepdims = false}
// CHECK: return
module attributes {dsc.target = {name = "cuda"}} {
func.func @not_bias_gradients(%g: tensor<8x16xbf16>, %x: tensor<16x24xbf16>, %d: tensor<8x16xf64>, %y: tensor<8x24xf64>) -> (tensor<8xf32>, tensor<8x24xbf16>, tensor<16xf64>, tensor<16x24xf64>) {
  %s = dsc.reduce_sum %g {axes = array<i64: 1>, keepdims = false} : tensor<8x16xbf16> -> tensor<8xf32>
  %p = dsc.matmul %g, %x : tensor<8x16xbf16>, tensor<16x24xbf16> -> tensor<8x24xbf16>
  %t = dsc.reduce_sum %d {axes = array<i64: 0>, keepdims = false} : tensor<8x16xf64> -> tensor<16xf64>
  %q = dsc.matmul %d, %y {transpose_lhs = true} : tensor<8x16xf64>, tensor<8x24xf64> -> tensor<16x24xf64>
  return %s, %p, %t, %q : tensor<8xf32>, tensor<8x24xbf16>, tensor<16xf64>, tensor<16x24xf64>
}
}

// -----

// CHECK-LABEL: func.func @cpu_target
// CHECK-NOT: dsc.matmul_bias_grad
// CHECK: dsc.reduce_sum
module attributes {dsc.target = {name = "cpu"}} {
func.func @cpu_target(%g: tensor<8x16xbf16>, %x: tensor<8x24xbf16>) -> (tensor<16x24xbf16>, tensor<16xf32>) {
  %s = dsc.reduce_sum %g {axes = array<i64: 0>, keepdims = false} : tensor<8x16xbf16> -> tensor<16xf32>
  %dw = dsc.matmul %g, %x {transpose_lhs = true} : tensor<8x16xbf16>, tensor<8x24xbf16> -> tensor<16x24xbf16>
  return %dw, %s : tensor<16x24xbf16>, tensor<16xf32>
}
}

// -----

// The sum's reader comes before the GEMM and the GEMM's input after the
// sum: the fused op can stand at neither, and nothing moves.
// CHECK-LABEL: func.func @no_place
// CHECK-NOT: dsc.matmul_bias_grad
module attributes {dsc.target = {name = "cuda"}} {
func.func @no_place(%g: tensor<8x16xbf16>, %a: tensor<8x24xbf16>) -> (tensor<16x24xbf16>, tensor<16xf32>) {
  %s = dsc.reduce_sum %g {axes = array<i64: 0>, keepdims = false} : tensor<8x16xbf16> -> tensor<16xf32>
  %n = dsc.mul %s, %s : tensor<16xf32>, tensor<16xf32> -> tensor<16xf32>
  %x = dsc.neg %a : tensor<8x24xbf16>
  %dw = dsc.matmul %g, %x {transpose_lhs = true} : tensor<8x16xbf16>, tensor<8x24xbf16> -> tensor<16x24xbf16>
  return %dw, %n : tensor<16x24xbf16>, tensor<16xf32>
}
}

// -----

// A weight stored [in, out] (GPT-2's Conv1D, an ONNX Gemm): the weight
// gradient is X^T G, the gradient the product's rhs; the epilogue sums the
// rhs (sum_rhs).
// CHECK-LABEL: func.func @weight_in_out
// CHECK: %[[W:.*]], %[[B:.*]] = dsc.matmul_bias_grad %arg1, %arg0 {sum_rhs = true} : tensor<8x24xbf16>, tensor<8x16xbf16> -> tensor<24x16xbf16>, tensor<16xf32>
// CHECK-NEXT: %[[R:.*]] = dsc.reshape %[[B]] {shape = array<i64: 1, 16>}
// CHECK-NEXT: return %[[W]], %[[R]]
module attributes {dsc.target = {name = "cuda"}} {
func.func @weight_in_out(%g: tensor<8x16xbf16>, %x: tensor<8x24xbf16>) -> (tensor<24x16xbf16>, tensor<1x16xf32>) {
  %s = dsc.reduce_sum %g {axes = array<i64: 0>} : tensor<8x16xbf16> -> tensor<1x16xf32>
  %dw = dsc.matmul %x, %g {transpose_lhs = true} : tensor<8x24xbf16>, tensor<8x16xbf16> -> tensor<24x16xbf16>
  return %dw, %s : tensor<24x16xbf16>, tensor<1x16xf32>
}
}

// -----

// Forward: a bf16 product, widened, plus a widened bf16 bias, rounded back
// to bf16 (the qkv projection), and the same with GELU also reading the f32
// sum (the MLP's first layer): one dsc.gemm over the rows with the bf16
// bias as C (cuBLASLt adds it to the f32 accumulator and rounds once); the
// GELU reads the widened bf16 sum; the bias widening goes when unread.
// CHECK-LABEL: func.func @forward_bias
// CHECK: %[[X:.*]] = dsc.reshape %arg0 {shape = array<i64: 8, 16>}
// CHECK: %[[G:.*]] = dsc.gemm %[[X]], %arg1, %arg2 {trans_b = true} : tensor<8x16xbf16>, tensor<24x16xbf16>, tensor<24xbf16> -> tensor<8x24xbf16>
// CHECK: %[[S:.*]] = dsc.reshape %[[G]] {shape = array<i64: 2, 4, 24>}
// CHECK: %[[W:.*]] = dsc.cast %[[S]] {to = f32}
// CHECK: %[[E:.*]] = dsc.gelu %[[W]]
// CHECK-NOT: dsc.matmul
// CHECK-NOT: dsc.add
// CHECK: return %[[S]], %[[E]]
module attributes {dsc.target = {name = "cuda"}} {
func.func @forward_bias(%x: tensor<2x4x16xbf16>, %w: tensor<24x16xbf16>, %b: tensor<24xbf16>) -> (tensor<2x4x24xbf16>, tensor<2x4x24xf32>) {
  %bw = dsc.cast %b {to = f32} : tensor<24xbf16> -> tensor<24xf32>
  %p = dsc.matmul %x, %w {transpose_rhs = true} : tensor<2x4x16xbf16>, tensor<24x16xbf16> -> tensor<2x4x24xbf16>
  %pw = dsc.cast %p {to = f32} : tensor<2x4x24xbf16> -> tensor<2x4x24xf32>
  %s = dsc.add %bw, %pw : tensor<24xf32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  %sh = dsc.cast %s {to = bf16} : tensor<2x4x24xf32> -> tensor<2x4x24xbf16>
  %e = dsc.gelu %s {tanh_approximation = true} : tensor<2x4x24xf32>
  return %sh, %e : tensor<2x4x24xbf16>, tensor<2x4x24xf32>
}
}

// -----

// Left alone: a sum nobody rounds back to bf16 (a residual add follows:
// the f32 value is what is read), and an f32 bias that is no widening.
// CHECK-LABEL: func.func @forward_kept
// CHECK-NOT: dsc.gemm
// CHECK: return
module attributes {dsc.target = {name = "cuda"}} {
func.func @forward_kept(%x: tensor<8x16xbf16>, %w: tensor<16x24xbf16>, %b: tensor<24xbf16>, %r: tensor<8x24xf32>, %bf: tensor<24xf32>) -> (tensor<8x24xf32>, tensor<8x24xbf16>) {
  %bw = dsc.cast %b {to = f32} : tensor<24xbf16> -> tensor<24xf32>
  %p = dsc.matmul %x, %w : tensor<8x16xbf16>, tensor<16x24xbf16> -> tensor<8x24xbf16>
  %pw = dsc.cast %p {to = f32} : tensor<8x24xbf16> -> tensor<8x24xf32>
  %s = dsc.add %bw, %pw : tensor<24xf32>, tensor<8x24xf32> -> tensor<8x24xf32>
  %t = dsc.add %s, %r : tensor<8x24xf32>, tensor<8x24xf32> -> tensor<8x24xf32>
  %q = dsc.matmul %x, %w : tensor<8x16xbf16>, tensor<16x24xbf16> -> tensor<8x24xbf16>
  %qw = dsc.cast %q {to = f32} : tensor<8x24xbf16> -> tensor<8x24xf32>
  %u = dsc.add %qw, %bf : tensor<8x24xf32>, tensor<24xf32> -> tensor<8x24xf32>
  %uh = dsc.cast %u {to = bf16} : tensor<8x24xf32> -> tensor<8x24xbf16>
  return %t, %uh : tensor<8x24xf32>, tensor<8x24xbf16>
}
}

// -----

// Full recomputation: the forward original of the MLP's first layer feeds
// only GELU (no cast back to bf16), its clone in backward (dsc.recomputed)
// is rounded for the GELU gradient. Both become the same dsc.gemm, the
// clone's still marked, so the recomputed value has the stored one's bits.
// CHECK-LABEL: func.func @recomputed_clone
// CHECK: %[[G:.*]] = dsc.gemm %arg0, %arg1, %arg2 : tensor<8x16xbf16>, tensor<16x24xbf16>, tensor<24xbf16> -> tensor<8x24xbf16>
// CHECK: %[[W:.*]] = dsc.cast %[[G]] {to = f32}
// CHECK: dsc.gelu %[[W]]
// CHECK: %[[G2:.*]] = dsc.gemm %arg0, %arg1, %arg2 {dsc.recomputed = 1 : i64} : tensor<8x16xbf16>, tensor<16x24xbf16>, tensor<24xbf16> -> tensor<8x24xbf16>
// CHECK-NOT: dsc.matmul
// CHECK: return %{{.*}}, %[[G2]]
module attributes {dsc.target = {name = "cuda"}} {
func.func @recomputed_clone(%x: tensor<8x16xbf16>, %w: tensor<16x24xbf16>, %b: tensor<24xbf16>) -> (tensor<8x24xf32>, tensor<8x24xbf16>) {
  %bw = dsc.cast %b {to = f32} : tensor<24xbf16> -> tensor<24xf32>
  %p = dsc.matmul %x, %w : tensor<8x16xbf16>, tensor<16x24xbf16> -> tensor<8x24xbf16>
  %pw = dsc.cast %p {to = f32} : tensor<8x24xbf16> -> tensor<8x24xf32>
  %s = dsc.add %pw, %bw : tensor<8x24xf32>, tensor<24xf32> -> tensor<8x24xf32>
  %e = dsc.gelu %s {tanh_approximation = true} : tensor<8x24xf32>
  %p2 = dsc.matmul %x, %w {dsc.recomputed = 1 : i64} : tensor<8x16xbf16>, tensor<16x24xbf16> -> tensor<8x24xbf16>
  %pw2 = dsc.cast %p2 {dsc.recomputed = 1 : i64, to = f32} : tensor<8x24xbf16> -> tensor<8x24xf32>
  %s2 = dsc.add %pw2, %bw {dsc.recomputed = 1 : i64} : tensor<8x24xf32>, tensor<24xf32> -> tensor<8x24xf32>
  %h2 = dsc.cast %s2 {dsc.recomputed = 1 : i64, to = bf16} : tensor<8x24xf32> -> tensor<8x24xbf16>
  return %e, %h2 : tensor<8x24xf32>, tensor<8x24xbf16>
}
}
