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

// -----

// GELU (tanh) in the epilogues. Forward: the bf16 dsc.gemm (bias as C),
// widened, through GELU, rounded back: one dsc.gemm_gelu whose `pre`
// (the rounded sum) is what backward's derivative reads. Backward: the
// next layer's input gradient (a bf16 matmul) widened, times GELU's
// derivative at the widened pre, as autodiff writes it, rounded: one
// dsc.matmul_gelu_grad reading pre as [T, N]; nothing of the derivative's
// chain is left.
// CHECK-LABEL: func.func @gelu_mlp
// CHECK: %[[Y:.*]], %[[PRE:.*]] = dsc.gemm_gelu %arg0, %arg1, %arg2 : tensor<8x16xbf16>, tensor<16x24xbf16>, tensor<24xbf16> -> tensor<8x24xbf16>, tensor<8x24xbf16>
// CHECK: %[[P3:.*]] = dsc.reshape %[[PRE]] {shape = array<i64: 2, 4, 24>}
// CHECK: %[[H:.*]] = dsc.reshape %[[Y]] {shape = array<i64: 2, 4, 24>}
// CHECK: %[[DY:.*]] = dsc.reshape %arg4 {shape = array<i64: 8, 16>}
// CHECK: %[[P2:.*]] = dsc.reshape %[[P3]] {shape = array<i64: 8, 24>}
// CHECK: %[[DX:.*]] = dsc.matmul_gelu_grad %[[DY]], %arg3, %[[P2]] {trans_b = true} : tensor<8x16xbf16>, tensor<24x16xbf16>, tensor<8x24xbf16> -> tensor<8x24xbf16>
// CHECK: %[[DX3:.*]] = dsc.reshape %[[DX]] {shape = array<i64: 2, 4, 24>}
// CHECK-NOT: dsc.tanh
// CHECK-NOT: dsc.gelu
// CHECK: return %[[H]], %[[DX3]]
module attributes {dsc.target = {name = "cuda"}} {
func.func @gelu_mlp(%x: tensor<8x16xbf16>, %w: tensor<16x24xbf16>, %b: tensor<24xbf16>, %w2: tensor<24x16xbf16>, %dy: tensor<2x4x16xbf16>) -> (tensor<2x4x24xbf16>, tensor<2x4x24xbf16>) {
  %s = dsc.gemm %x, %w, %b : tensor<8x16xbf16>, tensor<16x24xbf16>, tensor<24xbf16> -> tensor<8x24xbf16>
  %s3 = dsc.reshape %s {shape = array<i64: 2, 4, 24>} : tensor<8x24xbf16> -> tensor<2x4x24xbf16>
  %sw = dsc.cast %s3 {to = f32} : tensor<2x4x24xbf16> -> tensor<2x4x24xf32>
  %e = dsc.gelu %sw {tanh_approximation = true} : tensor<2x4x24xf32>
  %h = dsc.cast %e {to = bf16} : tensor<2x4x24xf32> -> tensor<2x4x24xbf16>
  %m = dsc.matmul %dy, %w2 {transpose_rhs = true} : tensor<2x4x16xbf16>, tensor<24x16xbf16> -> tensor<2x4x24xbf16>
  %g = dsc.cast %m {to = f32} : tensor<2x4x24xbf16> -> tensor<2x4x24xf32>
  %x0 = dsc.cast %s3 {dsc.recompute, to = f32} : tensor<2x4x24xbf16> -> tensor<2x4x24xf32>
  %x2 = dsc.mul %x0, %x0 : tensor<2x4x24xf32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  %x3 = dsc.mul %x2, %x0 : tensor<2x4x24xf32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  %c1 = dsc.constant dense<4.471500e-02> : tensor<f32>
  %a1 = dsc.mul %x3, %c1 : tensor<2x4x24xf32>, tensor<f32> -> tensor<2x4x24xf32>
  %a2 = dsc.add %x0, %a1 : tensor<2x4x24xf32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  %k = dsc.constant dense<0.797884583> : tensor<f32>
  %u = dsc.mul %a2, %k : tensor<2x4x24xf32>, tensor<f32> -> tensor<2x4x24xf32>
  %t = dsc.tanh %u : tensor<2x4x24xf32>
  %c3 = dsc.constant dense<1.341450e-01> : tensor<f32>
  %d1 = dsc.mul %x2, %c3 : tensor<2x4x24xf32>, tensor<f32> -> tensor<2x4x24xf32>
  %one = dsc.constant dense<1.000000e+00> : tensor<f32>
  %d2 = dsc.add %one, %d1 : tensor<f32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  %du = dsc.mul %d2, %k : tensor<2x4x24xf32>, tensor<f32> -> tensor<2x4x24xf32>
  %tt = dsc.mul %t, %t : tensor<2x4x24xf32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  %s1 = dsc.sub %one, %tt : tensor<f32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  %s2 = dsc.mul %s1, %du : tensor<2x4x24xf32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  %half = dsc.constant dense<5.000000e-01> : tensor<f32>
  %xh = dsc.mul %x0, %half : tensor<2x4x24xf32>, tensor<f32> -> tensor<2x4x24xf32>
  %r1 = dsc.mul %xh, %s2 : tensor<2x4x24xf32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  %r2 = dsc.add %one, %t : tensor<f32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  %r3 = dsc.mul %r2, %half : tensor<2x4x24xf32>, tensor<f32> -> tensor<2x4x24xf32>
  %d = dsc.add %r3, %r1 : tensor<2x4x24xf32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  %gd = dsc.mul %g, %d : tensor<2x4x24xf32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  %dx = dsc.cast %gd {to = bf16} : tensor<2x4x24xf32> -> tensor<2x4x24xbf16>
  return %h, %dx : tensor<2x4x24xbf16>, tensor<2x4x24xbf16>
}
}

// -----

// Left alone: GELU's exact form (cuBLASLt's epilogue is the tanh one); a
// product that a second GELU reads too (a clone of GELU alone, as
// selective recomputation makes: it computes GELU from the rounded sum,
// which the epilogue does not, so neither is fused); a product times
// something that is not GELU's derivative (the constant 0.5 of its first
// term is 0.25 here); an f32 GEMM.
// CHECK-LABEL: func.func @gelu_kept
// CHECK-NOT: dsc.gemm_gelu
// CHECK-NOT: dsc.matmul_gelu_grad
// CHECK: return
module attributes {dsc.target = {name = "cuda"}} {
func.func @gelu_kept(%x: tensor<8x16xbf16>, %w: tensor<16x24xbf16>, %dy: tensor<8x16xbf16>, %w2: tensor<24x16xbf16>, %xf: tensor<8x16xf32>, %wf: tensor<16x24xf32>) -> (tensor<8x24xbf16>, tensor<8x24xbf16>, tensor<8x24xbf16>, tensor<8x24xbf16>, tensor<8x24xbf16>) {
  %p = dsc.matmul %x, %w : tensor<8x16xbf16>, tensor<16x24xbf16> -> tensor<8x24xbf16>
  %pw = dsc.cast %p {to = f32} : tensor<8x24xbf16> -> tensor<8x24xf32>
  %e = dsc.gelu %pw : tensor<8x24xf32>
  %h = dsc.cast %e {to = bf16} : tensor<8x24xf32> -> tensor<8x24xbf16>
  %q = dsc.matmul %dy, %w : tensor<8x16xbf16>, tensor<16x24xbf16> -> tensor<8x24xbf16>
  %qw = dsc.cast %q {to = f32} : tensor<8x24xbf16> -> tensor<8x24xf32>
  %e1 = dsc.gelu %qw {tanh_approximation = true} : tensor<8x24xf32>
  %h1 = dsc.cast %e1 {to = bf16} : tensor<8x24xf32> -> tensor<8x24xbf16>
  %qw2 = dsc.cast %q {dsc.recomputed = 1 : i64, to = f32} : tensor<8x24xbf16> -> tensor<8x24xf32>
  %e2 = dsc.gelu %qw2 {dsc.recomputed = 1 : i64, tanh_approximation = true} : tensor<8x24xf32>
  %h2 = dsc.cast %e2 {to = bf16} : tensor<8x24xf32> -> tensor<8x24xbf16>
  %m = dsc.matmul %dy, %w2 {transpose_rhs = true} : tensor<8x16xbf16>, tensor<24x16xbf16> -> tensor<8x24xbf16>
  %g = dsc.cast %m {to = f32} : tensor<8x24xbf16> -> tensor<8x24xf32>
  %x0 = dsc.cast %h {to = f32} : tensor<8x24xbf16> -> tensor<8x24xf32>
  %k = dsc.constant dense<0.797884583> : tensor<f32>
  %u = dsc.mul %x0, %k : tensor<8x24xf32>, tensor<f32> -> tensor<8x24xf32>
  %t = dsc.tanh %u : tensor<8x24xf32>
  %one = dsc.constant dense<1.000000e+00> : tensor<f32>
  %quarter = dsc.constant dense<2.500000e-01> : tensor<f32>
  %r2 = dsc.add %one, %t : tensor<f32>, tensor<8x24xf32> -> tensor<8x24xf32>
  %d = dsc.mul %r2, %quarter : tensor<8x24xf32>, tensor<f32> -> tensor<8x24xf32>
  %gd = dsc.mul %g, %d : tensor<8x24xf32>, tensor<8x24xf32> -> tensor<8x24xf32>
  %dx = dsc.cast %gd {to = bf16} : tensor<8x24xf32> -> tensor<8x24xbf16>
  %pf = dsc.matmul %xf, %wf : tensor<8x16xf32>, tensor<16x24xf32> -> tensor<8x24xf32>
  %ef = dsc.gelu %pf {tanh_approximation = true} : tensor<8x24xf32>
  %hf = dsc.cast %ef {to = bf16} : tensor<8x24xf32> -> tensor<8x24xbf16>
  return %h, %h1, %h2, %dx, %hf : tensor<8x24xbf16>, tensor<8x24xbf16>, tensor<8x24xbf16>, tensor<8x24xbf16>, tensor<8x24xbf16>
}
}
