// RUN: dsc-opt %s --split-input-file --dsc-raise-gelu | FileCheck %s

// nanoGPT's new_gelu as the exporter writes it: x*x*x, the constants as
// scalars, 0.5 applied last.
// CHECK-LABEL: func.func @forward
// CHECK-NEXT: %[[G:.*]] = dsc.gelu %arg0 {tanh_approximation = true} : tensor<4x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @forward(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %half = dsc.constant dense<5.000000e-01> : tensor<f32>
  %one = dsc.constant dense<1.000000e+00> : tensor<f32>
  %k = dsc.constant dense<0.797884583> : tensor<f32>
  %c = dsc.constant dense<4.471500e-02> : tensor<f32>
  %0 = dsc.mul %x, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %1 = dsc.mul %x, %0 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %2 = dsc.mul %c, %1 : tensor<f32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %3 = dsc.add %x, %2 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %4 = dsc.mul %k, %3 : tensor<f32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %5 = dsc.tanh %4 : tensor<4x8xf32>
  %6 = dsc.add %one, %5 : tensor<f32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %7 = dsc.mul %x, %6 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %8 = dsc.mul %half, %7 : tensor<f32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return %8 : tensor<4x8xf32>
}

// -----

// HF's NewGELUActivation: pow(x, 3), 0.5 * x first.
// CHECK-LABEL: func.func @forward
// CHECK-NEXT: %[[G:.*]] = dsc.gelu %arg0 {tanh_approximation = true}
// CHECK-NEXT: return %[[G]]
func.func @forward(%x: tensor<6xf32>) -> tensor<6xf32> {
  %half = dsc.constant dense<5.000000e-01> : tensor<f32>
  %one = dsc.constant dense<1.000000e+00> : tensor<f32>
  %three = dsc.constant dense<3.000000e+00> : tensor<f32>
  %k = dsc.constant dense<0.797884583> : tensor<f32>
  %c = dsc.constant dense<4.471500e-02> : tensor<f32>
  %hx = dsc.mul %half, %x : tensor<f32>, tensor<6xf32> -> tensor<6xf32>
  %0 = dsc.pow %x, %three : tensor<6xf32>, tensor<f32> -> tensor<6xf32>
  %1 = dsc.mul %0, %c : tensor<6xf32>, tensor<f32> -> tensor<6xf32>
  %2 = dsc.add %1, %x : tensor<6xf32>, tensor<6xf32> -> tensor<6xf32>
  %3 = dsc.mul %2, %k : tensor<6xf32>, tensor<f32> -> tensor<6xf32>
  %4 = dsc.tanh %3 : tensor<6xf32>
  %5 = dsc.add %4, %one : tensor<6xf32>, tensor<f32> -> tensor<6xf32>
  %6 = dsc.mul %hx, %5 : tensor<6xf32>, tensor<6xf32> -> tensor<6xf32>
  return %6 : tensor<6xf32>
}

// -----

// The exact GELU: 0.5 * x * (1 + erf(x / sqrt(2))).
// CHECK-LABEL: func.func @forward
// CHECK-NEXT: %[[G:.*]] = dsc.gelu %arg0 : tensor<6xf32>
// CHECK-NEXT: return %[[G]]
func.func @forward(%x: tensor<6xf32>) -> tensor<6xf32> {
  %half = dsc.constant dense<5.000000e-01> : tensor<f32>
  %one = dsc.constant dense<1.000000e+00> : tensor<f32>
  %r2 = dsc.constant dense<1.41421354> : tensor<f32>
  %0 = dsc.div %x, %r2 : tensor<6xf32>, tensor<f32> -> tensor<6xf32>
  %1 = dsc.erf %0 : tensor<6xf32>
  %2 = dsc.add %1, %one : tensor<6xf32>, tensor<f32> -> tensor<6xf32>
  %3 = dsc.mul %x, %2 : tensor<6xf32>, tensor<6xf32> -> tensor<6xf32>
  %4 = dsc.mul %3, %half : tensor<6xf32>, tensor<f32> -> tensor<6xf32>
  return %4 : tensor<6xf32>
}

// -----

// Not GELU: another constant (0.05), or a tanh value used elsewhere too.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: dsc.gelu
// CHECK: dsc.tanh
func.func @forward(%x: tensor<6xf32>) -> (tensor<6xf32>, tensor<6xf32>) {
  %half = dsc.constant dense<5.000000e-01> : tensor<f32>
  %one = dsc.constant dense<1.000000e+00> : tensor<f32>
  %k = dsc.constant dense<0.797884583> : tensor<f32>
  %c = dsc.constant dense<5.000000e-02> : tensor<f32>
  %0 = dsc.mul %x, %x : tensor<6xf32>, tensor<6xf32> -> tensor<6xf32>
  %1 = dsc.mul %x, %0 : tensor<6xf32>, tensor<6xf32> -> tensor<6xf32>
  %2 = dsc.mul %c, %1 : tensor<f32>, tensor<6xf32> -> tensor<6xf32>
  %3 = dsc.add %x, %2 : tensor<6xf32>, tensor<6xf32> -> tensor<6xf32>
  %4 = dsc.mul %k, %3 : tensor<f32>, tensor<6xf32> -> tensor<6xf32>
  %5 = dsc.tanh %4 : tensor<6xf32>
  %6 = dsc.add %one, %5 : tensor<f32>, tensor<6xf32> -> tensor<6xf32>
  %7 = dsc.mul %x, %6 : tensor<6xf32>, tensor<6xf32> -> tensor<6xf32>
  %8 = dsc.mul %half, %7 : tensor<f32>, tensor<6xf32> -> tensor<6xf32>
  return %8, %5 : tensor<6xf32>, tensor<6xf32>
}
