// RUN: split-file %s %t
// RUN: %dsc-opt %t/valid.mlir --dsc-verify-static | FileCheck %t/valid.mlir
// RUN: %dsc-opt %t/invalid.mlir -split-input-file --dsc-verify-static -verify-diagnostics
// RUN: %dsc-opt %t/no_loss.mlir --dsc-verify-static="require-loss=false" | FileCheck %t/no_loss.mlir
// RUN: not %dsc-opt %t/no_loss.mlir --dsc-verify-static 2>&1 | FileCheck %t/no_loss.mlir --check-prefix=REQUIRED

// dsc-verify-static checks the importer's promises and changes nothing.

//--- valid.mlir

// CHECK-LABEL: func.func @forward
// CHECK-SAME: {dsc.param = "w"}
// CHECK-SAME: {dsc.input = "x"}
// CHECK-SAME: {dsc.buffer = "mask"}
// CHECK: dsc.matmul
// CHECK: dsc.mul
// CHECK: dsc.reduce_mean
// CHECK: return
func.func @forward(%w: tensor<4x4xf32> {dsc.param = "w"},
                   %x: tensor<2x4xf32> {dsc.input = "x"},
                   %m: tensor<4xf32> {dsc.buffer = "mask"})
    -> (tensor<f32> {dsc.output = "loss"}, tensor<2x4xf32> {dsc.output = "y"}) {
  %0 = dsc.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %1 = dsc.mul %0, %m : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %2 = dsc.reduce_mean %1 {axes = array<i64: 0, 1>, keepdims = false}
      : tensor<2x4xf32> -> tensor<f32>
  return %2, %1 : tensor<f32>, tensor<2x4xf32>
}

// Only @forward must return a loss.
// CHECK-LABEL: func.func @helper
// CHECK: dsc.relu
func.func @helper(%x: tensor<2x4xf32> {dsc.input = "x"}) -> tensor<2x4xf32> {
  %0 = dsc.relu %x : tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

//--- invalid.mlir

func.func @forward(%x: tensor<2xf32> {dsc.input = "x"}) -> tensor<f32> {
  // expected-error @below {{op outside the dsc dialect in a dsc module: arith.constant}}
  %0 = arith.constant dense<1.0> : tensor<2xf32>
  %1 = dsc.mul %x, %0 : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
  %2 = dsc.reduce_sum %1 {axes = array<i64: 0>, keepdims = false} : tensor<2xf32> -> tensor<f32>
  return %2 : tensor<f32>
}

// -----

func.func @shape_arithmetic(%x: tensor<2xf32> {dsc.input = "x"}) {
  // expected-error @below {{op outside the dsc dialect in a dsc module: arith.constant}}
  // expected-error @below {{result is not a tensor of static shape: 'index'}}
  %0 = arith.constant 2 : index
  return
}

// -----

// expected-error @below {{argument #0 is not a static tensor}}
func.func @dynamic_argument(%x: tensor<?x4xf32> {dsc.input = "x"}) {
  return
}

// -----

// expected-error @below {{argument #1 has none of dsc.param, dsc.input, dsc.buffer}}
func.func @unlabelled_argument(%w: tensor<4xf32> {dsc.param = "w"},
                               %x: tensor<4xf32>) {
  return
}

// -----

// An argument can fail both checks.
// expected-error @below {{argument #0 is not a static tensor}}
// expected-error @below {{argument #0 has none of dsc.param, dsc.input, dsc.buffer}}
func.func @memref_argument(%m: memref<4xf32>) {
  return
}

// -----

// expected-error @below {{@forward must return the scalar loss first}}
func.func @forward(%x: tensor<2xf32> {dsc.input = "x"}) -> (tensor<2xf32>, tensor<f32>) {
  %0 = dsc.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : tensor<2xf32> -> tensor<f32>
  return %x, %0 : tensor<2xf32>, tensor<f32>
}

// -----

// expected-error @below {{@forward must return the scalar loss first}}
func.func @forward(%x: tensor<2xf32> {dsc.input = "x"}) {
  return
}

//--- no_loss.mlir

// An inference-only module: with require-loss=false, @forward may return
// anything.
// CHECK-LABEL: func.func @forward
// CHECK: dsc.softmax
// REQUIRED: error: @forward must return the scalar loss first
func.func @forward(%x: tensor<2x4xf32> {dsc.input = "x"}) -> tensor<2x4xf32> {
  %0 = dsc.softmax %x {axis = -1 : i64} : tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}
