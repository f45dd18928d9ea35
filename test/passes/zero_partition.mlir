// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer="no-decay=bias" --dsc-zero-partition="stage=0 world-size=4" | FileCheck %s --check-prefix=S0
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=1 world-size=4" | FileCheck %s --check-prefix=S1
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=2 world-size=4" | FileCheck %s --check-prefix=S2
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=4" | FileCheck %s --check-prefix=S3
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=4 keep-gathered=true" | FileCheck %s --check-prefix=KEEP
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=4 hybrid-group=2" | FileCheck %s --check-prefix=HYB
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=2 world-size=4 shard-masters=true" | FileCheck %s --check-prefix=MASTERS
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=1 world-size=4 shard-masters=true" | FileCheck %s --check-prefix=MASTERS1
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=4 shard-masters=true" | FileCheck %s --check-prefix=S3
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer="accum-steps=2" --dsc-zero-partition="stage=2 world-size=4" | FileCheck %s --check-prefix=ACC2
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer="accum-steps=2" --dsc-zero-partition="stage=3 world-size=4" | FileCheck %s --check-prefix=ACC2
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer="accum-steps=2" --dsc-zero-partition="stage=1 world-size=4" | FileCheck %s --check-prefix=ACC1
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer="accum-steps=2" --dsc-zero-partition="stage=2 world-size=4 shard-masters=true" | FileCheck %s --check-prefix=ONCE
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=2 world-size=1" | FileCheck %s --check-prefix=ONE
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=1 world-size=1 shard-masters=true" | FileCheck %s --check-prefix=ONE
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=2 world-size=4 reduce-bucket-size=12" | FileCheck %s --check-prefix=SMALL
// RUN: dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=4 stage3-param-persistence-threshold=5" | FileCheck %s --check-prefix=PERSIST
// RUN: not dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=4" 2>&1 | FileCheck %s --check-prefix=BADSTAGE
// RUN: not dsc-opt %s --dsc-autodiff --dsc-optimizer --dsc-zero-partition="stage=3 world-size=4 hybrid-group=3" 2>&1 | FileCheck %s --check-prefix=BADGROUP
// RUN: not dsc-opt %s --dsc-zero-partition="stage=1 world-size=2" 2>&1 | FileCheck %s --check-prefix=ORDER

// hidden.weight (8), fc.weight (12) and fc.bias (3): one bucket of 23,
// padded to 24 for 4 ranks (6 elements a shard).
func.func @forward(%w1: tensor<4x2xf32> {dsc.param = "hidden.weight"},
                   %w: tensor<3x4xf32> {dsc.param = "fc.weight"},
                   %b: tensor<3xf32> {dsc.param = "fc.bias"},
                   %x: tensor<4x2xf32> {dsc.input = "x"},
                   %y: tensor<4xi64> {dsc.input = "y"})
    -> (tensor<f32> {dsc.output = "loss"}) {
  %h = dsc.gemm %x, %w1 {trans_b = true}
      : tensor<4x2xf32>, tensor<4x2xf32> -> tensor<4x4xf32>
  %r = dsc.relu %h : tensor<4x4xf32>
  %0 = dsc.gemm %r, %w, %b {trans_b = true}
      : tensor<4x4xf32>, tensor<3x4xf32>, tensor<3xf32> -> tensor<4x3xf32>
  %1 = dsc.softmax_cross_entropy %0, %y {reduction = "mean"}
      : tensor<4x3xf32>, tensor<4xi64> -> tensor<f32>
  return %1 : tensor<f32>
}

// Stage 0: gradients all-reduced over every rank (one bucket per
// weight-decay group), replicated state; the loss is the mean over ranks.
// With one micro-batch each bucket is reduced inside @forward_backward as
// soon as its gradients are complete (the bias bucket first), overlapping
// the rest of the backward pass.
// S0: dsc.buckets = [{dtype = "f32", entries = {{\[\[}}"hidden.weight", 0, 8], ["fc.weight", 8, 12]], name = "bucket0", padded = 20 : i64, sharded = false}, {dtype = "f32", entries = {{\[\[}}"fc.bias", 0, 3]], name = "bucket1", padded = 4 : i64, sharded = false}]
// S0-SAME: dsc.stage = 0 : i64
// S0: shard.grid @dsc_ranks(shape = 1x4)
// S0-LABEL: func.func @forward_backward
// S0: %[[IN0:.*]] = dsc.collective_input %{{.*}} : tensor<4xf32>
// S0-NEXT: shard.all_reduce %[[IN0]] on @dsc_ranks grid_axes = [0, 1] {dsc.gradient_reduction} : tensor<4xf32> -> tensor<4xf32>
// S0: dsc.matmul
// S0: shard.all_reduce %{{.*}} on @dsc_ranks grid_axes = [0, 1] {dsc.gradient_reduction} : tensor<20xf32> -> tensor<20xf32>
// S0-NEXT: return
// S0-LABEL: func.func @train_step
// S0-SAME: {dsc.opt_state = "fc.weight/exp_avg"}
// S0: shard.all_reduce %{{.*}} on @dsc_ranks grid_axes = [0, 1] : tensor<1xf32> -> tensor<1xf32>
// S0-NOT: shard.reduce_scatter
// S0: dsc.adamw {{.*}} : tensor<4x2xf32>

// Stage 1: all-reduce, then each rank updates its shard and all-gathers.
// S1-LABEL: func.func @forward_backward
// S1: shard.all_reduce %{{.*}} grid_axes = [0, 1] {dsc.gradient_reduction} : tensor<24xf32>
// S1-LABEL: func.func @train_step
// S1-SAME: tensor<6xf32> {dsc.bucket = 0 : i64, dsc.opt_state = "bucket0/exp_avg"}
// S1-SAME: {dsc.param_update = "fc.weight"}
// S1: shard.all_slice %{{.*}} on @dsc_ranks grid_axes = [1] slice_axis = 0 : tensor<24xf32> -> tensor<6xf32>
// S1: dsc.adamw {{.*}} : tensor<6xf32>
// S1: shard.all_gather %{{.*}} on @dsc_ranks grid_axes = [1] gather_axis = 0 : tensor<6xf32> -> tensor<24xf32>

// Stage 2: reduce-scatter (in the backward pass), a sharded norm (one
// scalar all-reduce).
// S2-LABEL: func.func @forward_backward
// S2: shard.reduce_scatter %{{.*}} on @dsc_ranks grid_axes = [1] scatter_axis = 0 {dsc.gradient_reduction} : tensor<24xf32> -> tensor<6xf32>
// S2-LABEL: func.func @train_step
// The shard's squares in one dsc.sum_squares, then summed over the ranks.
// S2: %[[SQ:.*]] = dsc.sum_squares scale %{{.*}}, (%{{.*}}) : tensor<f32>, (tensor<6xf32>) -> tensor<f32>
// S2: dsc.reshape %[[SQ]]
// S2: shard.all_reduce %{{.*}} on @dsc_ranks grid_axes = [1] : tensor<1xf32> -> tensor<1xf32>
// S2: dsc.sqrt
// S2: dsc.adamw {{.*}} : tensor<6xf32>
// S2: shard.all_gather

// Stage 3: parameters are shards; forward_backward gathers before the first
// forward use, releases after the last, gathers again for backward and
// reduce-scatters the gradients.
// S3-LABEL: func.func @forward_backward
// S3-SAME: (%{{.*}}: tensor<4x2xf32> {dsc.input = "x"}, %{{.*}}: tensor<4xi64> {dsc.input = "y"}, %[[SH:.*]]: tensor<6xf32> {dsc.bucket = 0 : i64, dsc.param_shard = "bucket0"})
// S3: %[[IN1:.*]] = dsc.collective_input %[[SH]] : tensor<6xf32>
// S3-NEXT: %[[G1:.*]] = shard.all_gather %[[IN1]] on @dsc_ranks grid_axes = [1] gather_axis = 0 : tensor<6xf32> -> tensor<24xf32>
// S3: dsc.gemm
// S3: dsc.gemm
// S3: dsc.release
// S3: dsc.softmax_cross_entropy
// S3: dsc.class_loss_backward
// S3: %[[IN2:.*]] = dsc.collective_input %[[SH]]
// S3-NEXT: %[[G2:.*]] = shard.all_gather %[[IN2]]
// S3: dsc.matmul
// S3: shard.reduce_scatter %{{.*}} scatter_axis = 0 {dsc.gradient_reduction} : tensor<24xf32> -> tensor<6xf32>
// S3-LABEL: func.func @train_step
// S3-SAME: tensor<6xf32> {dsc.bucket = 0 : i64, dsc.param = "bucket0"}
// S3-SAME: {dsc.bucket = 0 : i64, dsc.param_update = "bucket0"}
// S3-NOT: shard.all_gather
// S3-NOT: shard.reduce_scatter
// S3: return

// keep-gathered: one gather, kept from forward to backward.
// KEEP-LABEL: func.func @forward_backward
// KEEP-COUNT-1: shard.all_gather
// KEEP-NOT: shard.all_gather
// KEEP-NOT: dsc.release
// KEEP-LABEL: func.func @train_step

// shard-masters (what `dsc compile` asks for at stages 1-2 in mixed
// precision): the parameters are bucket shards, as at stage 3; the bucket
// is gathered once before its first forward use and kept through backward;
// stage 2 reduce-scatters the gradients, stage 1 all-reduces and slices
// them; the update writes the shard, and nothing is gathered after it. At
// stage 3 the option changes nothing (S3 above).
// MASTERS: dsc.shard_masters
// MASTERS-LABEL: func.func @forward_backward
// MASTERS-SAME: %[[SH:[^:]*]]: tensor<6xf32> {dsc.bucket = 0 : i64, dsc.param_shard = "bucket0"})
// MASTERS: %[[IN:.*]] = dsc.collective_input %[[SH]] : tensor<6xf32>
// MASTERS-NEXT: shard.all_gather %[[IN]] on @dsc_ranks grid_axes = [1] gather_axis = 0 : tensor<6xf32> -> tensor<24xf32>
// MASTERS-NOT: dsc.release
// MASTERS-NOT: shard.all_gather
// MASTERS: shard.reduce_scatter %{{.*}} scatter_axis = 0 {dsc.gradient_reduction} : tensor<24xf32> -> tensor<6xf32>
// MASTERS-LABEL: func.func @train_step
// MASTERS-SAME: tensor<6xf32> {dsc.bucket = 0 : i64, dsc.param = "bucket0"}
// MASTERS-SAME: {dsc.bucket = 0 : i64, dsc.param_update = "bucket0"}
// MASTERS: dsc.adamw {{.*}} : tensor<6xf32>
// MASTERS-NOT: shard.all_gather
// MASTERS: return
// MASTERS1-LABEL: func.func @forward_backward
// MASTERS1-COUNT-1: shard.all_gather
// MASTERS1-NOT: shard.all_gather
// MASTERS1: shard.all_reduce %{{.*}} {dsc.gradient_reduction} : tensor<24xf32> -> tensor<24xf32>
// MASTERS1-LABEL: func.func @train_step
// MASTERS1-SAME: tensor<6xf32> {dsc.bucket = 0 : i64, dsc.param = "bucket0"}
// MASTERS1: shard.all_slice %{{.*}} : tensor<24xf32> -> tensor<6xf32>
// MASTERS1: dsc.adamw {{.*}} : tensor<6xf32>
// MASTERS1-NOT: shard.all_gather
// MASTERS1: return

// Accumulation at stages 2-3: each micro-batch's call reduce-scatters its
// gradients (inside @forward_backward, as with one call) and returns its
// shard; the step sums the shards right after each call and scales the
// sum once. Stage 1 all-reduces once, after the micro-batches.
// ACC2-LABEL: func.func @forward_backward
// ACC2: %[[RS:.*]] = shard.reduce_scatter %{{.*}} scatter_axis = 0 {dsc.gradient_reduction} : tensor<24xf32> -> tensor<6xf32>
// ACC2: return {{.*}}, %[[RS]] : {{.*}}, tensor<6xf32>
// ACC2-LABEL: func.func @train_step
// ACC2: %[[C1:.*]]:5 = call @forward_backward
// ACC2-NEXT: dsc.slice
// ACC2-NEXT: dsc.slice
// ACC2-NEXT: %[[C2:.*]]:5 = call @forward_backward
// ACC2-NEXT: %[[SUM:.*]] = dsc.add %[[C1]]#4, %[[C2]]#4 : tensor<6xf32>, tensor<6xf32> -> tensor<6xf32>
// ACC2-NOT: shard.reduce_scatter
// ACC2: dsc.mul %[[SUM]], %{{.*}} : tensor<6xf32>, tensor<f32> -> tensor<6xf32>
// ACC2-NOT: shard.reduce_scatter
// ACC2: return
// ACC1-LABEL: func.func @forward_backward
// ACC1-NOT: shard.all_reduce
// ACC1-LABEL: func.func @train_step
// ACC1: call @forward_backward
// ACC1: call @forward_backward
// ACC1: shard.all_reduce %{{.*}} {dsc.gradient_reduction} : tensor<24xf32> -> tensor<24xf32>

// One rank: a group of one slices nothing, so no shard.all_slice (which
// the program would run without a communicator); the update is the
// bucket's.
// ONE-LABEL: func.func @train_step
// ONE-NOT: shard.all_slice
// ONE: dsc.adamw {{.*}} : tensor<23xf32>
// ONE-NOT: shard.all_slice

// Hybrid: shard within groups of 2, replicate across 2 groups: the
// reduce-scatter inside the group, an all-reduce across groups.
// HYB: shard.grid @dsc_ranks(shape = 2x2)
// HYB-LABEL: func.func @forward_backward
// HYB: %[[RS:.*]] = shard.reduce_scatter %{{.*}} grid_axes = [1] scatter_axis = 0 {dsc.gradient_reduction} : tensor<24xf32> -> tensor<12xf32>
// HYB-NEXT: %[[IN:.*]] = dsc.collective_input %[[RS]]
// HYB-NEXT: shard.all_reduce %[[IN]] {{.*}}grid_axes = [0] {dsc.gradient_reduction} : tensor<12xf32> -> tensor<12xf32>

// Buckets of at most 12 elements: each parameter in its own bucket.
// SMALL: name = "bucket0", padded = 8
// SMALL: name = "bucket1", padded = 12
// SMALL: name = "bucket2", padded = 4

// Parameters below the persistence threshold stay replicated at stage 3.
// PERSIST: name = "bucket0", padded = 20 : i64, sharded = true
// PERSIST: name = "bucket1", padded = 4 : i64, sharded = false

// BADSTAGE: error: dsc-zero-partition: stage must be 0, 1, 2 or 3, not 4
// BADGROUP: error: dsc-zero-partition: hybrid-group 3 does not divide world-size 4
// ORDER: error: dsc-zero-partition: needs @train_step and @forward_backward

// Stages 1-2 with shard-masters and two micro-batches: the step gathers the
// bucket once, before the first call, and both calls read its pieces;
// @forward_backward takes whole parameters and gathers nothing.
// ONCE-LABEL: func.func @forward_backward
// ONCE-SAME: {dsc.param = "hidden.weight"}
// ONCE-NOT: dsc.param_shard
// ONCE-NOT: shard.all_gather
// ONCE-LABEL: func.func @train_step
// ONCE: %[[CI:.*]] = dsc.collective_input %{{.*}} : tensor<6xf32>
// ONCE-NEXT: %[[G:.*]] = shard.all_gather %[[CI]] {{.*}} : tensor<6xf32> -> tensor<24xf32>
// ONCE-NOT: shard.all_gather
// ONCE: call @forward_backward
// ONCE-NOT: shard.all_gather
// ONCE: call @forward_backward
// ONCE-NOT: shard.all_gather
// ONCE: return
