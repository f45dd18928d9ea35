// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=2" | FileCheck %s
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=2" --dsc-schedule --cse | FileCheck %s

// Stage 3 with a view of a parameter that backward reads again (the
// transposed weight of a linear layer, as PyTorch exports x @ W^T): backward
// transposes its own gathered copy, so the forward copy's bytes die at their
// dsc.release instead of living through backward in the transposed value.
func.func @forward(%w1: tensor<2x2xf32> {dsc.param = "l1.weight"},
                   %w2: tensor<4x2xf32> {dsc.param = "l2.weight"},
                   %x: tensor<3x2xf32> {dsc.input = "x"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %h = dsc.matmul %x, %w1 : tensor<3x2xf32>, tensor<2x2xf32> -> tensor<3x2xf32>
  %r = dsc.relu %h : tensor<3x2xf32>
  %wt = dsc.transpose %w2 {perm = array<i64: 1, 0>} : tensor<4x2xf32> -> tensor<2x4xf32>
  %o = dsc.matmul %r, %wt : tensor<3x2xf32>, tensor<2x4xf32> -> tensor<3x4xf32>
  %t = dsc.tanh %o : tensor<3x4xf32>
  %l = dsc.reduce_mean %t {axes = array<i64: 0, 1>, keepdims = false}
      : tensor<3x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[FWD:.*]] = dsc.reshape %{{.*}} {shape = array<i64: 4, 2>}
// CHECK: %[[FWDT:.*]] = dsc.transpose %[[FWD]] {perm = array<i64: 1, 0>}
// CHECK: dsc.release {{.*}}%[[FWD]]{{[ ,]}}
// CHECK: dsc.matmul %{{.*}}, %[[FWDT]]
// CHECK: dsc.constant {dsc.backward_begin}
// CHECK-NOT: %[[FWDT]]{{[^0-9]}}
// CHECK: %[[BWD:.*]] = dsc.reshape %{{.*}} {shape = array<i64: 4, 2>}
// CHECK-NEXT: dsc.transpose %[[BWD]] {perm = array<i64: 1, 0>}
// CHECK-NOT: %[[FWDT]]{{[^0-9]}}
// CHECK: return
