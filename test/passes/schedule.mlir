// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=2 reduce-bucket-size=8" --dsc-schedule | FileCheck %s
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=2 reduce-bucket-size=8" --dsc-schedule --cse | FileCheck %s
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=2 reduce-bucket-size=8" --dsc-schedule="prefetch=0" | FileCheck %s --check-prefix=NOPRE
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=2 reduce-bucket-size=8" --dsc-schedule="prefetch=2" | FileCheck %s --check-prefix=PRE2
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=2 reduce-bucket-size=8" --dsc-schedule="prefetch=2 prefetch-bucket-size=8" | FileCheck %s --check-prefix=INFLIGHT
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=2 reduce-bucket-size=8" --dsc-schedule="prefetch=2 max-live-parameters=12" | FileCheck %s --check-prefix=LIVE
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=2 world-size=2 allgather-bucket-size=4" | FileCheck %s --check-prefix=AGB
// RUN: not dsc-opt %s --dsc-schedule="prefetch=-1" 2>&1 | FileCheck %s --check-prefix=BAD

// Two layers, one bucket each (reduce-bucket-size 8).
func.func @forward(%w1: tensor<2x2xf32> {dsc.param = "l1.weight"},
                   %w2: tensor<2x4xf32> {dsc.param = "l2.weight"},
                   %x: tensor<4x2xf32> {dsc.input = "x"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %h = dsc.matmul %x, %w1 : tensor<4x2xf32>, tensor<2x2xf32> -> tensor<4x2xf32>
  %r = dsc.relu %h : tensor<4x2xf32>
  %o = dsc.matmul %r, %w2 : tensor<4x2xf32>, tensor<2x4xf32> -> tensor<4x4xf32>
  %t = dsc.tanh %o : tensor<4x4xf32>
  %l = dsc.reduce_mean %t {axes = array<i64: 0, 1>, keepdims = false}
      : tensor<4x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// With prefetch 1 the gather of bucket 1 starts as soon as bucket 0 is
// waited for, and is in flight while layer 1 computes.
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[IN0:.*]] = dsc.collective_input %arg1
// CHECK-NEXT: %[[G0:.*]] = shard.all_gather %[[IN0]]
// CHECK-NEXT: %[[W0:.*]] = dsc.wait %[[G0]]
// CHECK-NEXT: %[[IN1:.*]] = dsc.collective_input %arg2
// CHECK-NEXT: %[[G1:.*]] = shard.all_gather %[[IN1]]
// CHECK: dsc.matmul %arg0
// CHECK: dsc.relu
// CHECK: %[[W1:.*]] = dsc.wait %[[G1]]
// Backward needs layer 2's weight again (stage 3 released it after forward):
// its gather is prefetched too, in flight during layer 2's forward.
// CHECK-NEXT: %[[IN2:.*]] = dsc.collective_input %arg2
// CHECK-NEXT: %[[G2:.*]] = shard.all_gather %[[IN2]]
// CHECK: dsc.matmul
// CHECK: dsc.constant {dsc.backward_begin}
// CHECK: dsc.wait %[[G2]]
// Layer 2's gradients are complete first: their reduce-scatter runs while
// layer 1's gradient is computed; the waits come at the end.
// CHECK: %[[RS2:.*]] = shard.reduce_scatter
// CHECK: dsc.matmul
// CHECK: %[[RS1:.*]] = shard.reduce_scatter
// CHECK: dsc.wait %[[RS2]]
// CHECK: dsc.wait %[[RS1]]
// CHECK-LABEL: func.func @train_step

// Without prefetch each gather starts right where it is needed.
// NOPRE-LABEL: func.func @forward_backward
// NOPRE: dsc.wait
// NOPRE: dsc.relu
// NOPRE: %[[IN3:.*]] = dsc.collective_input %arg2
// NOPRE-NEXT: %[[G1:.*]] = shard.all_gather %[[IN3]]
// NOPRE-NEXT: dsc.wait %[[G1]]

// Gathers of the forward (4 and 8 elements) and the backward re-gather (8).
// Two buckets ahead: both forward gathers start at once.
// PRE2-LABEL: func.func @forward_backward
// PRE2-NEXT: %[[IN4:.*]] = dsc.collective_input %arg2
// PRE2-NEXT: shard.all_gather %[[IN4]]
// PRE2-NEXT: %[[IN5:.*]] = dsc.collective_input %arg1
// PRE2-NEXT: shard.all_gather %[[IN5]]
// PRE2-NEXT: dsc.wait
// PRE2-NEXT: %[[IN6:.*]] = dsc.collective_input %arg2
// PRE2-NEXT: shard.all_gather %[[IN6]]
// At most 8 elements in flight (stage3_prefetch_bucket_size): one at a time.
// INFLIGHT-LABEL: func.func @forward_backward
// INFLIGHT-NEXT: %[[IN7:.*]] = dsc.collective_input %arg1
// INFLIGHT-NEXT: %[[A:.*]] = shard.all_gather %[[IN7]]
// INFLIGHT-NEXT: dsc.wait %[[A]] :
// INFLIGHT-NEXT: %[[IN8:.*]] = dsc.collective_input %arg2
// INFLIGHT-NEXT: %[[B:.*]] = shard.all_gather %[[IN8]]
// INFLIGHT: dsc.wait %[[B]] :
// INFLIGHT-NEXT: %[[IN9:.*]] = dsc.collective_input %arg2
// INFLIGHT-NEXT: shard.all_gather %[[IN9]]
// At most 12 gathered elements alive (stage3_max_live_parameters): the
// backward re-gather waits until layer 2's forward copy is in use alone.
// LIVE-LABEL: func.func @forward_backward
// LIVE-NEXT: %[[IN10:.*]] = dsc.collective_input %arg2
// LIVE-NEXT: %[[A:.*]] = shard.all_gather %[[IN10]]
// LIVE-NEXT: %[[IN11:.*]] = dsc.collective_input %arg1
// LIVE-NEXT: shard.all_gather %[[IN11]]
// LIVE: dsc.wait %[[A]] :
// LIVE-NEXT: %[[IN12:.*]] = dsc.collective_input %arg2
// LIVE-NEXT: shard.all_gather %[[IN12]]
// allgather_bucket_size 4 (2 elements a rank) splits the 8-element bucket's
// gather of updated parameters in two.
// AGB-LABEL: func.func @train_step
// AGB: shard.all_gather %{{.*}} gather_axis = 0 : tensor<2xf32> -> tensor<4xf32>
// AGB: shard.all_gather %{{.*}} gather_axis = 0 : tensor<2xf32> -> tensor<4xf32>
// BAD: error: dsc-schedule: prefetch must be >= 0
