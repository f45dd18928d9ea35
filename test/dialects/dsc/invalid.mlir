// RUN: %dsc-opt %s -split-input-file -verify-diagnostics

// One case per diagnostic of the dsc ops' shape inference
// (dialects/dsc/IR/ShapeInference.cpp). Ops whose assembly format omits the
// result types infer them while parsing, so their errors are parse errors;
// the others are checked by the InferTypeOpInterface verifier, which adds
// "failed to infer returned types".

//===----------------------------------------------------------------------===//
// Result types that differ from the inferred ones; ODS constraints
//===----------------------------------------------------------------------===//

func.func @result_type_mismatch(%a: tensor<4x3xf32>, %b: tensor<3x5xf32>) {
  // expected-error @below {{'dsc.matmul' op inferred type(s) 'tensor<4x5xf32>' are incompatible with return type(s) of operation 'tensor<4x4xf32>'}}
  // expected-error @below {{'dsc.matmul' op failed to infer returned types}}
  %0 = dsc.matmul %a, %b : tensor<4x3xf32>, tensor<3x5xf32> -> tensor<4x4xf32>
  return
}

// -----

func.func @result_element_type_mismatch(%a: tensor<2x3xf32>) {
  // expected-error @below {{'dsc.add' op inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<2x3xf16>'}}
  // expected-error @below {{'dsc.add' op failed to infer returned types}}
  %0 = dsc.add %a, %a : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf16>
  return
}

// -----

func.func @split_result_count(%x: tensor<4x10xf32>) {
  // expected-error @below {{'dsc.split' op inferred type(s) 'tensor<4x3xf32>', 'tensor<4x7xf32>' are incompatible with return type(s) of operation 'tensor<4x10xf32>'}}
  // expected-error @below {{'dsc.split' op failed to infer returned types}}
  %0 = dsc.split %x {axis = 1 : i64, sizes = array<i64: 3, 7>} : tensor<4x10xf32> -> tensor<4x10xf32>
  return
}

// -----

func.func @dynamic_shape(%a: tensor<?x3xf32>) {
  // expected-error @below {{'dsc.exp' op operand #0 must be statically shaped tensor of floating-point values}}
  %0 = "dsc.exp"(%a) : (tensor<?x3xf32>) -> tensor<?x3xf32>
  return
}

// -----

func.func @float_op_on_integers(%a: tensor<2xi32>) {
  // expected-error @below {{'dsc.matmul' op operand #0 must be statically shaped tensor of floating-point values}}
  %0 = dsc.matmul %a, %a : tensor<2xi32>, tensor<2xi32> -> tensor<i32>
  return
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// -----

func.func @broadcast_failure(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) {
  // expected-error @below {{operand shapes [2,3] and [4,3] do not broadcast}}
  // expected-error @below {{'dsc.mul' op failed to infer returned types}}
  %0 = dsc.mul %a, %b : tensor<2x3xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
  return
}

// -----

func.func @where_broadcast_failure(%c: tensor<5xi1>, %x: tensor<2x3xf32>) {
  // expected-error @below {{operand shapes [5] and [2,3] do not broadcast}}
  // expected-error @below {{'dsc.where' op failed to infer returned types}}
  %0 = dsc.where %c, %x, %x : tensor<5xi1>, tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  return
}

// -----

func.func @element_types_differ(%a: tensor<3xf32>, %b: tensor<3xf16>) {
  // expected-error @below {{element types differ: f32 vs f16}}
  // expected-error @below {{'dsc.sub' op failed to infer returned types}}
  %0 = dsc.sub %a, %b : tensor<3xf32>, tensor<3xf16> -> tensor<3xf32>
  return
}

//===----------------------------------------------------------------------===//
// MatMul and Gemm
//===----------------------------------------------------------------------===//

// -----

func.func @matmul_scalar(%a: tensor<f32>, %b: tensor<3xf32>) {
  // expected-error @below {{matmul operands must have rank >= 1}}
  // expected-error @below {{'dsc.matmul' op failed to infer returned types}}
  %0 = dsc.matmul %a, %b : tensor<f32>, tensor<3xf32> -> tensor<f32>
  return
}

// -----

func.func @matmul_contracting_mismatch(%a: tensor<4x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @below {{contracting dims differ: [4,3] x [4,5]}}
  // expected-error @below {{'dsc.matmul' op failed to infer returned types}}
  %0 = dsc.matmul %a, %b : tensor<4x3xf32>, tensor<4x5xf32> -> tensor<4x5xf32>
  return
}

// -----

func.func @matmul_batch_mismatch(%a: tensor<2x4x3xf32>, %b: tensor<3x3x5xf32>) {
  // expected-error @below {{batch dims do not broadcast: [2,4,3] x [3,3,5]}}
  // expected-error @below {{'dsc.matmul' op failed to infer returned types}}
  %0 = dsc.matmul %a, %b : tensor<2x4x3xf32>, tensor<3x3x5xf32> -> tensor<2x4x5xf32>
  return
}

// -----

func.func @gemm_not_2d(%a: tensor<2x4x3xf32>, %b: tensor<3x5xf32>) {
  // expected-error @below {{gemm operands A and B must be 2-D}}
  // expected-error @below {{'dsc.gemm' op failed to infer returned types}}
  %0 = dsc.gemm %a, %b : tensor<2x4x3xf32>, tensor<3x5xf32> -> tensor<4x5xf32>
  return
}

// -----

func.func @gemm_contracting_mismatch(%a: tensor<4x3xf32>, %b: tensor<3x5xf32>) {
  // expected-error @below {{gemm contracting dims differ: 4 vs 3}}
  // expected-error @below {{'dsc.gemm' op failed to infer returned types}}
  %0 = dsc.gemm %a, %b {trans_a = true} : tensor<4x3xf32>, tensor<3x5xf32> -> tensor<3x5xf32>
  return
}

// -----

func.func @gemm_bad_c(%a: tensor<4x3xf32>, %b: tensor<3x5xf32>, %c: tensor<4x1x5xf32>) {
  // expected-error @below {{gemm C does not broadcast to [4,5]}}
  // expected-error @below {{'dsc.gemm' op failed to infer returned types}}
  %0 = dsc.gemm %a, %b, %c : tensor<4x3xf32>, tensor<3x5xf32>, tensor<4x1x5xf32> -> tensor<4x5xf32>
  return
}

//===----------------------------------------------------------------------===//
// Conv and pooling
//===----------------------------------------------------------------------===//

// -----

func.func @conv_rank_mismatch(%x: tensor<1x4x9x9xf32>, %w: tensor<8x4x3xf32>) {
  // expected-error @below {{conv expects input [N, C, spatial...] and weight [M, C/group, kernel...] of the same rank}}
  // expected-error @below {{'dsc.conv' op failed to infer returned types}}
  %0 = dsc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>}
      : tensor<1x4x9x9xf32>, tensor<8x4x3xf32> -> tensor<1x8x7x7xf32>
  return
}

// -----

func.func @conv_window_attributes(%x: tensor<1x4x9x9xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @below {{expected 2 strides, 2 dilations and 4 pads for 2 spatial dims}}
  // expected-error @below {{'dsc.conv' op failed to infer returned types}}
  %0 = dsc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1, 1>}
      : tensor<1x4x9x9xf32>, tensor<8x4x3x3xf32> -> tensor<1x8x7x7xf32>
  return
}

// -----

func.func @conv_channel_mismatch(%x: tensor<1x4x9x9xf32>, %w: tensor<8x3x3x3xf32>) {
  // expected-error @below {{channels do not match: input has 4, weight expects 3 x group 1}}
  // expected-error @below {{'dsc.conv' op failed to infer returned types}}
  %0 = dsc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>}
      : tensor<1x4x9x9xf32>, tensor<8x3x3x3xf32> -> tensor<1x8x7x7xf32>
  return
}

// -----

func.func @conv_group_overflows(%x: tensor<1x8x9x9xf32>, %w: tensor<8x8x3x3xf32>) {
  // channels = 8 x 2^62 overflows int64 (found by dsc-fuzz): an error, not UB.
  // expected-error @below {{channels do not match: input has 8, weight expects 8 x group 4611686018427387904}}
  // expected-error @below {{'dsc.conv' op failed to infer returned types}}
  %0 = dsc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 4611686018427387904 : i64}
      : tensor<1x8x9x9xf32>, tensor<8x8x3x3xf32> -> tensor<1x8x7x7xf32>
  return
}

// -----

func.func @conv_group_does_not_divide_filters(%x: tensor<1x4x9x9xf32>, %w: tensor<5x2x3x3xf32>) {
  // expected-error @below {{channels do not match: input has 4, weight expects 2 x group 2}}
  // expected-error @below {{'dsc.conv' op failed to infer returned types}}
  %0 = dsc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, group = 2 : i64}
      : tensor<1x4x9x9xf32>, tensor<5x2x3x3xf32> -> tensor<1x5x7x7xf32>
  return
}

// -----

func.func @conv_bad_bias(%x: tensor<1x4x9x9xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<4xf32>) {
  // expected-error @below {{conv bias must have shape [M]}}
  // expected-error @below {{'dsc.conv' op failed to infer returned types}}
  %0 = dsc.conv %x, %w, %b {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>}
      : tensor<1x4x9x9xf32>, tensor<8x4x3x3xf32>, tensor<4xf32> -> tensor<1x8x7x7xf32>
  return
}

// -----

func.func @conv_kernel_too_large(%x: tensor<1x4x9x2xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @below {{kernel larger than padded input in spatial dim 1}}
  // expected-error @below {{'dsc.conv' op failed to infer returned types}}
  %0 = dsc.conv %x, %w {strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>}
      : tensor<1x4x9x2xf32>, tensor<8x4x3x3xf32> -> tensor<1x8x7x1xf32>
  return
}

// -----

func.func @pool_rank(%x: tensor<4x9xf32>) {
  // expected-error @below {{pooling expects input [N, C, spatial...]}}
  // expected-error @below {{'dsc.max_pool' op failed to infer returned types}}
  %0 = dsc.max_pool %x {kernel_shape = array<i64: 2>, strides = array<i64: 1>, pads = array<i64: 0, 0>, dilations = array<i64: 1>}
      : tensor<4x9xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @pool_kernel_dims(%x: tensor<1x1x9x9xf32>) {
  // expected-error @below {{expected 2 kernel dims}}
  // expected-error @below {{'dsc.avg_pool' op failed to infer returned types}}
  %0 = dsc.avg_pool %x {kernel_shape = array<i64: 2>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>}
      : tensor<1x1x9x9xf32> -> tensor<1x1x8x8xf32>
  return
}

// -----

func.func @pool_window_attributes(%x: tensor<1x1x9x9xf32>) {
  // expected-error @below {{expected 2 strides, 2 dilations and 4 pads for 2 spatial dims}}
  // expected-error @below {{'dsc.max_pool' op failed to infer returned types}}
  %0 = dsc.max_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1>}
      : tensor<1x1x9x9xf32> -> tensor<1x1x8x8xf32>
  return
}

// -----

func.func @pool_window_too_large(%x: tensor<1x1x9x2xf32>) {
  // expected-error @below {{window larger than padded input in spatial dim 1}}
  // expected-error @below {{'dsc.max_pool' op failed to infer returned types}}
  %0 = dsc.max_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>}
      : tensor<1x1x9x2xf32> -> tensor<1x1x7x1xf32>
  return
}

// -----

func.func @global_pool_rank(%x: tensor<4x9xf32>) {
  // expected-error @below {{global pooling expects input [N, C, spatial...]}}
  // expected-error @below {{'dsc.global_avg_pool' op failed to infer returned types}}
  %0 = dsc.global_avg_pool %x : tensor<4x9xf32> -> tensor<4x1xf32>
  return
}

//===----------------------------------------------------------------------===//
// Normalization, softmax, losses, dropout
//===----------------------------------------------------------------------===//

// -----

func.func @batch_norm_rank(%x: tensor<4xf32>, %p: tensor<4xf32>) {
  // expected-error @below {{batch norm expects input [N, C, ...]}}
  %0 = dsc.batch_norm %x, %p, %p, %p, %p {epsilon = 1.0e-5 : f64}
      : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @batch_norm_param_shape(%x: tensor<2x3x4x4xf32>, %p: tensor<3xf32>, %q: tensor<4xf32>) {
  // expected-error @below {{batch norm scale, bias, mean and variance must have shape [3]}}
  %0:3 = dsc.batch_norm_train %x, %p, %p, %p, %q {epsilon = 1.0e-5 : f64, momentum = 0.9 : f64}
      : tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<4xf32>
  return
}

// -----

func.func @batch_norm_param_type(%x: tensor<2x3x4x4xf32>, %p: tensor<3xf32>, %v: tensor<3xbf16>) {
  // expected-error @below {{batch norm scale, bias, mean and variance must have the input's element type}}
  %0:3 = dsc.batch_norm_train %x, %p, %p, %p, %v {epsilon = 1.0e-5 : f64, momentum = 0.9 : f64}
      : tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xbf16>
  return
}

// -----

func.func @layer_norm_axis(%x: tensor<2x8xf32>, %s: tensor<8xf32>) {
  // expected-error @below {{axis out of range}}
  // expected-error @below {{'dsc.layer_norm' op failed to infer returned types}}
  %0 = dsc.layer_norm %x, %s {axis = 2 : i64, epsilon = 1.0e-5 : f64}
      : tensor<2x8xf32>, tensor<8xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @layer_norm_scale_shape(%x: tensor<2x5x8xf32>, %s: tensor<5xf32>) {
  // expected-error @below {{layer norm scale and bias must broadcast to [8]}}
  // expected-error @below {{'dsc.layer_norm' op failed to infer returned types}}
  %0 = dsc.layer_norm %x, %s {axis = -1 : i64, epsilon = 1.0e-5 : f64}
      : tensor<2x5x8xf32>, tensor<5xf32> -> tensor<2x5x8xf32>
  return
}

// -----

func.func @softmax_axis(%x: tensor<2x8xf32>) {
  // expected-error @below {{softmax axis out of range}}
  %0 = dsc.softmax %x {axis = 2 : i64} : tensor<2x8xf32>
  return
}

// -----

func.func @log_softmax_axis(%x: tensor<2x8xf32>) {
  // expected-error @below {{log_softmax axis out of range}}
  %0 = dsc.log_softmax %x {axis = -3 : i64} : tensor<2x8xf32>
  return
}

// -----

func.func @loss_scores_rank(%s: tensor<10xf32>, %l: tensor<1xi64>) {
  // expected-error @below {{scores must have shape [N, C, d...]}}
  // expected-error @below {{'dsc.softmax_cross_entropy' op failed to infer returned types}}
  %0 = dsc.softmax_cross_entropy %s, %l {reduction = "mean"} : tensor<10xf32>, tensor<1xi64> -> tensor<f32>
  return
}

// -----

func.func @loss_label_shape(%s: tensor<4x10x7xf32>, %l: tensor<4xi64>) {
  // expected-error @below {{labels shape [4] does not match scores [4,10,7] (expected [4,7])}}
  // expected-error @below {{'dsc.softmax_cross_entropy' op failed to infer returned types}}
  %0 = dsc.softmax_cross_entropy %s, %l {reduction = "mean"} : tensor<4x10x7xf32>, tensor<4xi64> -> tensor<f32>
  return
}

// -----

func.func @loss_class_weights(%s: tensor<4x10xf32>, %l: tensor<4xi64>, %w: tensor<4xf32>) {
  // expected-error @below {{class weights must have shape [C]}}
  // expected-error @below {{'dsc.nll_loss' op failed to infer returned types}}
  %0 = dsc.nll_loss %s, %l, %w {reduction = "sum"} : tensor<4x10xf32>, tensor<4xi64>, tensor<4xf32> -> tensor<f32>
  return
}

// -----

func.func @loss_class_weights_type(%s: tensor<4x10xf32>, %l: tensor<4xi64>, %w: tensor<10xf16>) {
  // f32 scores weigh in f32 (found by dsc-fuzz: f16 weights crashed passes).
  // expected-error @below {{class weights must have the loss's element type}}
  // expected-error @below {{'dsc.softmax_cross_entropy' op failed to infer returned types}}
  %0 = dsc.softmax_cross_entropy %s, %l, %w {reduction = "mean"} : tensor<4x10xf32>, tensor<4xi64>, tensor<10xf16> -> tensor<f32>
  return
}

// -----

func.func @loss_bad_reduction(%s: tensor<4x10xf32>, %l: tensor<4xi64>) {
  // expected-error @below {{reduction must be 'mean', 'sum' or 'none', not 'average'}}
  // expected-error @below {{'dsc.nll_loss' op failed to infer returned types}}
  %0 = dsc.nll_loss %s, %l {reduction = "average"} : tensor<4x10xf32>, tensor<4xi64> -> tensor<f32>
  return
}

// -----

func.func @dropout_ratio(%x: tensor<2x3xf32>) {
  // expected-error @below {{dropout ratio must be in [0, 1), got 1}}
  %0:2 = dsc.dropout %x {ratio = 1.0 : f64} : tensor<2x3xf32>
  return
}

// -----

func.func @dropout_negative_ratio(%x: tensor<2x3xf32>) {
  // expected-error @below {{dropout ratio must be in [0, 1), got -0.1}}
  %0:2 = dsc.dropout %x {ratio = -0.1 : f64} : tensor<2x3xf32>
  return
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

// -----

func.func @reduce_axis_out_of_range(%x: tensor<2x3xf32>) {
  // expected-error @below {{reduction axis 2 out of range for rank 2 (axes are normalized)}}
  // expected-error @below {{'dsc.reduce_sum' op failed to infer returned types}}
  %0 = dsc.reduce_sum %x {axes = array<i64: 2>} : tensor<2x3xf32> -> tensor<2x3x1xf32>
  return
}

// -----

// Only a sum or mean of a 16-bit input may widen into f32, and only to f32.
func.func @reduce_max_widened(%x: tensor<2x3xbf16>) {
  // expected-error @below {{'dsc.reduce_max' op inferred type(s) 'tensor<2x1xbf16>' are incompatible with return type(s) of operation 'tensor<2x1xf32>'}}
  // expected-error @below {{'dsc.reduce_max' op failed to infer returned types}}
  %0 = dsc.reduce_max %x {axes = array<i64: 1>} : tensor<2x3xbf16> -> tensor<2x1xf32>
  return
}

// -----

func.func @reduce_sum_widened_to_f64(%x: tensor<2x3xbf16>) {
  // expected-error @below {{'dsc.reduce_sum' op inferred type(s) 'tensor<2x1xbf16>' are incompatible with return type(s) of operation 'tensor<2x1xf64>'}}
  // expected-error @below {{'dsc.reduce_sum' op failed to infer returned types}}
  %0 = dsc.reduce_sum %x {axes = array<i64: 1>} : tensor<2x3xbf16> -> tensor<2x1xf64>
  return
}

// -----

func.func @reduce_negative_axis(%x: tensor<2x3xf32>) {
  // expected-error @below {{reduction axis -1 out of range for rank 2 (axes are normalized)}}
  // expected-error @below {{'dsc.reduce_mean' op failed to infer returned types}}
  %0 = dsc.reduce_mean %x {axes = array<i64: -1>} : tensor<2x3xf32> -> tensor<2x1xf32>
  return
}

// -----

func.func @reduce_duplicate_axis(%x: tensor<2x3xf32>) {
  // expected-error @below {{duplicate reduction axis 1}}
  // expected-error @below {{'dsc.reduce_max' op failed to infer returned types}}
  %0 = dsc.reduce_max %x {axes = array<i64: 1, 1>} : tensor<2x3xf32> -> tensor<2x1xf32>
  return
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

// -----

func.func @reshape_element_count(%x: tensor<2x3xf32>) {
  // expected-error @below {{reshape of [2,3] to [4,2] changes the number of elements}}
  // expected-error @below {{'dsc.reshape' op failed to infer returned types}}
  %0 = dsc.reshape %x {shape = array<i64: 4, 2>} : tensor<2x3xf32> -> tensor<4x2xf32>
  return
}

// -----

func.func @reshape_unresolved(%x: tensor<2x3xf32>) {
  // expected-error @below {{reshape target [-1,3] must be fully resolved (no -1)}}
  // expected-error @below {{'dsc.reshape' op failed to infer returned types}}
  %0 = dsc.reshape %x {shape = array<i64: -1, 3>} : tensor<2x3xf32> -> tensor<2x3xf32>
  return
}

// -----

func.func @transpose_perm_length(%x: tensor<2x3x4xf32>) {
  // expected-error @below {{perm must have one entry per dim}}
  // expected-error @below {{'dsc.transpose' op failed to infer returned types}}
  %0 = dsc.transpose %x {perm = array<i64: 1, 0>} : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
  return
}

// -----

func.func @transpose_bad_perm(%x: tensor<2x3x4xf32>) {
  // expected-error @below {{perm [0,2,2] is not a permutation}}
  // expected-error @below {{'dsc.transpose' op failed to infer returned types}}
  %0 = dsc.transpose %x {perm = array<i64: 0, 2, 2>} : tensor<2x3x4xf32> -> tensor<2x4x4xf32>
  return
}

// -----

func.func @expand_mismatch(%x: tensor<3x2xf32>) {
  // expected-error @below {{cannot expand [3,2] to [3,4]}}
  // expected-error @below {{'dsc.expand' op failed to infer returned types}}
  %0 = dsc.expand %x {shape = array<i64: 3, 4>} : tensor<3x2xf32> -> tensor<3x4xf32>
  return
}

// -----

func.func @slice_attribute_lengths(%x: tensor<8x6xf32>) {
  // expected-error @below {{offsets, sizes and strides need one entry per dim}}
  // expected-error @below {{'dsc.slice' op failed to infer returned types}}
  %0 = dsc.slice %x {offsets = array<i64: 0>, sizes = array<i64: 2>, strides = array<i64: 1>}
      : tensor<8x6xf32> -> tensor<2x6xf32>
  return
}

// -----

func.func @slice_zero_stride(%x: tensor<8x6xf32>) {
  // expected-error @below {{bad slice size or zero stride in dim 1}}
  // expected-error @below {{'dsc.slice' op failed to infer returned types}}
  %0 = dsc.slice %x {offsets = array<i64: 0, 0>, sizes = array<i64: 2, 2>, strides = array<i64: 1, 0>}
      : tensor<8x6xf32> -> tensor<2x2xf32>
  return
}

// -----

func.func @slice_out_of_range(%x: tensor<8x6xf32>) {
  // expected-error @below {{slice reads outside dim 0 of size 8}}
  // expected-error @below {{'dsc.slice' op failed to infer returned types}}
  %0 = dsc.slice %x {offsets = array<i64: 6, 0>, sizes = array<i64: 2, 6>, strides = array<i64: 2, 1>}
      : tensor<8x6xf32> -> tensor<2x6xf32>
  return
}

// -----

func.func @slice_negative_stride_out_of_range(%x: tensor<8x6xf32>) {
  // expected-error @below {{slice reads outside dim 1 of size 6}}
  // expected-error @below {{'dsc.slice' op failed to infer returned types}}
  %0 = dsc.slice %x {offsets = array<i64: 0, 3>, sizes = array<i64: 8, 3>, strides = array<i64: 1, -2>}
      : tensor<8x6xf32> -> tensor<8x3xf32>
  return
}

// -----

func.func @concat_no_inputs() {
  // expected-error @below {{concat needs at least one input}}
  // expected-error @below {{'dsc.concat' op failed to infer returned types}}
  %0 = "dsc.concat"() {axis = 0 : i64} : () -> tensor<2xf32>
  return
}

// -----

func.func @concat_axis(%a: tensor<2x3xf32>) {
  // expected-error @below {{concat axis out of range}}
  // expected-error @below {{'dsc.concat' op failed to infer returned types}}
  %0 = dsc.concat %a, %a {axis = 2 : i64} : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x6xf32>
  return
}

// -----

func.func @concat_rank_mismatch(%a: tensor<2x3xf32>, %b: tensor<2x3x1xf32>) {
  // expected-error @below {{concat inputs must have one rank and element type}}
  // expected-error @below {{'dsc.concat' op failed to infer returned types}}
  %0 = dsc.concat %a, %b {axis = 1 : i64} : tensor<2x3xf32>, tensor<2x3x1xf32> -> tensor<2x6xf32>
  return
}

// -----

func.func @concat_shape_mismatch(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) {
  // expected-error @below {{concat inputs differ outside the axis: [2,3] vs [4,3]}}
  // expected-error @below {{'dsc.concat' op failed to infer returned types}}
  %0 = dsc.concat %a, %b {axis = 1 : i64} : tensor<2x3xf32>, tensor<4x3xf32> -> tensor<2x6xf32>
  return
}

// -----

func.func @split_axis(%x: tensor<4x10xf32>) {
  // expected-error @below {{split axis out of range}}
  // expected-error @below {{'dsc.split' op failed to infer returned types}}
  %0:2 = dsc.split %x {axis = 2 : i64, sizes = array<i64: 2, 2>} : tensor<4x10xf32> -> tensor<4x2xf32>, tensor<4x2xf32>
  return
}

// -----

func.func @split_negative_size(%x: tensor<4x10xf32>) {
  // expected-error @below {{negative split size}}
  // expected-error @below {{'dsc.split' op failed to infer returned types}}
  %0:2 = dsc.split %x {axis = 1 : i64, sizes = array<i64: 12, -2>} : tensor<4x10xf32> -> tensor<4x12xf32>, tensor<4x2xf32>
  return
}

// -----

func.func @concat_sizes_overflow(%x: tensor<4611686018427387904xi1>) {
  // expected-error @below {{concat: the inputs' sizes along the axis overflow int64 when summed}}
  // expected-error @below {{'dsc.concat' op failed to infer returned types}}
  %0 = dsc.concat %x, %x, %x {axis = 0 : i64} : tensor<4611686018427387904xi1>, tensor<4611686018427387904xi1>, tensor<4611686018427387904xi1> -> tensor<4xi1>
  return
}

// -----

func.func @split_sizes_overflow(%x: tensor<4x10xf32>) {
  // Sizes whose sum overflows (found by dsc-fuzz through SplitToSequence).
  // expected-error @below {{split sizes [9223372036854775807,3] overflow int64 when summed}}
  // expected-error @below {{'dsc.split' op failed to infer returned types}}
  %0:2 = dsc.split %x {axis = 1 : i64, sizes = array<i64: 9223372036854775807, 3>} : tensor<4x10xf32> -> tensor<4x9223372036854775807xf32>, tensor<4x3xf32>
  return
}

// -----

func.func @split_sizes(%x: tensor<4x10xf32>) {
  // expected-error @below {{split sizes [3,6] do not add up to dim 10}}
  // expected-error @below {{'dsc.split' op failed to infer returned types}}
  %0:2 = dsc.split %x {axis = 1 : i64, sizes = array<i64: 3, 6>} : tensor<4x10xf32> -> tensor<4x3xf32>, tensor<4x6xf32>
  return
}

// -----

func.func @gather_scalar_data(%d: tensor<f32>, %i: tensor<2xi64>) {
  // expected-error @below {{gather expects ranked data of rank >= 1 and indices}}
  // expected-error @below {{'dsc.gather' op failed to infer returned types}}
  %0 = dsc.gather %d, %i {axis = 0 : i64} : tensor<f32>, tensor<2xi64> -> tensor<2xf32>
  return
}

// -----

func.func @gather_axis(%d: tensor<10x4xf32>, %i: tensor<2xi64>) {
  // expected-error @below {{gather axis out of range}}
  // expected-error @below {{'dsc.gather' op failed to infer returned types}}
  %0 = dsc.gather %d, %i {axis = -3 : i64} : tensor<10x4xf32>, tensor<2xi64> -> tensor<2x4xf32>
  return
}

// -----

func.func @pad_length(%x: tensor<2x3xf32>) {
  // expected-error @below {{pads needs two entries per dim}}
  // expected-error @below {{'dsc.pad' op failed to infer returned types}}
  %0 = dsc.pad %x {pads = array<i64: 1, 1>} : tensor<2x3xf32> -> tensor<4x3xf32>
  return
}

// -----

func.func @pad_crops_below_zero(%x: tensor<2x3xf32>) {
  // expected-error @below {{padding crops dim 1 below zero}}
  // expected-error @below {{'dsc.pad' op failed to infer returned types}}
  %0 = dsc.pad %x {pads = array<i64: 0, -2, 0, -2>} : tensor<2x3xf32> -> tensor<2x0xf32>
  return
}

// -----

func.func @trilu_rank(%x: tensor<5xf32>) {
  // expected-error @below {{trilu expects rank >= 2}}
  %0 = dsc.trilu %x {upper = true} : tensor<5xf32>
  return
}

// -----

func.func @softmax_backward_types(%g: tensor<2x3xf32>, %y: tensor<2x4xf32>) {
  // expected-error @below {{softmax_backward: grad and output must have one type}}
  %0 = dsc.softmax_backward %g, %y {axis = -1 : i64} : tensor<2x3xf32>, tensor<2x4xf32>
  return
}

// -----

shard.grid @dsc_ranks(shape = 1x4)

func.func @collective_input_user(%s: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'dsc.collective_input' op result must be used only by shard.all_gather, shard.reduce_scatter or shard.all_reduce, not dsc.exp}}
  %i = dsc.collective_input %s : tensor<2xf32>
  %e = dsc.exp %i : tensor<2xf32>
  return %e : tensor<2xf32>
}

// -----

func.func @wait_not_of_a_collective(%s: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @below {{'dsc.wait' op input must be the result of shard.all_gather, shard.reduce_scatter or shard.all_reduce}}
  %w = dsc.wait %s : tensor<2xf32>
  return %w : tensor<2xf32>
}

// -----

func.func @release_nothing() {
  // expected-error @below {{'dsc.release' op must release at least one value}}
  "dsc.release"() : () -> ()
  return
}

// -----

// adamw_multi's optional compute copies are 16-bit, of their parameter's shape.
func.func @adamw_multi_copy_f32(%p: tensor<4xf32>, %s: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{compute copy 0 must be bf16 or f16 of its parameter's shape 'tensor<4xf32>', got 'tensor<4xf32>'}}
  %r:4 = dsc.adamw_multi %s, %s, %s, %s, %s, %t, scale %s after %s, (%p, %p, %p, %p) : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<f32>, (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @adamw_multi_copies_count(%p: tensor<4xf32>, %s: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{has 1 parameters: 3 results each, or 4 with compute copies; got 5}}
  %r:5 = dsc.adamw_multi %s, %s, %s, %s, %s, %t, scale %s after %s, (%p, %p, %p, %p) : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<f32>, (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xbf16>, tensor<4xbf16>
  return
}

// -----

func.func @rms_norm_with_bias(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{an RMS norm (rms) has no bias}}
  %y = dsc.layer_norm %x, %w, %w {axis = 1 : i64, epsilon = 1.0e-5 : f64, rms} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @matmul_narrowed(%x: tensor<2x3xf32>, %w: tensor<3x4xf32>) {
  // expected-error @below {{'dsc.matmul' op inferred type(s) 'tensor<2x4xf32>' are incompatible with return type(s) of operation 'tensor<2x4xbf16>'}}
  // expected-error @below {{'dsc.matmul' op failed to infer returned types}}
  %0 = dsc.matmul %x, %w : tensor<2x3xf32>, tensor<3x4xf32> -> tensor<2x4xbf16>
  return
}

// -----

func.func @sum_squares_mixed(%a: tensor<4xf32>, %b: tensor<4xf64>, %s: tensor<f32>) {
  // expected-error @below {{sum_squares' tensors must share one element type}}
  // expected-error @below {{'dsc.sum_squares' op failed to infer returned types}}
  %r = dsc.sum_squares scale %s, (%a, %b) : tensor<f32>, (tensor<4xf32>, tensor<4xf64>) -> tensor<f32>
  return
}

// -----

func.func @sum_squares_bf16(%a: tensor<4xbf16>, %s: tensor<f32>) {
  // expected-error @below {{sum_squares takes f32 or f64 tensors}}
  // expected-error @below {{'dsc.sum_squares' op failed to infer returned types}}
  %r = dsc.sum_squares scale %s, (%a) : tensor<f32>, (tensor<4xbf16>) -> tensor<f32>
  return
}

// -----

func.func @sum_squares_none(%s: tensor<f32>) {
  // expected-error @below {{sum_squares needs at least one tensor}}
  // expected-error @below {{'dsc.sum_squares' op failed to infer returned types}}
  %r = "dsc.sum_squares"(%s) : (tensor<f32>) -> tensor<f32>
  return
}

// -----

func.func @sum_squares_scale(%a: tensor<4xf32>, %s: tensor<1xf32>) {
  // expected-error @below {{hyperparameters and the step must be scalars}}
  // expected-error @below {{'dsc.sum_squares' op failed to infer returned types}}
  %r = dsc.sum_squares scale %s, (%a) : tensor<1xf32>, (tensor<4xf32>) -> tensor<f32>
  return
}

// -----

func.func @nvme_read_host(%a: tensor<4xf32> {dsc.memory = "host"}) -> tensor<4xf32> {
  // expected-error @below {{input must be an argument of the function with dsc.memory = "nvme"}}
  %r = dsc.nvme_read %a : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @nvme_write_read(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @below {{result is the state in its file: only the function's return may use it, not dsc.exp}}
  %w = dsc.nvme_write %a : tensor<4xf32>
  %e = dsc.exp %w : tensor<4xf32>
  return %e : tensor<4xf32>
}
