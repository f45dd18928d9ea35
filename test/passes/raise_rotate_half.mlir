// RUN: dsc-opt %s --split-input-file --dsc-raise-rotate-half | FileCheck %s

// HF Llama's rotate_half as torch.onnx.export writes it, on q [B, H, T, D]:
// the halves of the last dim, the second negated, concatenated first. One
// dsc.rotate_half; the slices and the neg are gone.
// CHECK-LABEL: func.func @llama
// CHECK-NEXT: %[[R:.*]] = dsc.rotate_half %arg0 : tensor<2x4x3x8xf32>
// CHECK-NEXT: return %[[R]]
func.func @llama(%q: tensor<2x4x3x8xf32>) -> tensor<2x4x3x8xf32> {
  %x1 = dsc.slice %q {offsets = array<i64: 0, 0, 0, 0>, sizes = array<i64: 2, 4, 3, 4>, strides = array<i64: 1, 1, 1, 1>} : tensor<2x4x3x8xf32> -> tensor<2x4x3x4xf32>
  %x2 = dsc.slice %q {offsets = array<i64: 0, 0, 0, 4>, sizes = array<i64: 2, 4, 3, 4>, strides = array<i64: 1, 1, 1, 1>} : tensor<2x4x3x8xf32> -> tensor<2x4x3x4xf32>
  %n = dsc.neg %x2 : tensor<2x4x3x4xf32>
  %r = dsc.concat %n, %x1 {axis = 3 : i64} : tensor<2x4x3x4xf32>, tensor<2x4x3x4xf32> -> tensor<2x4x3x8xf32>
  return %r : tensor<2x4x3x8xf32>
}

// -----

// Not rotate_half: the halves in the other order (cat(-x1, x2)), a slice of
// another tensor, a strided slice, a concat over another axis.
// CHECK-LABEL: func.func @not_rotate_half
// CHECK-NOT: dsc.rotate_half
// CHECK: return
func.func @not_rotate_half(%q: tensor<3x8xf32>, %k: tensor<3x8xf32>, %m: tensor<6x4xf32>) -> (tensor<3x8xf32>, tensor<3x8xf32>, tensor<6x4xf32>) {
  %a1 = dsc.slice %q {offsets = array<i64: 0, 0>, sizes = array<i64: 3, 4>, strides = array<i64: 1, 1>} : tensor<3x8xf32> -> tensor<3x4xf32>
  %a2 = dsc.slice %q {offsets = array<i64: 0, 4>, sizes = array<i64: 3, 4>, strides = array<i64: 1, 1>} : tensor<3x8xf32> -> tensor<3x4xf32>
  %na1 = dsc.neg %a1 : tensor<3x4xf32>
  %r1 = dsc.concat %na1, %a2 {axis = 1 : i64} : tensor<3x4xf32>, tensor<3x4xf32> -> tensor<3x8xf32>
  %b1 = dsc.slice %k {offsets = array<i64: 0, 0>, sizes = array<i64: 3, 4>, strides = array<i64: 1, 1>} : tensor<3x8xf32> -> tensor<3x4xf32>
  %na2 = dsc.neg %a2 : tensor<3x4xf32>
  %r2 = dsc.concat %na2, %b1 {axis = 1 : i64} : tensor<3x4xf32>, tensor<3x4xf32> -> tensor<3x8xf32>
  %c1 = dsc.slice %q {offsets = array<i64: 0, 0>, sizes = array<i64: 3, 2>, strides = array<i64: 1, 2>} : tensor<3x8xf32> -> tensor<3x2xf32>
  %m1 = dsc.slice %m {offsets = array<i64: 0, 0>, sizes = array<i64: 3, 4>, strides = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<3x4xf32>
  %m2 = dsc.slice %m {offsets = array<i64: 3, 0>, sizes = array<i64: 3, 4>, strides = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<3x4xf32>
  %nm2 = dsc.neg %m2 : tensor<3x4xf32>
  %r3 = dsc.concat %nm2, %m1 {axis = 0 : i64} : tensor<3x4xf32>, tensor<3x4xf32> -> tensor<6x4xf32>
  return %r1, %r2, %r3 : tensor<3x8xf32>, tensor<3x8xf32>, tensor<6x4xf32>
}
