// RUN: dsc-opt %s --split-input-file --dsc-inline-step | FileCheck %s

// Stage 1 on four ranks, one call: the body takes the call's place, its
// returned values replace the call's results, and the step draws its
// random numbers as the call did (dsc.rng_call). The callee stays.
// CHECK-LABEL: func.func @forward_backward
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: attributes {dsc.rng_call = 1 : i64}
// CHECK-NOT: call
// CHECK: %[[G:.*]] = dsc.mul %arg0, %arg0
// CHECK: %[[U:.*]] = dsc.sub %arg0, %[[G]]
// CHECK: return %[[U]]
module attributes {dsc.stage = 1 : i64, dsc.world_size = 4 : i64} {
  func.func @forward_backward(%p: tensor<4xf32>) -> tensor<4xf32> {
    %g = dsc.mul %p, %p : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    return %g : tensor<4xf32>
  }
  func.func @train_step(%p: tensor<4xf32>) -> tensor<4xf32> {
    %g = call @forward_backward(%p) : (tensor<4xf32>) -> tensor<4xf32>
    %u = dsc.sub %p, %g : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    return %u : tensor<4xf32>
  }
}

// -----

// Stage 2 returns shards only: left as it is. So are one rank, two calls
// (--accum-steps 2) and an offloaded step (next cases).
// CHECK-LABEL: func.func @train_step
// CHECK: call @forward_backward
module attributes {dsc.stage = 2 : i64, dsc.world_size = 4 : i64} {
  func.func @forward_backward(%p: tensor<4xf32>) -> tensor<4xf32> {
    return %p : tensor<4xf32>
  }
  func.func @train_step(%p: tensor<4xf32>) -> tensor<4xf32> {
    %g = call @forward_backward(%p) : (tensor<4xf32>) -> tensor<4xf32>
    return %g : tensor<4xf32>
  }
}

// -----

// CHECK-LABEL: func.func @train_step
// CHECK: call @forward_backward
module {
  func.func @forward_backward(%p: tensor<4xf32>) -> tensor<4xf32> {
    return %p : tensor<4xf32>
  }
  func.func @train_step(%p: tensor<4xf32>) -> tensor<4xf32> {
    %g = call @forward_backward(%p) : (tensor<4xf32>) -> tensor<4xf32>
    return %g : tensor<4xf32>
  }
}

// -----

// CHECK-LABEL: func.func @train_step
// CHECK: call @forward_backward
// CHECK: call @forward_backward
module attributes {dsc.stage = 0 : i64, dsc.world_size = 4 : i64} {
  func.func @forward_backward(%p: tensor<4xf32>) -> tensor<4xf32> {
    return %p : tensor<4xf32>
  }
  func.func @train_step(%p: tensor<4xf32>) -> tensor<4xf32> {
    %g = call @forward_backward(%p) : (tensor<4xf32>) -> tensor<4xf32>
    %h = call @forward_backward(%p) : (tensor<4xf32>) -> tensor<4xf32>
    %s = dsc.add %g, %h : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    return %s : tensor<4xf32>
  }
}
