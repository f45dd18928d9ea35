// RUN: dsc-opt %s --split-input-file --dsc-recompute=mode=selective | FileCheck %s
// RUN: dsc-opt %s --split-input-file --dsc-recompute=mode=selective --cse | FileCheck %s --check-prefix=CSE
// RUN: dsc-opt %s --split-input-file --dsc-recompute | FileCheck %s --check-prefix=NONE
// RUN: dsc-opt %s --split-input-file --dsc-recompute=mode=full | FileCheck %s --check-prefix=FULL
// RUN: dsc-opt %s --split-input-file --dsc-recompute="mode=selective attention-workspace=0" | FileCheck %s --check-prefix=NOLIMIT

// GPT-2's tanh GELU: tanh(k * h^3) is read by the backward; h (a matmul
// output the backward reads anyway) is kept, and the chain from it is
// computed again right before the first backward use. The forward copies
// die in forward (here: they are not used there at all, and go).
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[H:.*]] = dsc.matmul
// CHECK-NOT: dsc.tanh
// CHECK: dsc.constant {dsc.backward_begin}
// CHECK: %[[B1:.*]] = dsc.mul %{{.*}}, %[[H]]
// CHECK-NEXT: %[[P:.*]] = dsc.pow %[[H]], %{{.*}} {dsc.recomputed}
// CHECK-NEXT: %[[E:.*]] = dsc.mul %[[P]], %{{.*}} {dsc.recomputed}
// CHECK-NEXT: %[[T:.*]] = dsc.tanh %[[E]] {dsc.recomputed}
// CHECK-NEXT: dsc.mul %[[B1]], %[[T]]
// CHECK: return %[[T]],
// NONE-NOT: dsc.recomputed
// CSE-LABEL: func.func @forward_backward
// CSE: dsc.tanh {{.*}} {dsc.recomputed}
func.func @forward_backward(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %h = dsc.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %c = dsc.constant dense<3.0> : tensor<f32>
  %p = dsc.pow %h, %c : tensor<2x4xf32>, tensor<f32> -> tensor<2x4xf32>
  %e = dsc.mul %p, %c : tensor<2x4xf32>, tensor<f32> -> tensor<2x4xf32>
  %t = dsc.tanh %e : tensor<2x4xf32>
  %seed = dsc.constant {dsc.backward_begin} dense<1.0> : tensor<2x4xf32>
  %b1 = dsc.mul %seed, %h : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %b2 = dsc.mul %b1, %t : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %b3 = dsc.add %b2, %t : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  return %t, %b3 : tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// Kept: a relu whose operand the backward does not read (recomputing it
// would keep the matmul output alive instead), a dropout (random), the
// matmuls. A cheap value the forward uses too keeps its forward copy
// there, and the backward reads the clone.
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[H:.*]] = dsc.matmul
// CHECK-NEXT: %[[R:.*]] = dsc.relu %[[H]] : tensor<2x4xf32>
// CHECK-NEXT: %[[D:.*]], %{{.*}} = dsc.dropout
// CHECK-NEXT: %[[S:.*]] = dsc.sigmoid %[[X:.*]] : tensor<2x4xf32>
// CHECK-NEXT: %[[F:.*]] = dsc.add %[[S]], %[[R]] :
// CHECK-NEXT: %[[G:.*]] = dsc.matmul %[[F]]
// CHECK-NEXT: dsc.constant {dsc.backward_begin}
// CHECK-NEXT: dsc.mul %{{.*}}, %[[R]]
// CHECK-NEXT: dsc.mul %{{.*}}, %[[D]]
// CHECK-NEXT: %[[S2:.*]] = dsc.sigmoid %[[X]] {dsc.recomputed}
// CHECK-NEXT: dsc.mul %{{.*}}, %[[S2]]
// CHECK-NEXT: return %[[G]]
func.func @forward_backward(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %h = dsc.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %r = dsc.relu %h : tensor<2x4xf32>
  %d, %m = dsc.dropout %r {ratio = 0.1 : f64, seed = 0 : i64} : tensor<2x4xf32>
  %s = dsc.sigmoid %x : tensor<2x4xf32>
  %f = dsc.add %s, %r : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %g = dsc.matmul %f, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %seed = dsc.constant {dsc.backward_begin} dense<1.0> : tensor<2x4xf32>
  %b1 = dsc.mul %seed, %r : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %b2 = dsc.mul %b1, %d : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %b3 = dsc.mul %b2, %s : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  return %g, %b3 : tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// No backward marker (not a training step): nothing to do.
// CHECK-LABEL: func.func @forward_backward
// CHECK-NOT: dsc.recomputed
func.func @forward_backward(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %t = dsc.tanh %x : tensor<2x4xf32>
  %u = dsc.mul %t, %t : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  return %u : tensor<2x4xf32>
}

// -----

// Per-block (full) recomputation: in the repeated block /h.0 the matmul is
// computed again too, from the block's input and weight; the GELU, which
// the forward reads outside the block (/lm_head), is the block's checkpoint
// and is kept. Selective redoes only the GELU and keeps the matmul's
// output. Outside any block the matmul is kept in either mode.
// CHECK-LABEL: func.func @forward_backward
// CHECK: dsc.constant {dsc.backward_begin}
// CHECK-NOT: dsc.matmul {{.*}}dsc.recomputed
// CHECK: dsc.gelu %{{.*}} {dsc.recomputed}
// FULL-LABEL: func.func @forward_backward
// FULL: %[[G:.*]] = dsc.gelu
// FULL: %[[O:.*]] = dsc.matmul %[[G]], %arg2
// FULL: dsc.constant {dsc.backward_begin}
// FULL-NOT: dsc.gelu
// FULL: dsc.mul %{{.*}}, %[[G]]
// FULL-NEXT: %[[H:.*]] = dsc.matmul %arg0, %arg1 {dsc.recomputed}
// FULL-NEXT: dsc.mul %{{.*}}, %[[H]]
// FULL-NEXT: dsc.mul %{{.*}}, %[[O]]
func.func @forward_backward(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>, %w2: tensor<4x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %h = dsc.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32> loc("/h.0/mlp/c_fc/MatMul")
  %g = dsc.gelu %h : tensor<2x4xf32> loc("/h.0/mlp/act/Gelu")
  %o = dsc.matmul %g, %w2 : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32> loc("/lm_head/MatMul")
  %seed = dsc.constant {dsc.backward_begin} dense<1.0> : tensor<2x4xf32>
  %b1 = dsc.mul %seed, %g : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %b2 = dsc.mul %b1, %h : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %b3 = dsc.mul %b2, %o : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  return %o, %b3 : tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// Recomputing trades time for memory; so does bounding the attention
// backward's library workspace (the runtime slices the batch under it):
// every mode but none sets workspace_limit, 256 MiB unless told.
// CHECK-LABEL: func.func @attention_workspace
// CHECK: dsc.attention_backward {{.*}}workspace_limit = 268435456 : i64
// FULL-LABEL: func.func @attention_workspace
// FULL: dsc.attention_backward {{.*}}workspace_limit = 268435456 : i64
// NONE-LABEL: func.func @attention_workspace
// NONE-NOT: workspace_limit
// NOLIMIT-LABEL: func.func @attention_workspace
// NOLIMIT-NOT: workspace_limit
module {
func.func @attention_workspace() { return }
func.func @forward_backward(%q: tensor<2x4x8x16xbf16>, %k: tensor<2x2x8x16xbf16>, %v: tensor<2x2x8x16xbf16>) -> (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>) {
  %o, %lse = dsc.attention %q, %k, %v {causal = true, scale = 2.500000e-01 : f64} : tensor<2x4x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16> -> tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>
  %seed = dsc.constant {dsc.backward_begin} dense<1.0> : tensor<2x4x8x16xbf16>
  %gq, %gk, %gv = dsc.attention_backward %seed, %q, %k, %v, %o, %lse {causal = true, scale = 2.500000e-01 : f64} : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8xf32> -> tensor<2x4x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16>
  return %o, %gq : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>
}
}
