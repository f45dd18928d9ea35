// RUN: dsc-opt %s --split-input-file --dsc-multi-tensor-adamw | FileCheck %s
// With min-group=1 (dsc compile --offload-optimizer cpu) the lone adamw of
// the first case is a group of its own too, its grad unscaled (a splat 1).
// RUN: dsc-opt %s --split-input-file --dsc-multi-tensor-adamw=min-group=1 | FileCheck %s --check-prefix=LONE
// LONE-LABEL: func.func @train_step
// LONE: dsc.adamw_multi {{.*}}, scale %arg18 after %{{[^,]*}}, (%arg0,
// LONE: %[[S1:.*]] = dsc.constant dense<1.000000e+00> : tensor<f32>
// LONE-NEXT: %[[D:.*]]:3 = dsc.adamw_multi %arg12, %arg13, %arg14, %arg15, %arg20, %arg17, scale %[[S1]] after %[[S1]], (%arg19, %arg19, %arg19, %arg19)
// LONE-NOT: dsc.adamw %
// LONE: return {{.*}}, %[[D]]#0 :

// Three parameters with the same hyperparameters, their grads scaled by
// one scalar (the loss normalization): one dsc.adamw_multi with the scale
// folded in; the muls go. A fourth with no weight decay (its own
// weight_decay operand) stays apart.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: dsc.mul
// CHECK: %[[M:.*]]:9 = dsc.adamw_multi %arg12, %arg13, %arg14, %arg15, %arg16, %arg17, scale %arg18 after %{{[^,]*}}, (%arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8, %arg9, %arg10, %arg11)
// CHECK: dsc.adamw %arg19
// CHECK: return %[[M]]#0, %[[M]]#1, %[[M]]#2, %[[M]]#3, %[[M]]#4, %[[M]]#5, %[[M]]#6, %[[M]]#7, %[[M]]#8
func.func @train_step(%p0: tensor<4xf32>, %p1: tensor<2x3xf32>, %p2: tensor<5xf32>,
                      %g0: tensor<4xf32>, %g1: tensor<2x3xf32>, %g2: tensor<5xf32>,
                      %m0: tensor<4xf32>, %m1: tensor<2x3xf32>, %m2: tensor<5xf32>,
                      %v0: tensor<4xf32>, %v1: tensor<2x3xf32>, %v2: tensor<5xf32>,
                      %lr: tensor<f32>, %b1: tensor<f32>, %b2: tensor<f32>, %eps: tensor<f32>,
                      %wd: tensor<f32>, %step: tensor<i64>, %scale: tensor<f32>,
                      %p3: tensor<3xf32>, %wd0: tensor<f32>)
    -> (tensor<4xf32>, tensor<2x3xf32>, tensor<5xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<5xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<5xf32>, tensor<3xf32>) {
  %s0 = dsc.mul %g0, %scale : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  %s1 = dsc.mul %g1, %scale : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
  %s2 = dsc.mul %scale, %g2 : tensor<f32>, tensor<5xf32> -> tensor<5xf32>
  %a:3 = dsc.adamw %p0, %s0, %m0, %v0, %lr, %b1, %b2, %eps, %wd, %step : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %b:3 = dsc.adamw %p1, %s1, %m1, %v1, %lr, %b1, %b2, %eps, %wd, %step : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %c:3 = dsc.adamw %p2, %s2, %m2, %v2, %lr, %b1, %b2, %eps, %wd, %step : tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %d:3 = dsc.adamw %p3, %p3, %p3, %p3, %lr, %b1, %b2, %eps, %wd0, %step : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  return %a#0, %b#0, %c#0, %a#1, %b#1, %c#1, %a#2, %b#2, %c#2, %d#0 : tensor<4xf32>, tensor<2x3xf32>, tensor<5xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<5xf32>, tensor<4xf32>, tensor<2x3xf32>, tensor<5xf32>, tensor<3xf32>
}

// -----

// Unscaled grads: a splat 1 scale. A parameter whose new value is read
// before the last adamw (here by the second's grad) runs on its own.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[A:[a-z_0-9]+]], {{.*}} = dsc.adamw %arg0,
// CHECK: %[[ONE:.*]] = dsc.constant dense<1.000000e+00> : tensor<f32>
// CHECK: dsc.adamw_multi {{.*}}, scale %[[ONE]] after %[[ONE]], (%arg1, %arg2, %[[A]], %arg1
func.func @train_step(%p0: tensor<4xf32>, %p1: tensor<4xf32>, %p2: tensor<4xf32>,
                      %lr: tensor<f32>, %step: tensor<i64>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %a:3 = dsc.adamw %p0, %p0, %p0, %p0, %lr, %lr, %lr, %lr, %lr, %step : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %b:3 = dsc.adamw %p1, %a#0, %p1, %p1, %lr, %lr, %lr, %lr, %lr, %step : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %c:3 = dsc.adamw %p2, %p1, %p2, %p2, %lr, %lr, %lr, %lr, %lr, %step : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  return %a#0, %b#0, %c#0 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Grads scaled twice, the loss normalizer (%inv) under the clip
// coefficient (%coef), as dsc-optimizer writes them for a loss with
// ignored labels once canonicalization has folded the normalizer into the
// sum of squares: both scales fold (`scale %coef after %inv`), the muls go, and the
// kernel reads the unnormalized grads. A grad whose normalized value is
// also read elsewhere (%r1, returned) keeps its normalizer's mul and only
// the clip may fold (its group differs: alone, it stays a dsc.adamw unless
// min-group=1).
// CHECK-LABEL: func.func @train_step
// CHECK: %[[N1:.*]] = dsc.mul %arg4, %arg10
// CHECK: %[[C1:.*]] = dsc.mul %[[N1]], %arg11
// CHECK-NOT: dsc.mul
// CHECK: %[[M:.*]]:6 = dsc.adamw_multi %arg6, %arg7, %arg7, %arg7, %arg7, %arg8, scale %arg11 after %arg10, (%arg0, %arg1, %arg3, %arg5, %arg0, %arg1, %arg0, %arg1)
// CHECK: %[[L:[a-z_0-9]+]], {{.*}} = dsc.adamw %arg2, %[[C1]],
// CHECK: return %[[M]]#0, %[[M]]#1, %[[L]], %[[N1]]
// LONE-LABEL: func.func @train_step
// LONE: %[[N1:.*]] = dsc.mul %arg4, %arg10
// LONE-NOT: dsc.mul
// LONE: dsc.adamw_multi {{.*}} scale %arg11 after %arg10, (%arg0, %arg1, %arg3, %arg5,
// LONE: dsc.adamw_multi {{.*}} scale %arg11 after %{{[^,]*}}, (%arg2, %[[N1]],
func.func @train_step(%p0: tensor<4xf32>, %p1: tensor<2x3xf32>, %p2: tensor<5xf32>,
                      %g0: tensor<4xf32>, %g2: tensor<5xf32>, %g1: tensor<2x3xf32>,
                      %lr: tensor<f32>, %h: tensor<f32>, %step: tensor<i64>,
                      %unused: tensor<f32>, %inv: tensor<f32>, %coef: tensor<f32>)
    -> (tensor<4xf32>, tensor<2x3xf32>, tensor<5xf32>, tensor<5xf32>) {
  %n0 = dsc.mul %g0, %inv : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  %c0 = dsc.mul %n0, %coef : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  %n1 = dsc.mul %inv, %g1 : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
  %c1 = dsc.mul %coef, %n1 : tensor<f32>, tensor<2x3xf32> -> tensor<2x3xf32>
  %r1 = dsc.mul %g2, %inv : tensor<5xf32>, tensor<f32> -> tensor<5xf32>
  %c2 = dsc.mul %r1, %coef : tensor<5xf32>, tensor<f32> -> tensor<5xf32>
  %a:3 = dsc.adamw %p0, %c0, %p0, %p0, %lr, %h, %h, %h, %h, %step : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %b:3 = dsc.adamw %p1, %c1, %p1, %p1, %lr, %h, %h, %h, %h, %step : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %c:3 = dsc.adamw %p2, %c2, %p2, %p2, %lr, %h, %h, %h, %h, %step : tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  return %a#0, %b#0, %c#0, %r1 : tensor<4xf32>, tensor<2x3xf32>, tensor<5xf32>, tensor<5xf32>
}

// -----

// @train_step returns its gradients normalized by one scalar (the loss
// normalizer, 1 / label count): it returns them unnormalized and the
// scalar as {dsc.grad_normalizer} (the program multiplies them when it
// reports gradients); the norm reads them with that scale, and the AdamW
// kernel folds it under the clip coefficient: no mul is left.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: {dsc.grad = "a"}, tensor<2x3xf32> {dsc.grad = "b"}, tensor<f32> {dsc.grad_normalizer})
// CHECK-NOT: dsc.mul
// CHECK: %[[S:.*]] = dsc.sum_squares scale %arg7, (%arg2, %arg3)
// CHECK-NOT: dsc.mul
// CHECK: %[[M:.*]]:6 = dsc.adamw_multi {{.*}}, scale %arg8 after %arg7, (%arg0, %arg1, %arg2, %arg3,
// CHECK: return %[[S]], %[[M]]#0, %[[M]]#1, %arg2, %arg3, %arg7
func.func @train_step(%p0: tensor<4xf32>, %p1: tensor<2x3xf32>, %g0: tensor<4xf32>, %g1: tensor<2x3xf32>,
                      %lr: tensor<f32>, %h: tensor<f32>, %step: tensor<i64>,
                      %inv: tensor<f32>, %coef: tensor<f32>)
    -> (tensor<f32>, tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32> {dsc.grad = "a"}, tensor<2x3xf32> {dsc.grad = "b"}) {
  %n0 = dsc.mul %g0, %inv : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  %n1 = dsc.mul %g1, %inv : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
  %one = dsc.constant dense<1.0> : tensor<f32>
  %ss = dsc.sum_squares scale %one, (%n0, %n1) : tensor<f32>, (tensor<4xf32>, tensor<2x3xf32>) -> tensor<f32>
  %c0 = dsc.mul %n0, %coef : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  %c1 = dsc.mul %n1, %coef : tensor<2x3xf32>, tensor<f32> -> tensor<2x3xf32>
  %a:3 = dsc.adamw %p0, %c0, %p0, %p0, %lr, %h, %h, %h, %h, %step : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %b:3 = dsc.adamw %p1, %c1, %p1, %p1, %lr, %h, %h, %h, %h, %step : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  return %ss, %a#0, %b#0, %n0, %n1 : tensor<f32>, tensor<4xf32>, tensor<2x3xf32>, tensor<4xf32>, tensor<2x3xf32>
}
