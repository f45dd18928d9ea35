// RUN: dsc-opt %s --split-input-file --dsc-fuse-elementwise | FileCheck %s

// The bias add and tanh GELU of an MLP, from the bf16 matmul output to the
// bf16 input of the next matmul: one dsc.fused op; the values used only in
// the chain are in its body, the splat constants copied in, and the h
// value that backward reads is yielded beside the result.
// CHECK-LABEL: func.func @mlp
// CHECK: %[[F:.*]]:2 = dsc.fused "elementwise"(%arg0, %arg1) : (tensor<4x8xbf16>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xbf16>) {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<4x8xbf16>, %[[B:.*]]: tensor<8xf32>):
// CHECK-NEXT: %[[C:.*]] = dsc.cast %[[X]] {to = f32}
// CHECK-NEXT: %[[H:.*]] = dsc.add %[[C]], %[[B]]
// CHECK-NEXT: %[[K:.*]] = dsc.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT: dsc.mul %[[H]], %[[K]]
// CHECK: dsc.tanh
// CHECK: %[[O:.*]] = dsc.cast %{{.*}} {to = bf16}
// CHECK-NEXT: dsc.yield %[[H]], %[[O]] : tensor<4x8xf32>, tensor<4x8xbf16>
// CHECK: dsc.matmul %[[F]]#1
// CHECK: return %[[F]]#0
module attributes {dsc.target = {name = "cuda"}} {
func.func @mlp(%x: tensor<4x8xbf16>, %b: tensor<8xf32>, %w: tensor<8x8xbf16>) -> (tensor<4x8xf32>, tensor<4x8xbf16>) {
  %half = dsc.constant dense<5.000000e-01> : tensor<f32>
  %0 = dsc.cast %x {to = f32} : tensor<4x8xbf16> -> tensor<4x8xf32>
  %h = dsc.add %0, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %1 = dsc.mul %h, %half : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %2 = dsc.tanh %1 : tensor<4x8xf32>
  %3 = dsc.mul %2, %h : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %4 = dsc.cast %3 {to = bf16} : tensor<4x8xf32> -> tensor<4x8xbf16>
  %5 = dsc.matmul %4, %w : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  return %h, %5 : tensor<4x8xf32>, tensor<4x8xbf16>
}
}

// -----

// A chain closes when an op outside it reads one of its values: the next
// elementwise op starts another chain, which reads the first one's result.
// An op of another shape and a lone op stay as they are.
// CHECK-LABEL: func.func @closed
// CHECK: %[[A:.*]] = dsc.fused "elementwise"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[S:.*]] = dsc.reduce_sum %[[A]]
// CHECK: dsc.fused "elementwise"(%[[A]], %[[S]])
// CHECK: dsc.neg %arg1 : tensor<3xf32>
module attributes {dsc.target = {name = "cuda"}} {
func.func @closed(%x: tensor<4xf32>, %y: tensor<3xf32>) -> (tensor<4xf32>, tensor<3xf32>) {
  %0 = dsc.exp %x : tensor<4xf32>
  %1 = dsc.mul %0, %0 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %s = dsc.reduce_sum %1 {axes = array<i64: 0>, keepdims = true} : tensor<4xf32> -> tensor<1xf32>
  %2 = dsc.sub %1, %s : tensor<4xf32>, tensor<1xf32> -> tensor<4xf32>
  %3 = dsc.exp %2 : tensor<4xf32>
  %n = dsc.neg %y : tensor<3xf32>
  return %3, %n : tensor<4xf32>, tensor<3xf32>
}
}

// -----

// Stage 3: a chain that reads a bucket ends at the bucket's release (the
// fused op must read it before): the ops after the release start anew.
// CHECK-LABEL: func.func @released
// CHECK: dsc.fused "elementwise"(%arg0, %arg1)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: dsc.cast
// CHECK-NEXT: dsc.add
// CHECK-NEXT: dsc.yield
// CHECK: dsc.release %arg0
// CHECK: dsc.fused "elementwise"
module attributes {dsc.target = {name = "cuda"}} {
func.func @released(%w: tensor<4xbf16>, %x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = dsc.cast %w {to = f32} : tensor<4xbf16> -> tensor<4xf32>
  %1 = dsc.add %0, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  dsc.release %w : tensor<4xbf16>
  %2 = dsc.tanh %1 : tensor<4xf32>
  %3 = dsc.exp %2 : tensor<4xf32>
  return %3 : tensor<4xf32>
}
}

// -----

// The CPU target has no generated kernels: nothing changes.
// CHECK-LABEL: func.func @cpu
// CHECK-NOT: dsc.fused
module attributes {dsc.target = {name = "cpu"}} {
func.func @cpu(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = dsc.exp %x : tensor<4xf32>
  %1 = dsc.neg %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}
}

// -----

// Two open chains over one shape (GELU's derivative from x, and the
// incoming gradient's cast) meet at a product: one chain, one kernel.
// CHECK-LABEL: func.func @merged
// CHECK: dsc.fused "elementwise"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xbf16>) -> tensor<4xf32>
// CHECK-NOT: dsc.fused
// CHECK: return
module attributes {dsc.target = {name = "cuda"}} {
func.func @merged(%x: tensor<4xf32>, %g: tensor<4xbf16>) -> tensor<4xf32> {
  %0 = dsc.tanh %x : tensor<4xf32>
  %1 = dsc.mul %0, %0 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %2 = dsc.cast %g {to = f32} : tensor<4xbf16> -> tensor<4xf32>
  %3 = dsc.neg %2 : tensor<4xf32>
  %4 = dsc.mul %1, %3 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  return %4 : tensor<4xf32>
}
}

// -----

// A chain that reads two chains fused before it (RMSNorm's recomputed
// forward: the residual sum and its reciprocal root): each input is its own
// block argument, and each is read. (Before, the inputs were the values
// found before any fusion; a later fused op could take an erased op's
// storage, and two inputs then shared one argument: a wrong kernel on the
// Llama-3.2-1B shape under --recompute full, 2026-12-01.)
// CHECK-LABEL: func.func @reads_fused
// CHECK: %[[A:.*]]:2 = dsc.fused "elementwise"(%arg1, %arg0)
// CHECK: %[[M:.*]] = dsc.reduce_mean %[[A]]#1
// CHECK: %[[B:.*]] = dsc.fused "elementwise"(%[[M]])
// CHECK: dsc.fused "elementwise"(%[[A]]#0, %[[B]], %arg2) : (tensor<4x8xf32>, tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xbf16> {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<4x8xf32>, %[[R:.*]]: tensor<4x1xf32>, %[[W:.*]]: tensor<8xf32>):
// CHECK-NEXT: %[[N:.*]] = dsc.mul %[[X]], %[[R]]
// CHECK-NEXT: %[[Y:.*]] = dsc.mul %[[W]], %[[N]]
// CHECK-NEXT: %[[O:.*]] = dsc.cast %[[Y]] {to = bf16}
// CHECK-NEXT: dsc.yield %[[O]]
module attributes {dsc.target = {name = "cuda"}} {
func.func @reads_fused(%h: tensor<4x8xf32>, %d: tensor<4x8xbf16>, %w: tensor<8xf32>) -> tensor<4x8xbf16> {
  %two = dsc.constant dense<2.0> : tensor<f32>
  %eps = dsc.constant dense<1.0e-6> : tensor<f32>
  %one = dsc.constant dense<1.0> : tensor<f32>
  %dc = dsc.cast %d {to = f32} : tensor<4x8xbf16> -> tensor<4x8xf32>
  %x = dsc.add %h, %dc : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %sq = dsc.pow %x, %two : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %m = dsc.reduce_mean %sq {axes = array<i64: 1>} : tensor<4x8xf32> -> tensor<4x1xf32>
  %e = dsc.add %m, %eps : tensor<4x1xf32>, tensor<f32> -> tensor<4x1xf32>
  %s = dsc.sqrt %e : tensor<4x1xf32>
  %r = dsc.div %one, %s : tensor<f32>, tensor<4x1xf32> -> tensor<4x1xf32>
  %n = dsc.mul %x, %r : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
  %y = dsc.mul %w, %n : tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %o = dsc.cast %y {to = bf16} : tensor<4x8xf32> -> tensor<4x8xbf16>
  return %o : tensor<4x8xbf16>
}
}

// -----

// Casts beside layer norms are folded into them: the norm whose only reader
// casts it to bf16 writes bf16; the backward reads the bf16 input, not its
// f32 widening. A norm read in f32 elsewhere keeps its f32 result.
// CHECK-LABEL: func.func @norm_casts
// CHECK: %[[Y:.*]] = dsc.layer_norm %arg0, %arg1, %arg2 {{.*}} -> tensor<4x8xbf16>
// CHECK-NOT: dsc.cast %[[Y]]
// CHECK: %[[Z:.*]] = dsc.layer_norm %arg0, %arg1 {{.*}} -> tensor<4x8xf32>
// CHECK: dsc.cast %[[Z]] {to = bf16}
// CHECK: dsc.layer_norm_backward %arg4, %arg3, %arg1 {{.*}} : tensor<4x8xf32>, tensor<4x8xbf16>, tensor<8xf32>
// CHECK-NOT: dsc.cast %arg3
module attributes {dsc.target = {name = "cuda"}} {
func.func @norm_casts(%x: tensor<4x8xf32>, %s: tensor<8xf32>, %b: tensor<8xf32>, %h: tensor<4x8xbf16>, %g: tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %y = dsc.layer_norm %x, %s, %b {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %yc = dsc.cast %y {to = bf16} : tensor<4x8xf32> -> tensor<4x8xbf16>
  %z = dsc.layer_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %zc = dsc.cast %z {to = bf16} : tensor<4x8xf32> -> tensor<4x8xbf16>
  %hw = dsc.cast %h {to = f32} : tensor<4x8xbf16> -> tensor<4x8xf32>
  %gi, %gs, %gb = dsc.layer_norm_backward %g, %hw, %s {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>
  return %yc, %zc, %z, %gi, %gs, %gb : tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
}
}

// -----

// Not for a target without generated kernels.
// CHECK-LABEL: func.func @norm_casts_cpu
// CHECK: dsc.layer_norm {{.*}} -> tensor<4x8xf32>
// CHECK: dsc.cast
module attributes {dsc.target = {name = "cpu"}} {
func.func @norm_casts_cpu(%x: tensor<4x8xf32>, %s: tensor<8xf32>) -> tensor<4x8xbf16> {
  %y = dsc.layer_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %yc = dsc.cast %y {to = bf16} : tensor<4x8xf32> -> tensor<4x8xbf16>
  return %yc : tensor<4x8xbf16>
}
}

// -----

// A chain read after a GEMM that closed the chain it reads (SwiGLU's
// backward: dU = dP * a goes to up_proj's matmul; dG = (dP * u) * s'
// comes after it): the later chain moves before that matmul, everything
// it reads being ready there, and joins the first; dP * u (f32) is never
// written, the two gradients (bf16) come out of one kernel.
// CHECK-LABEL: func.func @pull_up
// CHECK: %[[F:.*]]:2 = dsc.fused "elementwise"(%arg0, %arg1, %arg2, %arg3)
// CHECK: dsc.sigmoid
// CHECK: dsc.yield %{{.*}}, %{{.*}} : tensor<4x8xbf16>, tensor<4x8xbf16>
// CHECK-NEXT: }
// CHECK-NEXT: dsc.matmul %[[F]]#0, %arg4
// CHECK-NOT: dsc.fused
// CHECK: return
module attributes {dsc.target = {name = "cuda"}} {
func.func @pull_up(%dp: tensor<4x8xbf16>, %a: tensor<4x8xbf16>, %u: tensor<4x8xbf16>, %g: tensor<4x8xbf16>, %w: tensor<8x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %dpf = dsc.cast %dp {to = f32} : tensor<4x8xbf16> -> tensor<4x8xf32>
  %af = dsc.cast %a {to = f32} : tensor<4x8xbf16> -> tensor<4x8xf32>
  %du = dsc.mul %dpf, %af : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %duh = dsc.cast %du {to = bf16} : tensor<4x8xf32> -> tensor<4x8xbf16>
  %uf = dsc.cast %u {to = f32} : tensor<4x8xbf16> -> tensor<4x8xf32>
  %da = dsc.mul %dpf, %uf : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %dx = dsc.matmul %duh, %w : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  %gf = dsc.cast %g {to = f32} : tensor<4x8xbf16> -> tensor<4x8xf32>
  %s = dsc.sigmoid %gf : tensor<4x8xf32>
  %dg = dsc.mul %da, %s : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %dgh = dsc.cast %dg {to = bf16} : tensor<4x8xf32> -> tensor<4x8xbf16>
  return %dx, %dgh : tensor<4x8xbf16>, tensor<4x8xbf16>
}
}

// -----

// Not when the later chain reads something made after the GEMM (here the
// GEMM's own result): both chains stay, the first writes dP * u.
// CHECK-LABEL: func.func @no_pull_up
// CHECK: dsc.fused "elementwise"
// CHECK: dsc.yield %{{.*}}, %{{.*}} : tensor<4x8xbf16>, tensor<4x8xf32>
// CHECK: dsc.matmul
// CHECK: dsc.fused "elementwise"
module attributes {dsc.target = {name = "cuda"}} {
func.func @no_pull_up(%dp: tensor<4x8xbf16>, %a: tensor<4x8xbf16>, %u: tensor<4x8xbf16>, %w: tensor<8x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %dpf = dsc.cast %dp {to = f32} : tensor<4x8xbf16> -> tensor<4x8xf32>
  %af = dsc.cast %a {to = f32} : tensor<4x8xbf16> -> tensor<4x8xf32>
  %du = dsc.mul %dpf, %af : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %duh = dsc.cast %du {to = bf16} : tensor<4x8xf32> -> tensor<4x8xbf16>
  %uf = dsc.cast %u {to = f32} : tensor<4x8xbf16> -> tensor<4x8xf32>
  %da = dsc.mul %dpf, %uf : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %dx = dsc.matmul %duh, %w : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  %dxf = dsc.cast %dx {to = f32} : tensor<4x8xbf16> -> tensor<4x8xf32>
  %dg = dsc.mul %da, %dxf : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %dgh = dsc.cast %dg {to = bf16} : tensor<4x8xf32> -> tensor<4x8xbf16>
  return %dx, %dgh : tensor<4x8xbf16>, tensor<4x8xbf16>
}
}

// -----

// A widening cast no chain took, of a product read by nothing else, is the
// product's f32 epilogue (weight and input gradients); a product read
// elsewhere too, and a cast marked for recomputation, keep their casts, and
// a cast that joined a chain is read inside the fused kernel.
// CHECK-LABEL: func.func @product_casts
// CHECK: %[[W:.*]] = dsc.matmul %arg0, %arg1 {transpose_lhs = true} : tensor<8x4xbf16>, tensor<8x4xbf16> -> tensor<4x4xf32>
// CHECK: %[[D:.*]] = dsc.matmul %arg0, %arg2 : tensor<8x4xbf16>, tensor<4x4xbf16> -> tensor<8x4xbf16>
// CHECK: %[[DW:.*]] = dsc.cast %[[D]] {to = f32}
// CHECK: %[[R:.*]] = dsc.matmul %arg0, %arg2 : tensor<8x4xbf16>, tensor<4x4xbf16> -> tensor<8x4xbf16>
// CHECK: dsc.cast %[[R]] {dsc.recompute, to = f32}
// CHECK: %[[E:.*]] = dsc.matmul %arg0, %arg2 : tensor<8x4xbf16>, tensor<4x4xbf16> -> tensor<8x4xbf16>
// CHECK: dsc.fused "elementwise"(%[[E]])
// CHECK: return %[[W]], %[[DW]], %[[D]]
module attributes {dsc.target = {name = "cuda"}} {
func.func @product_casts(%x: tensor<8x4xbf16>, %dy: tensor<8x4xbf16>, %w: tensor<4x4xbf16>) -> (tensor<4x4xf32>, tensor<8x4xf32>, tensor<8x4xbf16>, tensor<8x4xf32>, tensor<8x4xf32>) {
  %0 = dsc.matmul %x, %dy {transpose_lhs = true} : tensor<8x4xbf16>, tensor<8x4xbf16> -> tensor<4x4xbf16>
  %1 = dsc.cast %0 {to = f32} : tensor<4x4xbf16> -> tensor<4x4xf32>
  %2 = dsc.matmul %x, %w : tensor<8x4xbf16>, tensor<4x4xbf16> -> tensor<8x4xbf16>
  %3 = dsc.cast %2 {to = f32} : tensor<8x4xbf16> -> tensor<8x4xf32>
  %4 = dsc.matmul %x, %w : tensor<8x4xbf16>, tensor<4x4xbf16> -> tensor<8x4xbf16>
  %5 = dsc.cast %4 {dsc.recompute, to = f32} : tensor<8x4xbf16> -> tensor<8x4xf32>
  %6 = dsc.matmul %x, %w : tensor<8x4xbf16>, tensor<4x4xbf16> -> tensor<8x4xbf16>
  %7 = dsc.cast %6 {to = f32} : tensor<8x4xbf16> -> tensor<8x4xf32>
  %8 = dsc.exp %7 : tensor<8x4xf32>
  return %1, %3, %2, %5, %8 : tensor<4x4xf32>, tensor<8x4xf32>, tensor<8x4xbf16>, tensor<8x4xf32>, tensor<8x4xf32>
}
}

// -----

// Rotary's gradient, as autodiff writes it: rotate_half(-(g * sin)) +
// g * cos. The rotation moves through the negation, the product and the
// widening cast onto g in memory (sin's halves exchanged once, by a small
// kernel that reads sin rotated and flips the first half back), and one
// kernel reads g twice, at the element and at its partner, and writes the
// bf16 gradient: no rotated copy, no f32 copies of g.
// CHECK-LABEL: func.func @rotary_backward
// CHECK: %[[SIGN:.*]] = dsc.constant dense<[-1.000000e+00, -1.000000e+00, -1.000000e+00, -1.000000e+00, 1.000000e+00, 1.000000e+00, 1.000000e+00, 1.000000e+00]> : tensor<8xf32>
// CHECK: %[[SWAP:.*]] = dsc.fused "elementwise"(%arg2, %[[SIGN]])
// CHECK-NEXT: ^bb0(%[[S:.*]]: tensor<1x4x1x8xf32>, %[[P:.*]]: tensor<8xf32>):
// CHECK-NEXT: %[[RS:.*]] = dsc.rotate_half %[[S]] : tensor<1x4x1x8xf32>
// CHECK-NEXT: dsc.mul %[[RS]], %[[P]]
// CHECK: dsc.fused "elementwise"(%arg0, %[[SWAP]], %arg1) : (tensor<2x4x2x8xbf16>, tensor<1x4x1x8xf32>, tensor<1x4x1x8xf32>) -> tensor<2x4x2x8xbf16>
// CHECK-NEXT: ^bb0(%[[G:.*]]: tensor<2x4x2x8xbf16>, %{{.*}}: tensor<1x4x1x8xf32>, %{{.*}}: tensor<1x4x1x8xf32>):
// CHECK-NEXT: dsc.cast %[[G]] {to = f32}
// CHECK-NEXT: %[[RG:.*]] = dsc.rotate_half %[[G]] : tensor<2x4x2x8xbf16>
// CHECK-NEXT: dsc.cast %[[RG]] {to = f32}
// CHECK-NEXT: dsc.mul
// CHECK-NEXT: dsc.neg
// CHECK-NEXT: dsc.mul
// CHECK-NEXT: dsc.add
// CHECK-NEXT: dsc.cast {{.*}} {to = bf16}
// CHECK-NEXT: dsc.yield
// CHECK-NOT: dsc.rotate_half
// CHECK: return
module attributes {dsc.target = {name = "cuda"}} {
func.func @rotary_backward(%g: tensor<2x4x2x8xbf16>, %cos: tensor<1x4x1x8xf32>, %sin: tensor<1x4x1x8xf32>) -> tensor<2x4x2x8xbf16> {
  %c = dsc.cast %g {to = f32} : tensor<2x4x2x8xbf16> -> tensor<2x4x2x8xf32>
  %m = dsc.mul %c, %sin : tensor<2x4x2x8xf32>, tensor<1x4x1x8xf32> -> tensor<2x4x2x8xf32>
  %n = dsc.neg %m : tensor<2x4x2x8xf32>
  %r = dsc.rotate_half %n : tensor<2x4x2x8xf32>
  %k = dsc.mul %c, %cos : tensor<2x4x2x8xf32>, tensor<1x4x1x8xf32> -> tensor<2x4x2x8xf32>
  %a = dsc.add %r, %k : tensor<2x4x2x8xf32>, tensor<2x4x2x8xf32> -> tensor<2x4x2x8xf32>
  %o = dsc.cast %a {to = bf16} : tensor<2x4x2x8xf32> -> tensor<2x4x2x8xbf16>
  return %o : tensor<2x4x2x8xbf16>
}
}

// -----

// A factor broadcast along the last dim needs no exchange; a rotation of a
// value a chain computes (a sum: not moved) reads it from memory, so the
// chain that computes it ends there and the rotation starts another.
// CHECK-LABEL: func.func @rotate_computed
// CHECK-NOT: dsc.constant
// CHECK: %[[SUM:[0-9]+]]:2 = dsc.fused "elementwise"(%arg0, %arg1)
// CHECK-NOT: dsc.rotate_half
// CHECK: dsc.yield
// CHECK: dsc.fused "elementwise"(%[[SUM]]#0, %arg2)
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<2x8xf32>, %[[B:.*]]: tensor<2x1xf32>):
// CHECK-NEXT: %[[R:.*]] = dsc.rotate_half %[[A]] : tensor<2x8xf32>
// CHECK-NEXT: dsc.mul %[[R]], %[[B]]
// CHECK-NEXT: dsc.exp
module attributes {dsc.target = {name = "cuda"}} {
func.func @rotate_computed(%x: tensor<2x8xf32>, %y: tensor<2x8xf32>, %b: tensor<2x1xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %s = dsc.add %x, %y : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %e = dsc.exp %s : tensor<2x8xf32>
  %m = dsc.mul %s, %b : tensor<2x8xf32>, tensor<2x1xf32> -> tensor<2x8xf32>
  %r = dsc.rotate_half %m : tensor<2x8xf32>
  %f = dsc.exp %r : tensor<2x8xf32>
  return %e, %f : tensor<2x8xf32>, tensor<2x8xf32>
}
}

// -----

// A 16-bit value a chain reads widened by a cast no chain took (a bias or a
// norm weight widened from its compute copy: a shape of its own) is read as
// it is and widened in the kernel; the cast goes when nothing else reads
// it, and stays for another reader (the norm).
// CHECK-LABEL: func.func @widened_inputs
// CHECK: %[[W:.*]] = dsc.cast %arg2 {to = f32} : tensor<4xbf16> -> tensor<4xf32>
// CHECK: dsc.layer_norm %arg0, %[[W]]
// CHECK-NOT: dsc.cast %arg1
// CHECK: dsc.fused "elementwise"(%arg1, %arg2, %arg0)
// CHECK-NEXT: ^bb0(%[[B:[^:]*]]: tensor<4xbf16>, %[[G:[^:]*]]: tensor<4xbf16>, %{{.*}}: tensor<2x4xf32>):
// CHECK-NEXT: dsc.cast %[[B]] {to = f32} : tensor<4xbf16> -> tensor<4xf32>
// CHECK-NEXT: dsc.cast %[[G]] {to = f32} : tensor<4xbf16> -> tensor<4xf32>
module attributes {dsc.target = {name = "cuda"}} {
func.func @widened_inputs(%x: tensor<2x4xf32>, %b: tensor<4xbf16>, %g: tensor<4xbf16>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %bw = dsc.cast %b {to = f32} : tensor<4xbf16> -> tensor<4xf32>
  %gw = dsc.cast %g {to = f32} : tensor<4xbf16> -> tensor<4xf32>
  %n = dsc.layer_norm %x, %gw {axis = 1 : i64, epsilon = 1.0e-5 : f64} : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %a = dsc.add %x, %bw : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %m = dsc.mul %a, %gw : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %e = dsc.exp %m : tensor<2x4xf32>
  return %n, %e : tensor<2x4xf32>, tensor<2x4xf32>
}
}

// -----

// Gradient accumulation: the step calls @forward_backward once per
// micro-batch and sums the gradients as they come. A call closes every
// chain, so each sum stays right after its call and no micro-batch's
// gradient is held through the calls after it; the last sum and its
// scaling fuse after the last call.
// CHECK-LABEL: func.func @accumulate
// CHECK: %[[G1:.*]] = call @fb
// CHECK-NEXT: %[[G2:.*]] = call @fb
// CHECK-NEXT: %[[S2:.*]] = dsc.add %[[G1]], %[[G2]]
// CHECK-NEXT: %[[G3:.*]] = call @fb
// CHECK-NEXT: %[[S3:.*]] = dsc.add %[[S2]], %[[G3]]
// CHECK-NEXT: %[[G4:.*]] = call @fb
// CHECK-NEXT: %[[F:.*]] = dsc.fused "elementwise"(%[[S3]], %[[G4]])
// CHECK: return %[[F]]
module attributes {dsc.target = {name = "cuda"}} {
func.func private @fb(%x: tensor<8xf32>) -> tensor<8xf32>
func.func @accumulate(%x: tensor<8xf32>) -> tensor<8xf32> {
  %quarter = dsc.constant dense<2.500000e-01> : tensor<f32>
  %g1 = call @fb(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %g2 = call @fb(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %s2 = dsc.add %g1, %g2 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %g3 = call @fb(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %s3 = dsc.add %s2, %g3 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %g4 = call @fb(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %s4 = dsc.add %s3, %g4 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %m = dsc.mul %s4, %quarter : tensor<8xf32>, tensor<f32> -> tensor<8xf32>
  return %m : tensor<8xf32>
}
}

// -----

// A weight gradient added onto a running sum (dsc-accumulate-in-call's
// dsc.accumulator argument): no chain takes the widening cast of the
// product, which folds into the GEMM (f32 output), so the micro-batch's
// gradient is summed unrounded, as a one-call step returns it. The same
// cast feeding another add is fused as before.
// CHECK-LABEL: func.func @onto_sum
// CHECK: %[[P:.*]] = dsc.matmul %arg0, %arg1 : tensor<4x8xbf16>, tensor<8x4xbf16> -> tensor<4x4xf32>
// CHECK-NEXT: %[[S:.*]] = dsc.add %arg2, %[[P]]
// CHECK-LABEL: func.func @not_a_sum
// CHECK: dsc.matmul %arg0, %arg1 : tensor<4x8xbf16>, tensor<8x4xbf16> -> tensor<4x4xbf16>
// CHECK: dsc.fused "elementwise"
module attributes {dsc.target = {name = "cuda"}} {
func.func @onto_sum(%a: tensor<4x8xbf16>, %b: tensor<8x4xbf16>,
                    %acc: tensor<4x4xf32> {dsc.accumulator = 1 : i64})
    -> (tensor<4x4xf32> {dsc.in_place = 2 : i64}) {
  %p = dsc.matmul %a, %b : tensor<4x8xbf16>, tensor<8x4xbf16> -> tensor<4x4xbf16>
  %w = dsc.cast %p {to = f32} : tensor<4x4xbf16> -> tensor<4x4xf32>
  %s = dsc.add %acc, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  return %s : tensor<4x4xf32>
}
func.func @not_a_sum(%a: tensor<4x8xbf16>, %b: tensor<8x4xbf16>,
                     %c: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %p = dsc.matmul %a, %b : tensor<4x8xbf16>, tensor<8x4xbf16> -> tensor<4x4xbf16>
  %w = dsc.cast %p {to = f32} : tensor<4x4xbf16> -> tensor<4x4xf32>
  %s = dsc.add %c, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  return %s : tensor<4x4xf32>
}
}
