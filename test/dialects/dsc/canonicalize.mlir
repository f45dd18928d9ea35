// RUN: dsc-opt %s --split-input-file --canonicalize | FileCheck %s

// A transpose of the last two dims folds into the matmul that reads it
// (transpose_rhs): no copy of the weight.
// CHECK-LABEL: func.func @linear
// CHECK-NOT: dsc.transpose
// CHECK: dsc.matmul %arg0, %arg1 {transpose_rhs = true} : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
func.func @linear(%x: tensor<2x4x8xf32>, %w: tensor<16x8xf32>) -> tensor<2x4x16xf32> {
  %t = dsc.transpose %w {perm = array<i64: 1, 0>} : tensor<16x8xf32> -> tensor<8x16xf32>
  %y = dsc.matmul %x, %t : tensor<2x4x8xf32>, tensor<8x16xf32> -> tensor<2x4x16xf32>
  return %y : tensor<2x4x16xf32>
}

// -----

// A weight gradient (x^T g)^T is g^T x: one matmul, no transposes.
// CHECK-LABEL: func.func @weight_grad
// CHECK-NOT: dsc.transpose
// CHECK: %[[G:.*]] = dsc.matmul %arg1, %arg0 {transpose_lhs = true} : tensor<16x4xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
// CHECK: return %[[G]]
func.func @weight_grad(%x: tensor<16x8xf32>, %g: tensor<16x4xf32>) -> tensor<4x8xf32> {
  %0 = dsc.transpose %x {perm = array<i64: 1, 0>} : tensor<16x8xf32> -> tensor<8x16xf32>
  %1 = dsc.matmul %0, %g : tensor<8x16xf32>, tensor<16x4xf32> -> tensor<8x4xf32>
  %2 = dsc.transpose %1 {perm = array<i64: 1, 0>} : tensor<8x4xf32> -> tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}

// -----

// Batched 4-D operands (attention as exported): q k^T reads k transposed.
// A transpose that is not of the last two dims stays.
// CHECK-LABEL: func.func @scores
// CHECK: dsc.matmul %arg0, %arg1 {transpose_rhs = true} : tensor<2x3x5x4xf32>, tensor<2x3x5x4xf32> -> tensor<2x3x5x5xf32>
// CHECK: %[[P:.*]] = dsc.transpose %arg3 {perm = array<i64: 1, 0, 2>}
// CHECK: dsc.matmul %arg2, %[[P]] :
func.func @scores(%q: tensor<2x3x5x4xf32>, %k: tensor<2x3x5x4xf32>, %x: tensor<2x5x4xf32>, %w: tensor<4x2x6xf32>) -> (tensor<2x3x5x5xf32>, tensor<2x5x6xf32>) {
  %kt = dsc.transpose %k {perm = array<i64: 0, 1, 3, 2>} : tensor<2x3x5x4xf32> -> tensor<2x3x4x5xf32>
  %s = dsc.matmul %q, %kt : tensor<2x3x5x4xf32>, tensor<2x3x4x5xf32> -> tensor<2x3x5x5xf32>
  %p = dsc.transpose %w {perm = array<i64: 1, 0, 2>} : tensor<4x2x6xf32> -> tensor<2x4x6xf32>
  %y = dsc.matmul %x, %p : tensor<2x5x4xf32>, tensor<2x4x6xf32> -> tensor<2x5x6xf32>
  return %s, %y : tensor<2x3x5x5xf32>, tensor<2x5x6xf32>
}

// -----

// Stage 3: the bucket is released after the transpose (its last direct
// use), so the matmul keeps reading the transposed copy: folding would read
// the bucket after its release.
// CHECK-LABEL: func.func @released
// CHECK: %[[T:.*]] = dsc.transpose %arg1
// CHECK: dsc.release
// CHECK: dsc.matmul %arg0, %[[T]] :
func.func @released(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>) -> tensor<4x16xf32> {
  %t = dsc.transpose %w {perm = array<i64: 1, 0>} : tensor<16x8xf32> -> tensor<8x16xf32>
  dsc.release %w : tensor<16x8xf32>
  %y = dsc.matmul %x, %t : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// Transposes compose; an identity permutation goes.
// CHECK-LABEL: func.func @compose
// CHECK: %[[T:.*]] = dsc.transpose %arg0 {perm = array<i64: 2, 0, 1>}
// CHECK-NEXT: return %arg0, %[[T]]
func.func @compose(%x: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<4x2x3xf32>) {
  %a = dsc.transpose %x {perm = array<i64: 1, 0, 2>} : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
  %b = dsc.transpose %a {perm = array<i64: 1, 0, 2>} : tensor<3x2x4xf32> -> tensor<2x3x4xf32>
  %c = dsc.transpose %a {perm = array<i64: 2, 1, 0>} : tensor<3x2x4xf32> -> tensor<4x2x3xf32>
  return %b, %c : tensor<2x3x4xf32>, tensor<4x2x3xf32>
}

// -----

// bf16 -> f32 -> bf16 is exact and goes; f32 -> bf16 -> f32 rounds and stays.
// CHECK-LABEL: func.func @casts
// CHECK: %[[R:.*]] = dsc.cast %arg1 {to = bf16}
// CHECK: %[[W:.*]] = dsc.cast %[[R]] {to = f32}
// CHECK: return %arg0, %[[W]]
func.func @casts(%h: tensor<4xbf16>, %f: tensor<4xf32>) -> (tensor<4xbf16>, tensor<4xf32>) {
  %0 = dsc.cast %h {to = f32} : tensor<4xbf16> -> tensor<4xf32>
  %1 = dsc.cast %0 {to = bf16} : tensor<4xf32> -> tensor<4xbf16>
  %2 = dsc.cast %f {to = bf16} : tensor<4xf32> -> tensor<4xbf16>
  %3 = dsc.cast %2 {to = f32} : tensor<4xbf16> -> tensor<4xf32>
  return %1, %3 : tensor<4xbf16>, tensor<4xf32>
}

// -----

// The classifier of a bf16 step: the loss reads the bf16 logits (f32 loss)
// and the gradient is written in bf16, with no f32 [tokens, vocab] copy.
// CHECK-LABEL: func.func @classifier
// CHECK-NOT: dsc.cast
// CHECK: dsc.softmax_cross_entropy %arg0, %arg1 {{.*}} : tensor<6x10xbf16>, tensor<6xi64> -> tensor<f32>
// CHECK: %[[G:.*]] = dsc.class_loss_backward %arg2, %arg0, %arg1 {{.*}} -> tensor<6x10xbf16>
// CHECK: %[[R:.*]] = dsc.reshape %[[G]] {{.*}} -> tensor<2x3x10xbf16>
// CHECK: return {{.*}}, %[[R]]
func.func @classifier(%logits: tensor<6x10xbf16>, %labels: tensor<6xi64>, %seed: tensor<f32>) -> (tensor<f32>, tensor<2x3x10xbf16>) {
  %0 = dsc.cast %logits {to = f32} : tensor<6x10xbf16> -> tensor<6x10xf32>
  %loss = dsc.softmax_cross_entropy %0, %labels {reduction = "sum"} : tensor<6x10xf32>, tensor<6xi64> -> tensor<f32>
  %1 = dsc.cast %logits {to = f32} : tensor<6x10xbf16> -> tensor<6x10xf32>
  %g = dsc.class_loss_backward %seed, %1, %labels {kind = "softmax_cross_entropy", reduction = "sum"} : tensor<f32>, tensor<6x10xf32>, tensor<6xi64> -> tensor<6x10xf32>
  %r = dsc.reshape %g {shape = array<i64: 2, 3, 10>} : tensor<6x10xf32> -> tensor<2x3x10xf32>
  %h = dsc.cast %r {to = bf16} : tensor<2x3x10xf32> -> tensor<2x3x10xbf16>
  return %loss, %h : tensor<f32>, tensor<2x3x10xbf16>
}

// -----

// GPT-2's qkv: the bias add in f32, split, to heads, rounded for attention.
// The rounding moves before the split (each use of the moved values narrows
// them to bf16), so the split and the transposes move bf16 and the add's
// kernel writes bf16; the same bits.
// CHECK-LABEL: func.func @qkv
// CHECK: %[[A:.*]] = dsc.add
// CHECK-NEXT: %[[N:.*]] = dsc.cast %[[A]] {to = bf16} : tensor<2x4x12xf32> -> tensor<2x4x12xbf16>
// CHECK-NEXT: %[[S:.*]]:3 = dsc.split %[[N]] {{.*}} : tensor<2x4x12xbf16> -> tensor<2x4x4xbf16>, tensor<2x4x4xbf16>, tensor<2x4x4xbf16>
// CHECK-NEXT: %[[R:.*]] = dsc.reshape %[[S]]#0 {{.*}} -> tensor<2x4x2x2xbf16>
// CHECK-NEXT: %[[T:.*]] = dsc.transpose %[[R]] {{.*}} -> tensor<2x2x4x2xbf16>
// CHECK-NOT: dsc.cast
// CHECK: return %[[T]], %[[S]]#1, %[[S]]#2
func.func @qkv(%y: tensor<2x4x12xbf16>, %b: tensor<12xf32>) -> (tensor<2x2x4x2xbf16>, tensor<2x4x4xbf16>, tensor<2x4x4xbf16>) {
  %0 = dsc.cast %y {to = f32} : tensor<2x4x12xbf16> -> tensor<2x4x12xf32>
  %1 = dsc.add %0, %b : tensor<2x4x12xf32>, tensor<12xf32> -> tensor<2x4x12xf32>
  %2:3 = dsc.split %1 {axis = 2 : i64, sizes = array<i64: 4, 4, 4>} : tensor<2x4x12xf32> -> tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>
  %3 = dsc.reshape %2#0 {shape = array<i64: 2, 4, 2, 2>} : tensor<2x4x4xf32> -> tensor<2x4x2x2xf32>
  %4 = dsc.transpose %3 {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x2x2xf32> -> tensor<2x2x4x2xf32>
  %5 = dsc.cast %4 {to = bf16} : tensor<2x2x4x2xf32> -> tensor<2x2x4x2xbf16>
  %6 = dsc.cast %2#1 {to = bf16} : tensor<2x4x4xf32> -> tensor<2x4x4xbf16>
  %7 = dsc.cast %2#2 {to = bf16} : tensor<2x4x4xf32> -> tensor<2x4x4xbf16>
  return %5, %6, %7 : tensor<2x2x4x2xbf16>, tensor<2x4x4xbf16>, tensor<2x4x4xbf16>
}

// -----

// The other direction: a layout op that reads only widened 16-bit values
// moves them in 16 bits and widens its result (one cast for the concat's
// three); a widened value read elsewhere too stays as it is (its cast would
// run twice), and a split whose result is read unnarrowed keeps f32.
// CHECK-LABEL: func.func @widened
// CHECK: %[[C:.*]] = dsc.concat %arg0, %arg1, %arg2 {axis = 1 : i64} : tensor<2x3xbf16>, tensor<2x3xbf16>, tensor<2x3xbf16> -> tensor<2x9xbf16>
// CHECK-NEXT: %[[W:.*]] = dsc.cast %[[C]] {to = f32} : tensor<2x9xbf16> -> tensor<2x9xf32>
// CHECK: %[[K:.*]] = dsc.cast %arg3 {to = f32}
// CHECK-NEXT: dsc.transpose %[[K]] {{.*}} : tensor<2x3xf32> -> tensor<3x2xf32>
// CHECK: dsc.split %{{.*}} : tensor<2x6xf32>
func.func @widened(%a: tensor<2x3xbf16>, %b: tensor<2x3xbf16>, %c: tensor<2x3xbf16>, %d: tensor<2x3xbf16>, %e: tensor<2x6xf32>) -> (tensor<2x9xf32>, tensor<3x2xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xbf16>) {
  %0 = dsc.cast %a {to = f32} : tensor<2x3xbf16> -> tensor<2x3xf32>
  %1 = dsc.cast %b {to = f32} : tensor<2x3xbf16> -> tensor<2x3xf32>
  %2 = dsc.cast %c {to = f32} : tensor<2x3xbf16> -> tensor<2x3xf32>
  %3 = dsc.concat %0, %1, %2 {axis = 1 : i64} : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x9xf32>
  %4 = dsc.cast %d {to = f32} : tensor<2x3xbf16> -> tensor<2x3xf32>
  %5 = dsc.transpose %4 {perm = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
  %6:2 = dsc.split %e {axis = 1 : i64, sizes = array<i64: 3, 3>} : tensor<2x6xf32> -> tensor<2x3xf32>, tensor<2x3xf32>
  %7 = dsc.cast %6#1 {to = bf16} : tensor<2x3xf32> -> tensor<2x3xbf16>
  return %3, %5, %4, %6#0, %7 : tensor<2x9xf32>, tensor<3x2xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xbf16>
}

// -----

// A bias gradient: the sum over the batch reads the bf16 gradient itself
// (widened as it loads), not its f32 cast; a cast read elsewhere too stays,
// and so does the reduction of it.
// CHECK-LABEL: func.func @bias_gradient
// CHECK: %[[S:.*]] = dsc.reduce_sum %arg0 {axes = array<i64: 0, 1>} : tensor<2x4x6xbf16> -> tensor<1x1x6xf32>
// CHECK: %[[M:.*]] = dsc.reduce_mean %arg1 {axes = array<i64: 0>, keepdims = false} : tensor<4x6xf16> -> tensor<6xf32>
// CHECK: %[[C:.*]] = dsc.cast %arg2 {to = f32}
// CHECK: %[[K:.*]] = dsc.reduce_sum %[[C]] {{.*}} : tensor<4x6xf32> -> tensor<6xf32>
// CHECK: return %[[S]], %[[M]], %[[K]], %[[C]]
func.func @bias_gradient(%g: tensor<2x4x6xbf16>, %h: tensor<4x6xf16>, %k: tensor<4x6xbf16>) -> (tensor<1x1x6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<4x6xf32>) {
  %0 = dsc.cast %g {to = f32} : tensor<2x4x6xbf16> -> tensor<2x4x6xf32>
  %1 = dsc.reduce_sum %0 {axes = array<i64: 0, 1>} : tensor<2x4x6xf32> -> tensor<1x1x6xf32>
  %2 = dsc.cast %h {to = f32} : tensor<4x6xf16> -> tensor<4x6xf32>
  %3 = dsc.reduce_mean %2 {axes = array<i64: 0>, keepdims = false} : tensor<4x6xf32> -> tensor<6xf32>
  %4 = dsc.cast %k {to = f32} : tensor<4x6xbf16> -> tensor<4x6xf32>
  %5 = dsc.reduce_sum %4 {axes = array<i64: 0>, keepdims = false} : tensor<4x6xf32> -> tensor<6xf32>
  return %1, %3, %5, %4 : tensor<1x1x6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<4x6xf32>
}

// -----

// Where moving a cast would not pay or would merge what recomputation keeps
// apart, it stays: the rounding of a slice is not moved onto the whole
// input, the widening before a broadcast not onto the broadcast result, and
// a layout op whose result a recomputed cast rounds keeps f32.
// CHECK-LABEL: func.func @stays
// CHECK: %[[S:.*]] = dsc.slice %arg0 {{.*}} : tensor<4x8xf32> -> tensor<4x2xf32>
// CHECK: dsc.cast %[[S]] {to = bf16}
// CHECK: %[[W:.*]] = dsc.cast %arg1 {to = f32} : tensor<8xbf16> -> tensor<8xf32>
// CHECK: dsc.expand %[[W]] {{.*}} : tensor<8xf32> -> tensor<4x8xf32>
// CHECK: %[[T:.*]] = dsc.transpose %arg2 {{.*}} : tensor<4x8xf32> -> tensor<8x4xf32>
// CHECK: dsc.cast %[[T]] {dsc.recomputed, to = bf16}
func.func @stays(%x: tensor<4x8xf32>, %b: tensor<8xbf16>, %y: tensor<4x8xf32>) -> (tensor<4x2xbf16>, tensor<4x8xf32>, tensor<8x4xbf16>) {
  %0 = dsc.slice %x {offsets = array<i64: 0, 0>, sizes = array<i64: 4, 2>, strides = array<i64: 1, 1>} : tensor<4x8xf32> -> tensor<4x2xf32>
  %1 = dsc.cast %0 {to = bf16} : tensor<4x2xf32> -> tensor<4x2xbf16>
  %2 = dsc.cast %b {to = f32} : tensor<8xbf16> -> tensor<8xf32>
  %3 = dsc.expand %2 {shape = array<i64: 4, 8>} : tensor<8xf32> -> tensor<4x8xf32>
  %4 = dsc.transpose %y {perm = array<i64: 1, 0>} : tensor<4x8xf32> -> tensor<8x4xf32>
  %5 = dsc.cast %4 {dsc.recomputed, to = bf16} : tensor<8x4xf32> -> tensor<8x4xbf16>
  return %1, %3, %5 : tensor<4x2xbf16>, tensor<4x8xf32>, tensor<8x4xbf16>
}

// -----

// The [0, 2, 1, 3] transposes around a 16-bit attention and its backward
// fold into them (seq_major: the kernels read and write [B, T, H, D]); the
// transposes that undid them compose away, so no copy is left.
// CHECK-LABEL: func.func @attention_tokens_first
// CHECK-NOT: dsc.transpose
// CHECK: %[[O:.*]], %[[L:.*]] = dsc.attention %arg0, %arg1, %arg2 {causal = true, scale = 1.250000e-01 : f64, seq_major = true} : tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16> -> tensor<2x8x4x16xbf16>, tensor<2x4x8xf32>
// CHECK: %[[GQ:.*]], %[[GK:.*]], %[[GV:.*]] = dsc.attention_backward %arg3, %arg0, %arg1, %arg2, %[[O]], %[[L]] {causal = true, scale = 1.250000e-01 : f64, seq_major = true} : tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x4x8xf32> -> tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>
// CHECK-NOT: dsc.transpose
// CHECK: return %[[O]], %[[GQ]], %[[GK]], %[[GV]]
module attributes {dsc.target = {name = "cuda"}} {
func.func @attention_tokens_first(%q: tensor<2x8x4x16xbf16>, %k: tensor<2x8x4x16xbf16>, %v: tensor<2x8x4x16xbf16>, %dy: tensor<2x8x4x16xbf16>)
    -> (tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>) {
  %qt = dsc.transpose %q {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xbf16> -> tensor<2x4x8x16xbf16>
  %kt = dsc.transpose %k {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xbf16> -> tensor<2x4x8x16xbf16>
  %vt = dsc.transpose %v {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xbf16> -> tensor<2x4x8x16xbf16>
  %o, %lse = dsc.attention %qt, %kt, %vt {causal = true, scale = 0.125 : f64} : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16> -> tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>
  %y = dsc.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x8x16xbf16> -> tensor<2x8x4x16xbf16>
  %dot = dsc.transpose %dy {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xbf16> -> tensor<2x4x8x16xbf16>
  %dq, %dk, %dv = dsc.attention_backward %dot, %qt, %kt, %vt, %o, %lse {causal = true, scale = 0.125 : f64} : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8xf32> -> tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>
  %dqt = dsc.transpose %dq {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x8x16xbf16> -> tensor<2x8x4x16xbf16>
  %dkt = dsc.transpose %dk {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x8x16xbf16> -> tensor<2x8x4x16xbf16>
  %dvt = dsc.transpose %dv {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x8x16xbf16> -> tensor<2x8x4x16xbf16>
  return %y, %dqt, %dkt, %dvt : tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>
}
}

// -----

// f32 attention (the own kernels, which read [B, H, T, D] only) and a
// 16-bit one with a key not transposed keep their transposes; so does a
// 16-bit one on a module without a CUDA target (the next case).
// CHECK-LABEL: func.func @attention_heads_first
// CHECK-COUNT-3: dsc.transpose
// CHECK: dsc.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f64} : tensor<2x4x8x16xf32>
// CHECK: dsc.attention %{{.*}}, %arg4, %{{.*}} {scale = 1.250000e-01 : f64} : tensor<2x4x8x16xbf16>
module attributes {dsc.target = {name = "cuda"}} {
func.func @attention_heads_first(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x8x4x16xf32>, %h: tensor<2x8x4x16xbf16>, %kh: tensor<2x4x8x16xbf16>)
    -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xbf16>) {
  %qt = dsc.transpose %q {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %kt = dsc.transpose %k {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %vt = dsc.transpose %v {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %o, %lse = dsc.attention %qt, %kt, %vt {scale = 0.125 : f64} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  %ht = dsc.transpose %h {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xbf16> -> tensor<2x4x8x16xbf16>
  %o2, %lse2 = dsc.attention %ht, %kh, %ht {scale = 0.125 : f64} : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16> -> tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>
  return %o, %o2 : tensor<2x4x8x16xf32>, tensor<2x4x8x16xbf16>
}
}

// -----

// CHECK-LABEL: func.func @attention_cpu_target
// CHECK: dsc.transpose
// CHECK: dsc.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f64} : tensor<2x4x8x16xbf16>
module attributes {dsc.target = {name = "cpu"}} {
func.func @attention_cpu_target(%q: tensor<2x8x4x16xbf16>) -> tensor<2x4x8x16xbf16> {
  %qt = dsc.transpose %q {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xbf16> -> tensor<2x4x8x16xbf16>
  %o, %lse = dsc.attention %qt, %qt, %qt {scale = 0.125 : f64} : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16> -> tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>
  return %o : tensor<2x4x8x16xbf16>
}
}

// -----

// Rotary embeddings between the heads-first transposes and the attention
// (HF Llama, GQA: 4 query heads, 2 kv heads): the elementwise chain runs
// on the projections as they are ([B, T, H, D]; cos and sin [1, 1, T, D]
// reshaped to [1, T, 1, D]), the attention reads tokens first, and in the
// backward the gradient's chain likewise, between the attention's layout
// and the transposes back: no transpose is left.
// CHECK-LABEL: func.func @rotary_tokens_first
// CHECK-NOT: dsc.transpose
// CHECK-DAG: %[[COS:.*]] = dsc.reshape %arg3 {shape = array<i64: 1, 8, 1, 16>} : tensor<1x1x8x16xf32> -> tensor<1x8x1x16xf32>
// CHECK-DAG: %[[SIN:.*]] = dsc.reshape %arg4 {shape = array<i64: 1, 8, 1, 16>} : tensor<1x1x8x16xf32> -> tensor<1x8x1x16xf32>
// CHECK-DAG: %[[RQ:.*]] = dsc.rotate_half %arg0 : tensor<2x8x4x16xbf16>
// CHECK-DAG: %[[RK:.*]] = dsc.rotate_half %arg1 : tensor<2x8x2x16xbf16>
// CHECK: %[[O:.*]], %[[L:.*]] = dsc.attention %{{.*}}, %{{.*}}, %arg2 {causal = true, scale = 1.250000e-01 : f64, seq_major = true} : tensor<2x8x4x16xbf16>, tensor<2x8x2x16xbf16>, tensor<2x8x2x16xbf16>
// CHECK: %[[GQ:.*]], %[[GK:.*]], %[[GV:.*]] = dsc.attention_backward %arg5, %{{.*}}, %{{.*}}, %arg2, %[[O]], %[[L]] {{.*}}seq_major = true
// CHECK: dsc.mul %{{.*}}, %{{.*}} : tensor<2x8x4x16xf32>, tensor<1x8x1x16xf32> -> tensor<2x8x4x16xf32>
// CHECK: dsc.rotate_half %{{.*}} : tensor<2x8x4x16xf32>
// CHECK-NOT: dsc.transpose
// CHECK: return %[[O]], %{{.*}}, %[[GV]] : tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x8x2x16xbf16>
module attributes {dsc.target = {name = "cuda"}} {
func.func @rotary_tokens_first(%q: tensor<2x8x4x16xbf16>, %k: tensor<2x8x2x16xbf16>, %v: tensor<2x8x2x16xbf16>, %cos: tensor<1x1x8x16xf32>, %sin: tensor<1x1x8x16xf32>, %dy: tensor<2x8x4x16xbf16>)
    -> (tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x8x2x16xbf16>) {
  %qt = dsc.transpose %q {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xbf16> -> tensor<2x4x8x16xbf16>
  %kt = dsc.transpose %k {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x2x16xbf16> -> tensor<2x2x8x16xbf16>
  %vt = dsc.transpose %v {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x2x16xbf16> -> tensor<2x2x8x16xbf16>
  %rq = dsc.rotate_half %qt : tensor<2x4x8x16xbf16>
  %q32 = dsc.cast %qt {to = f32} : tensor<2x4x8x16xbf16> -> tensor<2x4x8x16xf32>
  %rq32 = dsc.cast %rq {to = f32} : tensor<2x4x8x16xbf16> -> tensor<2x4x8x16xf32>
  %qc = dsc.mul %q32, %cos : tensor<2x4x8x16xf32>, tensor<1x1x8x16xf32> -> tensor<2x4x8x16xf32>
  %qs = dsc.mul %rq32, %sin : tensor<2x4x8x16xf32>, tensor<1x1x8x16xf32> -> tensor<2x4x8x16xf32>
  %qe32 = dsc.add %qc, %qs : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x16xf32>
  %qe = dsc.cast %qe32 {to = bf16} : tensor<2x4x8x16xf32> -> tensor<2x4x8x16xbf16>
  %rk = dsc.rotate_half %kt : tensor<2x2x8x16xbf16>
  %k32 = dsc.cast %kt {to = f32} : tensor<2x2x8x16xbf16> -> tensor<2x2x8x16xf32>
  %rk32 = dsc.cast %rk {to = f32} : tensor<2x2x8x16xbf16> -> tensor<2x2x8x16xf32>
  %kc = dsc.mul %k32, %cos : tensor<2x2x8x16xf32>, tensor<1x1x8x16xf32> -> tensor<2x2x8x16xf32>
  %ks = dsc.mul %rk32, %sin : tensor<2x2x8x16xf32>, tensor<1x1x8x16xf32> -> tensor<2x2x8x16xf32>
  %ke32 = dsc.add %kc, %ks : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32> -> tensor<2x2x8x16xf32>
  %ke = dsc.cast %ke32 {to = bf16} : tensor<2x2x8x16xf32> -> tensor<2x2x8x16xbf16>
  %o, %lse = dsc.attention %qe, %ke, %vt {causal = true, scale = 0.125 : f64} : tensor<2x4x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16> -> tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>
  %y = dsc.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x8x16xbf16> -> tensor<2x8x4x16xbf16>
  %dot = dsc.transpose %dy {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xbf16> -> tensor<2x4x8x16xbf16>
  %dq, %dk, %dv = dsc.attention_backward %dot, %qe, %ke, %vt, %o, %lse {causal = true, scale = 0.125 : f64} : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8xf32> -> tensor<2x4x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16>
  // The rotary's gradient of q: dq * cos + rotate_half(-(dq * sin)).
  %dq32 = dsc.cast %dq {to = f32} : tensor<2x4x8x16xbf16> -> tensor<2x4x8x16xf32>
  %dqs = dsc.mul %dq32, %sin : tensor<2x4x8x16xf32>, tensor<1x1x8x16xf32> -> tensor<2x4x8x16xf32>
  %ndqs = dsc.neg %dqs : tensor<2x4x8x16xf32>
  %rdq = dsc.rotate_half %ndqs : tensor<2x4x8x16xf32>
  %dqc = dsc.mul %dq32, %cos : tensor<2x4x8x16xf32>, tensor<1x1x8x16xf32> -> tensor<2x4x8x16xf32>
  %gq32 = dsc.add %rdq, %dqc : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x16xf32>
  %gq = dsc.cast %gq32 {to = bf16} : tensor<2x4x8x16xf32> -> tensor<2x4x8x16xbf16>
  %gqt = dsc.transpose %gq {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x8x16xbf16> -> tensor<2x8x4x16xbf16>
  %dvt = dsc.transpose %dv {perm = array<i64: 0, 2, 1, 3>} : tensor<2x2x8x16xbf16> -> tensor<2x8x2x16xbf16>
  return %y, %gqt, %dvt : tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x8x2x16xbf16>
}
}

// -----

// The chains stay where moving them would not remove a copy or would
// compute part of them twice: a value of the chain also returned (its
// transpose stays); a broadcast operand whose permutation is not a reshape
// ([1, 4, 8, 1] -> [1, 8, 4, 1] moves two dims of size > 1); rotate_half
// under a permutation that moves its last dim.
// CHECK-LABEL: func.func @chains_stay
// CHECK: dsc.transpose %arg0
// CHECK: dsc.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f64} : tensor<2x4x8x16xbf16>
// CHECK: %[[S:.*]] = dsc.mul %{{.*}}, %arg1
// CHECK: dsc.transpose %[[S]]
// CHECK: %[[M:.*]] = dsc.transpose %arg2
// CHECK: %[[R:.*]] = dsc.rotate_half %[[M]]
// CHECK: dsc.transpose %[[R]]
// CHECK: return
module attributes {dsc.target = {name = "cuda"}} {
func.func @chains_stay(%q: tensor<2x8x4x16xbf16>, %w: tensor<1x4x8x1xbf16>, %m: tensor<2x4x16x8xf32>)
    -> (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x4x16x8xf32>) {
  %qt = dsc.transpose %q {perm = array<i64: 0, 2, 1, 3>} : tensor<2x8x4x16xbf16> -> tensor<2x4x8x16xbf16>
  %n = dsc.neg %qt : tensor<2x4x8x16xbf16>
  %o, %lse = dsc.attention %n, %qt, %qt {scale = 0.125 : f64} : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16> -> tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>
  %s = dsc.mul %qt, %w : tensor<2x4x8x16xbf16>, tensor<1x4x8x1xbf16> -> tensor<2x4x8x16xbf16>
  %st = dsc.transpose %s {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x8x16xbf16> -> tensor<2x8x4x16xbf16>
  %mt = dsc.transpose %m {perm = array<i64: 0, 1, 3, 2>} : tensor<2x4x16x8xf32> -> tensor<2x4x8x16xf32>
  %r = dsc.rotate_half %mt : tensor<2x4x8x16xf32>
  %rt = dsc.transpose %r {perm = array<i64: 0, 1, 3, 2>} : tensor<2x4x8x16xf32> -> tensor<2x4x16x8xf32>
  return %o, %n, %st, %rt : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x4x16x8xf32>
}
}

// -----

// A sum of squares of grads that all share one scalar scale (the loss
// normalizer) reads them unscaled, the scale its own (the same bits: it
// rounds each product as the mul does). The muls stay for their other
// reader, a scalar mul (the clip's). Not when a product is also read
// elsewhere (returned): the sum would keep x alive beside it.
// CHECK-LABEL: func.func @normalized_norm
// CHECK: %[[A:.*]] = dsc.mul %arg0, %arg2
// CHECK: %[[B:.*]] = dsc.mul %arg2, %arg1
// CHECK: %[[S:.*]] = dsc.sum_squares scale %arg2, (%arg0, %arg1)
func.func @normalized_norm(%a: tensor<4xf32>, %b: tensor<2x3xf32>, %inv: tensor<f32>, %c: tensor<f32>)
    -> (tensor<f32>, tensor<4xf32>, tensor<2x3xf32>) {
  %one = dsc.constant dense<1.0> : tensor<f32>
  %x = dsc.mul %a, %inv : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  %y = dsc.mul %inv, %b : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
  %s = dsc.sum_squares scale %one, (%x, %y) : tensor<f32>, (tensor<4xf32>, tensor<2x3xf32>) -> tensor<f32>
  %cx = dsc.mul %x, %c : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  %cy = dsc.mul %y, %c : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
  return %s, %cx, %cy : tensor<f32>, tensor<4xf32>, tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @returned_product
// CHECK: %[[X:.*]] = dsc.mul %arg0, %arg1
// CHECK: dsc.sum_squares scale %{{.*}}, (%[[X]])
func.func @returned_product(%a: tensor<4xf32>, %inv: tensor<f32>, %c: tensor<f32>)
    -> (tensor<f32>, tensor<4xf32>, tensor<4xf32>) {
  %one = dsc.constant dense<1.0> : tensor<f32>
  %x = dsc.mul %a, %inv : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  %s = dsc.sum_squares scale %one, (%x) : tensor<f32>, (tensor<4xf32>) -> tensor<f32>
  %cx = dsc.mul %x, %c : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  return %s, %cx, %x : tensor<f32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Not when the scales differ, when one tensor is not scaled, or when the
// op already has a scale of its own ((x * s) * t is not x * (s * t)).
// CHECK-LABEL: func.func @mixed_scales
// CHECK: %[[ONE:.*]] = dsc.constant dense<1.000000e+00>
// CHECK: %[[X:.*]] = dsc.mul %arg0, %arg2
// CHECK: %[[Y:.*]] = dsc.mul %arg1, %arg3
// CHECK: dsc.sum_squares scale %[[ONE]], (%[[X]], %[[Y]])
// CHECK: dsc.sum_squares scale %[[ONE]], (%[[X]], %arg1)
// CHECK: dsc.sum_squares scale %arg3, (%[[X]])
func.func @mixed_scales(%a: tensor<4xf32>, %b: tensor<4xf32>, %s: tensor<f32>, %t: tensor<f32>)
    -> (tensor<f32>, tensor<f32>, tensor<f32>) {
  %one = dsc.constant dense<1.0> : tensor<f32>
  %x = dsc.mul %a, %s : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  %y = dsc.mul %b, %t : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  %0 = dsc.sum_squares scale %one, (%x, %y) : tensor<f32>, (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
  %1 = dsc.sum_squares scale %one, (%x, %b) : tensor<f32>, (tensor<4xf32>, tensor<4xf32>) -> tensor<f32>
  %2 = dsc.sum_squares scale %t, (%x) : tensor<f32>, (tensor<4xf32>) -> tensor<f32>
  return %0, %1, %2 : tensor<f32>, tensor<f32>, tensor<f32>
}

// -----

// A tied embedding's gradient: the classifier's half plus the gather's
// scatter_add becomes one scatter_add into the classifier's half (either
// operand order), which touches only the indexed rows.
// CHECK-LABEL: func.func @tied_embedding
// CHECK: %[[W:.*]] = dsc.matmul
// CHECK-NEXT: %[[G:.*]] = dsc.scatter_add %arg1, %arg2 into %[[W]] {axis = 0 : i64, shape = array<i64: 10, 4>} : tensor<2x3x4xf32>, tensor<2x3xi64>, tensor<10x4xf32> -> tensor<10x4xf32>
// CHECK-NEXT: %[[H:.*]] = dsc.scatter_add %arg1, %arg2 into %[[W]] {axis = 0 : i64
// CHECK-NOT: dsc.add
// CHECK: return %[[G]], %[[H]]
func.func @tied_embedding(%x: tensor<6x10xf32>, %g: tensor<2x3x4xf32>, %i: tensor<2x3xi64>, %y: tensor<6x4xf32>)
    -> (tensor<10x4xf32>, tensor<10x4xf32>) {
  %w = dsc.matmul %x, %y {transpose_lhs = true} : tensor<6x10xf32>, tensor<6x4xf32> -> tensor<10x4xf32>
  %s = dsc.scatter_add %g, %i {axis = 0 : i64, shape = array<i64: 10, 4>} : tensor<2x3x4xf32>, tensor<2x3xi64> -> tensor<10x4xf32>
  %0 = dsc.add %w, %s : tensor<10x4xf32>, tensor<10x4xf32> -> tensor<10x4xf32>
  %t = dsc.scatter_add %g, %i {axis = 0 : i64, shape = array<i64: 10, 4>} : tensor<2x3x4xf32>, tensor<2x3xi64> -> tensor<10x4xf32>
  %1 = dsc.add %t, %w : tensor<10x4xf32>, tensor<10x4xf32> -> tensor<10x4xf32>
  return %0, %1 : tensor<10x4xf32>, tensor<10x4xf32>
}

// -----

// Not when the add broadcasts, nor when the scatter_add is read elsewhere
// (its zeros then stay a value of their own).
// CHECK-LABEL: func.func @scatter_stays
// CHECK: %[[S:.*]] = dsc.scatter_add %arg0, %arg1 {axis
// CHECK: dsc.add %[[S]], %arg2
// CHECK: %[[T:.*]] = dsc.scatter_add %arg0, %arg1 {axis
// CHECK: dsc.add %[[T]], %arg3
// CHECK: return
func.func @scatter_stays(%g: tensor<2x3x4xf32>, %i: tensor<2x3xi64>, %b: tensor<4xf32>, %w: tensor<10x4xf32>)
    -> (tensor<10x4xf32>, tensor<10x4xf32>, tensor<10x4xf32>) {
  %s = dsc.scatter_add %g, %i {axis = 0 : i64, shape = array<i64: 10, 4>} : tensor<2x3x4xf32>, tensor<2x3xi64> -> tensor<10x4xf32>
  %0 = dsc.add %s, %b : tensor<10x4xf32>, tensor<4xf32> -> tensor<10x4xf32>
  %t = dsc.scatter_add %g, %i {axis = 0 : i64, shape = array<i64: 10, 4>} : tensor<2x3x4xf32>, tensor<2x3xi64> -> tensor<10x4xf32>
  %1 = dsc.add %t, %w : tensor<10x4xf32>, tensor<10x4xf32> -> tensor<10x4xf32>
  return %0, %1, %t : tensor<10x4xf32>, tensor<10x4xf32>, tensor<10x4xf32>
}
