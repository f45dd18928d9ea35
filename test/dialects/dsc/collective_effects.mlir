// RUN: %dsc-opt %s --cse --canonicalize | FileCheck %s

// The upstream shard collectives are Pure; the dsc points around them are
// not. A stage-3 bucket gathered for forward, released, and gathered again
// for backward stays two gathers under CSE and canonicalize: each reads its
// own dsc.collective_input, the waits and the release keep their order, and
// an unused wait or input point is not dropped.

shard.grid @dsc_ranks(shape = 1x4)

// CHECK-LABEL: func.func @regather
// CHECK-SAME: (%[[S:[^:]+]]: tensor<2xf32>)
func.func @regather(%s: tensor<2xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  // CHECK: %[[I0:.*]] = dsc.collective_input %[[S]]
  // CHECK-NEXT: %[[G0:.*]] = shard.all_gather %[[I0]]
  // CHECK-NEXT: %[[W0:.*]] = dsc.wait %[[G0]]
  // CHECK-NEXT: %[[F:.*]] = dsc.exp %[[W0]]
  // CHECK-NEXT: dsc.release %[[W0]]
  // CHECK-NEXT: %[[I1:.*]] = dsc.collective_input %[[S]]
  // CHECK-NEXT: %[[G1:.*]] = shard.all_gather %[[I1]]
  // CHECK-NEXT: %[[W1:.*]] = dsc.wait %[[G1]]
  // CHECK-NEXT: %[[B:.*]] = dsc.exp %[[W1]]
  // CHECK-NEXT: dsc.collective_input %[[S]]
  // CHECK-NEXT: return %[[F]], %[[B]]
  %i0 = dsc.collective_input %s : tensor<2xf32>
  %g0 = shard.all_gather %i0 on @dsc_ranks grid_axes = [1] gather_axis = 0
      : tensor<2xf32> -> tensor<8xf32>
  %w0 = dsc.wait %g0 : tensor<8xf32>
  %f = dsc.exp %w0 : tensor<8xf32>
  dsc.release %w0 : tensor<8xf32>
  %i1 = dsc.collective_input %s : tensor<2xf32>
  %g1 = shard.all_gather %i1 on @dsc_ranks grid_axes = [1] gather_axis = 0
      : tensor<2xf32> -> tensor<8xf32>
  %w1 = dsc.wait %g1 : tensor<8xf32>
  %b = dsc.exp %w1 : tensor<8xf32>
  %unused = dsc.collective_input %s : tensor<2xf32>
  return %f, %b : tensor<8xf32>, tensor<8xf32>
}

// The NVMe tier's reads and writes (dsc-offload optimizer=nvme) have
// effects too: two reads of one file stay two, an unused write is kept, and
// neither moves across the other.
// CHECK-LABEL: func.func @nvme
// CHECK: dsc.nvme_read %arg0
// CHECK-NEXT: dsc.nvme_read %arg0
// CHECK-NEXT: dsc.nvme_write
// CHECK-NEXT: dsc.nvme_write
func.func @nvme(%m: tensor<4xf32> {dsc.memory = "nvme"}) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = dsc.nvme_read %m : tensor<4xf32>
  %b = dsc.nvme_read %m : tensor<4xf32>
  %unused = dsc.nvme_write %a : tensor<4xf32>
  %w = dsc.nvme_write %b : tensor<4xf32>
  return %a, %w : tensor<4xf32>, tensor<4xf32>
}
