// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-mixed-precision="precision=bf16" | FileCheck %s
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-mixed-precision="precision=bf16" --cse --canonicalize | FileCheck %s --check-prefix=PIPE

// What the backward pass keeps of an fp32 value computed from 16-bit values
// alone (the bias add after a matmul, GELU's input and output) is a 16-bit
// copy, as autocast keeps it; a value with an fp32 source of its own (the
// residual add of the fp32 input) stays fp32.
func.func @forward(%w: tensor<4x4xf32> {dsc.param = "fc.weight"},
                   %b: tensor<4xf32> {dsc.param = "fc.bias"},
                   %x: tensor<2x4xf32> {dsc.input = "x"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %h = dsc.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %a = dsc.add %h, %b : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %g = dsc.gelu %a : tensor<2x4xf32>
  %r = dsc.add %g, %x : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %m = dsc.mul %r, %r : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %l = dsc.reduce_mean %m {axes = array<i64: 0, 1>, keepdims = false}
      : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[H:.*]] = dsc.matmul {{.*}} -> tensor<2x4xbf16>
// CHECK: %[[A:.*]] = dsc.add {{.*}} : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
// CHECK-NEXT: %[[AN:.*]] = dsc.cast %[[A]] {to = bf16} : tensor<2x4xf32> -> tensor<2x4xbf16>
// CHECK: %[[G:.*]] = dsc.gelu %[[A]] : tensor<2x4xf32>
// CHECK: %[[R:.*]] = dsc.add %[[G]], %{{.*}} : tensor<2x4xf32>, tensor<2x4xf32>
// CHECK-NOT: dsc.cast %[[R]]
// CHECK: dsc.constant {dsc.backward_begin}
// The backward reads the residual in fp32 and GELU's input as the widened
// 16-bit copy, never the forward's fp32 value.
// CHECK: %[[AW:.*]] = dsc.cast %[[AN]] {dsc.recompute, to = f32} : tensor<2x4xbf16> -> tensor<2x4xf32>
// CHECK-NOT: %[[A]]{{[,) ]}}
// CHECK: return

// CSE and canonicalization keep the pair apart (a lossy round trip).
// PIPE-LABEL: func.func @forward_backward
// PIPE: %[[A:.*]] = dsc.add {{.*}} -> tensor<2x4xf32>
// PIPE: %[[AN:.*]] = dsc.cast %[[A]] {to = bf16}
// PIPE: dsc.cast %[[AN]] {dsc.recompute, to = f32}
