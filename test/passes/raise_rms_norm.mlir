// RUN: dsc-opt %s --split-input-file --dsc-raise-rms-norm | FileCheck %s

// HF's LlamaRMSNorm as torch.onnx.export writes it: pow, reduce_mean,
// add eps, sqrt, 1 / s, x * r, w * n. One dsc.layer_norm {rms}, the
// formula gone; x's other reader (the residual) keeps it.
// CHECK-LABEL: func.func @llama
// CHECK-NEXT: %[[N:.*]] = dsc.layer_norm %arg0, %arg1 {axis = 2 : i64, epsilon = {{9.99999[0-9]*E-7}} : f64, rms} : tensor<2x3x8xf32>, tensor<8xf32> -> tensor<2x3x8xf32>
// CHECK-NEXT: %[[R:.*]] = dsc.add %arg0, %[[N]]
// CHECK-NEXT: return %[[R]]
func.func @llama(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>) -> tensor<2x3x8xf32> {
  %one = dsc.constant dense<1.0> : tensor<f32>
  %two = dsc.constant dense<2.0> : tensor<f32>
  %eps = dsc.constant dense<1.0e-6> : tensor<f32>
  %q = dsc.pow %x, %two : tensor<2x3x8xf32>, tensor<f32> -> tensor<2x3x8xf32>
  %m = dsc.reduce_mean %q {axes = array<i64: 2>} : tensor<2x3x8xf32> -> tensor<2x3x1xf32>
  %t = dsc.add %m, %eps : tensor<2x3x1xf32>, tensor<f32> -> tensor<2x3x1xf32>
  %s = dsc.sqrt %t : tensor<2x3x1xf32>
  %r = dsc.div %one, %s : tensor<f32>, tensor<2x3x1xf32> -> tensor<2x3x1xf32>
  %n = dsc.mul %x, %r : tensor<2x3x8xf32>, tensor<2x3x1xf32> -> tensor<2x3x8xf32>
  %y = dsc.mul %w, %n : tensor<8xf32>, tensor<2x3x8xf32> -> tensor<2x3x8xf32>
  %z = dsc.add %x, %y : tensor<2x3x8xf32>, tensor<2x3x8xf32> -> tensor<2x3x8xf32>
  return %z : tensor<2x3x8xf32>
}

// -----

// Other spellings: x * x, eps + mean, reciprocal, the weight on the right.
// CHECK-LABEL: func.func @spelled_otherwise
// CHECK-NEXT: dsc.layer_norm %arg0, %arg1 {axis = 1 : i64, epsilon = {{[0-9.]+E-[56]}} : f64, rms}
// CHECK-NEXT: return
func.func @spelled_otherwise(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %eps = dsc.constant dense<1.0e-5> : tensor<f32>
  %q = dsc.mul %x, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %m = dsc.reduce_mean %q {axes = array<i64: 1>} : tensor<4x8xf32> -> tensor<4x1xf32>
  %t = dsc.add %eps, %m : tensor<f32>, tensor<4x1xf32> -> tensor<4x1xf32>
  %s = dsc.sqrt %t : tensor<4x1xf32>
  %r = dsc.reciprocal %s : tensor<4x1xf32>
  %n = dsc.mul %r, %x : tensor<4x1xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %y = dsc.mul %n, %w : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// x / s directly.
// CHECK-LABEL: func.func @divided
// CHECK-NEXT: dsc.layer_norm %arg0, %arg1 {{.*}}rms}
// CHECK-NEXT: return
func.func @divided(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %two = dsc.constant dense<2.0> : tensor<f32>
  %eps = dsc.constant dense<1.0e-5> : tensor<f32>
  %q = dsc.pow %x, %two : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %m = dsc.reduce_mean %q {axes = array<i64: 1>} : tensor<4x8xf32> -> tensor<4x1xf32>
  %t = dsc.add %m, %eps : tensor<4x1xf32>, tensor<f32> -> tensor<4x1xf32>
  %s = dsc.sqrt %t : tensor<4x1xf32>
  %n = dsc.div %x, %s : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
  %y = dsc.mul %w, %n : tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Left alone: the mean over another axis than the last, a square of
// another value than the one normalized, an intermediate read twice (the
// statistics used elsewhere), a scale of the wrong shape.
// CHECK-LABEL: func.func @not_rms
// CHECK-NOT: rms}
// CHECK: return
func.func @not_rms(%x: tensor<4x8xf32>, %x2: tensor<4x8xf32>, %w: tensor<8xf32>, %w4: tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x8xf32>) {
  %two = dsc.constant dense<2.0> : tensor<f32>
  %eps = dsc.constant dense<1.0e-5> : tensor<f32>
  %q0 = dsc.pow %x, %two : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %m0 = dsc.reduce_mean %q0 {axes = array<i64: 0>} : tensor<4x8xf32> -> tensor<1x8xf32>
  %t0 = dsc.add %m0, %eps : tensor<1x8xf32>, tensor<f32> -> tensor<1x8xf32>
  %s0 = dsc.sqrt %t0 : tensor<1x8xf32>
  %n0 = dsc.div %x, %s0 : tensor<4x8xf32>, tensor<1x8xf32> -> tensor<4x8xf32>
  %y0 = dsc.mul %w, %n0 : tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %q1 = dsc.pow %x2, %two : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %m1 = dsc.reduce_mean %q1 {axes = array<i64: 1>} : tensor<4x8xf32> -> tensor<4x1xf32>
  %t1 = dsc.add %m1, %eps : tensor<4x1xf32>, tensor<f32> -> tensor<4x1xf32>
  %s1 = dsc.sqrt %t1 : tensor<4x1xf32>
  %n1 = dsc.div %x, %s1 : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
  %y1 = dsc.mul %w, %n1 : tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %q2 = dsc.pow %x, %two : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %m2 = dsc.reduce_mean %q2 {axes = array<i64: 1>} : tensor<4x8xf32> -> tensor<4x1xf32>
  %t2 = dsc.add %m2, %eps : tensor<4x1xf32>, tensor<f32> -> tensor<4x1xf32>
  %s2 = dsc.sqrt %t2 : tensor<4x1xf32>
  %n2 = dsc.div %x, %s2 : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
  %y2 = dsc.mul %w, %n2 : tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %q3 = dsc.pow %x, %two : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %m3 = dsc.reduce_mean %q3 {axes = array<i64: 1>} : tensor<4x8xf32> -> tensor<4x1xf32>
  %t3 = dsc.add %m3, %eps : tensor<4x1xf32>, tensor<f32> -> tensor<4x1xf32>
  %s3 = dsc.sqrt %t3 : tensor<4x1xf32>
  %n3 = dsc.div %x, %s3 : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
  %y3 = dsc.mul %w4, %n3 : tensor<4x1xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return %y0, %y1, %y2, %m2, %y3 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x8xf32>
}
