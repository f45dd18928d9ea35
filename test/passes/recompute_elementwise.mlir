// RUN: dsc-opt %s --dsc-recompute=mode=elementwise --cse | FileCheck %s --check-prefix=EW
// RUN: dsc-opt %s --dsc-recompute=mode=elementwise --cse --dsc-fuse-elementwise | FileCheck %s --check-prefix=FUSED

// mode=elementwise on a SwiGLU (g and u, matmul outputs, are read by the
// backward anyway): the sigmoid, g * s and the product are not kept;
// every backward op that reads one gets its own clones right before it,
// each reader's numbered apart (CSE keeps them so), so that each lands in
// its reader's kernel. A norm (here a layer_norm) stays kept in this mode.
// EW-LABEL: func.func @forward_backward
// EW: %[[G:.*]] = dsc.matmul
// EW: %[[U:.*]] = dsc.matmul
// EW-NOT: dsc.sigmoid
// EW: %[[N:.*]] = dsc.layer_norm
// EW-NOT: dsc.sigmoid
// EW: %[[SEED:.*]] = dsc.constant {dsc.backward_begin}
// EW-NEXT: %[[S0:.*]] = dsc.sigmoid %[[G]] {dsc.recomputed = 0 : i64}
// EW-NEXT: %[[A0:.*]] = dsc.mul %[[G]], %[[S0]] {dsc.recomputed = 0 : i64}
// EW-NEXT: %[[P0:.*]] = dsc.mul %[[A0]], %[[U]] {dsc.recomputed = 0 : i64}
// EW-NEXT: dsc.matmul %[[P0]], %[[SEED]]
// EW-NEXT: %[[S1:.*]] = dsc.sigmoid %[[G]] {dsc.recomputed = 1 : i64}
// EW-NEXT: %[[A1:.*]] = dsc.mul %[[G]], %[[S1]] {dsc.recomputed = 1 : i64}
// EW-NEXT: %[[DU:.*]] = dsc.mul %[[SEED]], %[[A1]]
// EW-NEXT: %[[S2:.*]] = dsc.sigmoid %[[G]] {dsc.recomputed = 2 : i64}
// EW-NEXT: %[[DG:.*]] = dsc.mul %[[DU]], %[[S2]]
// EW-NEXT: dsc.mul %[[DG]], %[[G]]
// EW-NEXT: dsc.mul %[[DU]], %[[U]]
// EW-NEXT: dsc.mul %[[DG]], %[[N]]
module attributes {dsc.target = {name = "cuda"}} {
func.func @forward_backward(%x: tensor<2x4xf32>, %wg: tensor<4x4xf32>, %wu: tensor<4x4xf32>, %gamma: tensor<4xf32>, %beta: tensor<4xf32>) -> (tensor<4x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) {
  %g = dsc.matmul %x, %wg : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %u = dsc.matmul %x, %wu : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %s = dsc.sigmoid %g : tensor<2x4xf32>
  %a = dsc.mul %g, %s : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %p = dsc.mul %a, %u : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %n = dsc.layer_norm %u, %gamma, %beta {axis = -1 : i64, epsilon = 1.0e-05 : f64} : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %seed = dsc.constant {dsc.backward_begin} dense<1.0> : tensor<2x4xf32>
  %dw = dsc.matmul %p, %seed {transpose_lhs = true} : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<4x4xf32>
  %du = dsc.mul %seed, %a : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %dg = dsc.mul %du, %s : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %dg2 = dsc.mul %dg, %g : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %du2 = dsc.mul %du, %u : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %dn = dsc.mul %dg, %n : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  return %dw, %du, %dg, %dg2, %du2, %dn : tensor<4x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>
}
}

// Fused for a target with generated kernels: the matmul's operand in a
// kernel of its own that writes only it; the two readers' clones inside
// their chain's kernel, which writes the gradients and no sigmoid.
// FUSED-LABEL: func.func @forward_backward
// FUSED: dsc.constant {dsc.backward_begin}
// FUSED-NEXT: %[[P:.*]] = dsc.fused "elementwise"
// FUSED: dsc.sigmoid
// FUSED: dsc.yield %{{.*}} : tensor<2x4xf32>
// FUSED: dsc.matmul %[[P]]
// FUSED: dsc.fused "elementwise"
// FUSED-COUNT-2: dsc.sigmoid
// FUSED: dsc.yield %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} :
