// RUN: dsc-opt %s --split-input-file --dsc-fuse-norm-residual | FileCheck %s

// A pre-norm block's residual gradient: the norm's input gradient plus the
// gradient flowing past the block, and the sum's bf16 copy for the next
// GEMM, become the norm backward's epilogue. Either operand order.
// CHECK-LABEL: func.func @fused_chain
// CHECK: %[[GX:.*]], %[[GS:.*]], %[[GB:.*]], %[[C:.*]] = dsc.layer_norm_backward %arg0, %arg1, %arg2 residual %arg3 {axis = 1 : i64, copy_type = bf16, epsilon = 1.000000e-05 : f64} : tensor<4x8xf32>, tensor<4x8xbf16>, tensor<8xf32>, tensor<4x8xf32>
// CHECK-NOT: dsc.fused
// CHECK: %[[M:.*]] = dsc.matmul %[[C]], %arg4
// CHECK: return %[[GX]], %[[M]], %[[GS]], %[[GB]]
module attributes {dsc.target = {name = "cuda"}} {
func.func @fused_chain(%g: tensor<4x8xf32>, %x: tensor<4x8xbf16>, %w: tensor<8xf32>, %r: tensor<4x8xf32>, %m: tensor<8x8xbf16>)
    -> (tensor<4x8xf32>, tensor<4x8xbf16>, tensor<8xf32>, tensor<8xf32>) {
  %gx, %gs, %gb = dsc.layer_norm_backward %g, %x, %w {axis = 1 : i64, epsilon = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<4x8xbf16>, tensor<8xf32>
  %s:2 = dsc.fused "elementwise"(%gx, %r) : (tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xf32>) {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>):
    %0 = dsc.add %b, %a : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    %1 = dsc.cast %0 {to = bf16} : tensor<4x8xf32> -> tensor<4x8xbf16>
    dsc.yield %1, %0 : tensor<4x8xbf16>, tensor<4x8xf32>
  }
  %p = dsc.matmul %s#0, %m : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  return %s#1, %p, %gs, %gb : tensor<4x8xf32>, tensor<4x8xbf16>, tensor<8xf32>, tensor<8xf32>
}
}

// -----

// An add left unfused (a chain of one op), of an RMS norm's gradient: the
// residual alone. The residual may be the sum an earlier norm made; the
// norms take them in order.
// CHECK-LABEL: func.func @plain_add
// CHECK: %[[A:.*]], %{{.*}}, %{{.*}} = dsc.layer_norm_backward %arg0, %arg1, %arg2 {axis = 1 : i64
// CHECK: %[[B:.*]], %{{.*}}, %{{.*}} = dsc.layer_norm_backward %arg0, %arg1, %arg2 residual %[[A]] {axis = 1 : i64, epsilon = 1.000000e-05 : f64, rms}
// CHECK: %[[C:.*]], %{{.*}}, %{{.*}} = dsc.layer_norm_backward %arg0, %arg1, %arg2 residual %[[B]] {axis = 1 : i64, epsilon = 1.000000e-05 : f64, rms}
// CHECK-NOT: dsc.add
// CHECK: return %[[C]]
module attributes {dsc.target = {name = "cuda"}} {
func.func @plain_add(%g: tensor<4x8xf32>, %x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %a, %as, %ab = dsc.layer_norm_backward %g, %x, %w {axis = 1 : i64, epsilon = 1.0e-05 : f64, rms} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>
  %b, %bs, %bb = dsc.layer_norm_backward %g, %x, %w {axis = 1 : i64, epsilon = 1.0e-05 : f64, rms} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>
  %0 = dsc.add %a, %b : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %c, %cs, %cb = dsc.layer_norm_backward %g, %x, %w {axis = 1 : i64, epsilon = 1.0e-05 : f64, rms} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>
  %1 = dsc.add %0, %c : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}
}

// -----

// Not: the norm's gradient read elsewhere too, a chain doing more than the
// add, a broadcast add, a residual defined after the norm (the norm stays
// where it is), or (below) a target without generated kernels.
// CHECK-LABEL: func.func @stays
// CHECK-NOT: residual
// CHECK: dsc.add %{{.*}}, %arg3
// CHECK: dsc.fused "elementwise"
// CHECK: dsc.add %{{.*}}, %arg4
// CHECK: dsc.add %{{.*}}, %{{.*}} :
module attributes {dsc.target = {name = "cuda"}} {
func.func @stays(%g: tensor<4x8xf32>, %x: tensor<4x8xf32>, %w: tensor<8xf32>, %r: tensor<4x8xf32>, %b: tensor<8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) {
  %a, %as, %ab = dsc.layer_norm_backward %g, %x, %w {axis = 1 : i64, epsilon = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>
  %0 = dsc.add %a, %r : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %c, %cs, %cb = dsc.layer_norm_backward %g, %x, %w {axis = 1 : i64, epsilon = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>
  %1 = dsc.fused "elementwise"(%c, %r) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%p: tensor<4x8xf32>, %q: tensor<4x8xf32>):
    %5 = dsc.add %p, %q : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    %6 = dsc.mul %5, %q : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    dsc.yield %6 : tensor<4x8xf32>
  }
  %d, %ds, %db = dsc.layer_norm_backward %g, %x, %w {axis = 1 : i64, epsilon = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>
  %2 = dsc.add %d, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %e, %es, %eb = dsc.layer_norm_backward %g, %x, %w {axis = 1 : i64, epsilon = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>
  %late = dsc.exp %r : tensor<4x8xf32>
  %3 = dsc.add %e, %late : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return %0, %a, %1, %2, %3, %es : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>
}
}

// -----

// CHECK-LABEL: func.func @cpu_target
// CHECK-NOT: residual
// CHECK: dsc.add
module attributes {dsc.target = {name = "cpu"}} {
func.func @cpu_target(%g: tensor<4x8xf32>, %x: tensor<4x8xf32>, %w: tensor<8xf32>, %r: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a, %as, %ab = dsc.layer_norm_backward %g, %x, %w {axis = 1 : i64, epsilon = 1.0e-05 : f64} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>
  %0 = dsc.add %a, %r : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
}
