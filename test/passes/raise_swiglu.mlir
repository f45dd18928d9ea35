// RUN: dsc-opt %s --split-input-file --dsc-raise-swiglu | FileCheck %s

// Llama's MLP gate as torch.onnx.export writes it: sigmoid, x * s, times
// the up projection. One dsc.swiglu, the sigmoid and the silu gone.
// CHECK-LABEL: func.func @llama
// CHECK-NEXT: %[[Y:.*]] = dsc.swiglu %arg0, %arg1 : tensor<2x3x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @llama(%g: tensor<2x3x8xf32>, %u: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  %s = dsc.sigmoid %g : tensor<2x3x8xf32>
  %a = dsc.mul %g, %s : tensor<2x3x8xf32>, tensor<2x3x8xf32> -> tensor<2x3x8xf32>
  %y = dsc.mul %a, %u : tensor<2x3x8xf32>, tensor<2x3x8xf32> -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

// -----

// Either operand order in both products.
// CHECK-LABEL: func.func @swapped
// CHECK-NEXT: %[[Y:.*]] = dsc.swiglu %arg0, %arg1 : tensor<4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @swapped(%g: tensor<4x8xf32>, %u: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = dsc.sigmoid %g : tensor<4x8xf32>
  %a = dsc.mul %s, %g : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %y = dsc.mul %u, %a : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Refused: the silu is read twice (it would stay computed beside the op),
// the sigmoid is read elsewhere, the sigmoid is of another value, and the
// up operand broadcasts.
// CHECK-LABEL: func.func @refused
// CHECK-NOT: dsc.swiglu
// CHECK: return
func.func @refused(%g: tensor<4x8xf32>, %u: tensor<4x8xf32>, %h: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %s = dsc.sigmoid %g : tensor<4x8xf32>
  %a = dsc.mul %g, %s : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %y = dsc.mul %a, %u : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %s2 = dsc.sigmoid %u : tensor<4x8xf32>
  %a2 = dsc.mul %u, %s2 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %y2 = dsc.mul %a2, %g : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %s3 = dsc.sigmoid %h : tensor<4x8xf32>
  %a3 = dsc.mul %g, %s3 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %y3 = dsc.mul %a3, %u : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %s4 = dsc.sigmoid %h : tensor<4x8xf32>
  %a4 = dsc.mul %h, %s4 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %y4 = dsc.mul %a4, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  return %a, %y, %s2, %y2, %y3, %y4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
