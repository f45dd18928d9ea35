// RUN: dsc-opt %s --split-input-file --dsc-in-place-updates | FileCheck %s

// AdamW updates the parameter and both moments element by element, and is
// their last reader: all three results are computed in place. The loss and
// the gradient are not updates.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32> {dsc.output = "loss"}, tensor<3xf32> {dsc.in_place = 0 : i64, dsc.param_update = "w"}, tensor<3xf32> {dsc.in_place = 1 : i64, dsc.opt_state_update = "w/exp_avg"}, tensor<3xf32> {dsc.in_place = 2 : i64, dsc.opt_state_update = "w/exp_avg_sq"}, tensor<3xf32> {dsc.grad = "w"})
func.func @train_step(%p: tensor<3xf32> {dsc.param = "w"},
                      %m: tensor<3xf32> {dsc.opt_state = "w/exp_avg"},
                      %v: tensor<3xf32> {dsc.opt_state = "w/exp_avg_sq"},
                      %g: tensor<3xf32> {dsc.input = "g"},
                      %lr: tensor<f32> {dsc.hyper = "lr"},
                      %step: tensor<i64> {dsc.step})
    -> (tensor<f32> {dsc.output = "loss"},
        tensor<3xf32> {dsc.param_update = "w"},
        tensor<3xf32> {dsc.opt_state_update = "w/exp_avg"},
        tensor<3xf32> {dsc.opt_state_update = "w/exp_avg_sq"},
        tensor<3xf32> {dsc.grad = "w"}) {
  %l = dsc.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : tensor<3xf32> -> tensor<f32>
  %a:3 = dsc.adamw %p, %g, %m, %v, %lr, %lr, %lr, %lr, %lr, %step : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  return %l, %a#0, %a#1, %a#2, %g : tensor<f32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// dsc.adamw_multi: each result over its own state (params, then exp_avgs,
// then exp_avg_sqs), whatever order the results are returned in.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: {dsc.in_place = 1 : i64, dsc.param_update = "b"}, tensor<2xf32> {dsc.in_place = 0 : i64, dsc.param_update = "a"}, tensor<2xf32> {dsc.in_place = 2 : i64, dsc.opt_state_update = "a/exp_avg"}, tensor<4xf32> {dsc.in_place = 5 : i64, dsc.opt_state_update = "b/exp_avg_sq"}
func.func @train_step(%pa: tensor<2xf32> {dsc.param = "a"},
                      %pb: tensor<4xf32> {dsc.param = "b"},
                      %ma: tensor<2xf32> {dsc.opt_state = "a/exp_avg"},
                      %mb: tensor<4xf32> {dsc.opt_state = "b/exp_avg"},
                      %va: tensor<2xf32> {dsc.opt_state = "a/exp_avg_sq"},
                      %vb: tensor<4xf32> {dsc.opt_state = "b/exp_avg_sq"},
                      %ga: tensor<2xf32> {dsc.input = "ga"},
                      %gb: tensor<4xf32> {dsc.input = "gb"},
                      %lr: tensor<f32> {dsc.hyper = "lr"},
                      %step: tensor<i64> {dsc.step})
    -> (tensor<4xf32> {dsc.param_update = "b"},
        tensor<2xf32> {dsc.param_update = "a"},
        tensor<2xf32> {dsc.opt_state_update = "a/exp_avg"},
        tensor<4xf32> {dsc.opt_state_update = "b/exp_avg_sq"}) {
  %r:6 = dsc.adamw_multi %lr, %lr, %lr, %lr, %lr, %step, scale %lr after %lr, (%pa, %pb, %ga, %gb, %ma, %mb, %va, %vb) : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>, tensor<f32>, tensor<f32>, (tensor<2xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>) -> tensor<2xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>
  return %r#1, %r#0, %r#2, %r#5 : tensor<4xf32>, tensor<2xf32>, tensor<2xf32>, tensor<4xf32>
}

// -----

// SGD with momentum, and fp16's skip of an overflowed step: the where that
// keeps the old value is elementwise and the argument's last reader, so it
// writes over it (an element is written with itself when the step is
// skipped).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: {dsc.in_place = 0 : i64, dsc.param_update = "w"}, tensor<3xf32> {dsc.in_place = 1 : i64, dsc.opt_state_update = "w/momentum_buffer"}
func.func @train_step(%p: tensor<3xf32> {dsc.param = "w"},
                      %b: tensor<3xf32> {dsc.opt_state = "w/momentum_buffer"},
                      %g: tensor<3xf32> {dsc.input = "g"},
                      %finite: tensor<i1> {dsc.input = "finite"},
                      %lr: tensor<f32> {dsc.hyper = "lr"},
                      %step: tensor<i64> {dsc.step})
    -> (tensor<3xf32> {dsc.param_update = "w"},
        tensor<3xf32> {dsc.opt_state_update = "w/momentum_buffer"}) {
  %s:2 = dsc.sgd %p, %g, %b, %lr, %lr, %lr, %step : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %np = dsc.where %finite, %s#0, %p : tensor<i1>, tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
  %nb = dsc.where %finite, %s#1, %b : tensor<i1>, tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
  return %np, %nb : tensor<3xf32>, tensor<3xf32>
}

// -----

// A reader of the parameter after the update (here its norm, returned
// after the optimizer) keeps it double-buffered; the moments still go in
// place.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<3xf32> {dsc.param_update = "w"}, tensor<3xf32> {dsc.in_place = 1 : i64, dsc.opt_state_update = "w/exp_avg"}, tensor<3xf32> {dsc.in_place = 2 : i64, dsc.opt_state_update = "w/exp_avg_sq"}, tensor<f32> {dsc.grad_norm})
func.func @train_step(%p: tensor<3xf32> {dsc.param = "w"},
                      %m: tensor<3xf32> {dsc.opt_state = "w/exp_avg"},
                      %v: tensor<3xf32> {dsc.opt_state = "w/exp_avg_sq"},
                      %g: tensor<3xf32> {dsc.input = "g"},
                      %lr: tensor<f32> {dsc.hyper = "lr"},
                      %step: tensor<i64> {dsc.step})
    -> (tensor<3xf32> {dsc.param_update = "w"},
        tensor<3xf32> {dsc.opt_state_update = "w/exp_avg"},
        tensor<3xf32> {dsc.opt_state_update = "w/exp_avg_sq"},
        tensor<f32> {dsc.grad_norm}) {
  %a:3 = dsc.adamw %p, %g, %m, %v, %lr, %lr, %lr, %lr, %lr, %step : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  %n = dsc.reduce_sum %p {axes = array<i64: 0>, keepdims = false} : tensor<3xf32> -> tensor<f32>
  return %a#0, %a#1, %a#2, %n : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>
}

// -----

// Read later through a view: a reshape of the parameter, read after the
// update.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<4xf32> {dsc.param_update = "w"}, tensor<2x2xf32> {dsc.output = "loss"})
func.func @train_step(%p: tensor<4xf32> {dsc.param = "w"},
                      %g: tensor<4xf32> {dsc.input = "g"})
    -> (tensor<4xf32> {dsc.param_update = "w"},
        tensor<2x2xf32> {dsc.output = "loss"}) {
  %r = dsc.reshape %p {shape = array<i64: 2, 2>} : tensor<4xf32> -> tensor<2x2xf32>
  %n = dsc.sub %p, %g : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %e = dsc.exp %r : tensor<2x2xf32>
  return %n, %e : tensor<4xf32>, tensor<2x2xf32>
}

// -----

// The producer reads a view of the argument besides the argument (another
// element than its own): not in place.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<4xf32> {dsc.param_update = "w"})
func.func @train_step(%p: tensor<4xf32> {dsc.param = "w"})
    -> (tensor<4xf32> {dsc.param_update = "w"}) {
  %r = dsc.reshape %p {shape = array<i64: 4>} : tensor<4xf32> -> tensor<4xf32>
  %n = dsc.add %p, %r : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  return %n : tensor<4xf32>
}

// -----

// A producer that is not elementwise (ZeRO 1-2's updated parameter: a slice
// of the gathered bucket), and AdamW reading the argument as its gradient,
// not as the state it updates: both double-buffered.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<2xf32> {dsc.param_update = "a"}, tensor<3xf32> {dsc.param_update = "w"})
func.func @train_step(%pa: tensor<2xf32> {dsc.param = "a"},
                      %p: tensor<3xf32> {dsc.param = "w"},
                      %x: tensor<4xf32> {dsc.input = "x"},
                      %lr: tensor<f32> {dsc.hyper = "lr"},
                      %step: tensor<i64> {dsc.step})
    -> (tensor<2xf32> {dsc.param_update = "a"},
        tensor<3xf32> {dsc.param_update = "w"}) {
  %c = dsc.concat %pa, %x {axis = 0 : i64} : tensor<2xf32>, tensor<4xf32> -> tensor<6xf32>
  %s = dsc.slice %c {offsets = array<i64: 1>, sizes = array<i64: 2>, strides = array<i64: 1>} : tensor<6xf32> -> tensor<2xf32>
  %a:3 = dsc.adamw %p, %p, %p, %p, %lr, %lr, %lr, %lr, %lr, %step : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>, tensor<i64>
  return %s, %a#0 : tensor<2xf32>, tensor<3xf32>
}

// -----

// The argument returned as another result, and an update returned twice:
// neither in place.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<3xf32> {dsc.param_update = "w"}, tensor<3xf32> {dsc.output = "w0"}, tensor<3xf32> {dsc.param_update = "u"}, tensor<3xf32> {dsc.output = "u1"})
func.func @train_step(%p: tensor<3xf32> {dsc.param = "w"},
                      %u: tensor<3xf32> {dsc.param = "u"},
                      %g: tensor<3xf32> {dsc.input = "g"})
    -> (tensor<3xf32> {dsc.param_update = "w"},
        tensor<3xf32> {dsc.output = "w0"},
        tensor<3xf32> {dsc.param_update = "u"},
        tensor<3xf32> {dsc.output = "u1"}) {
  %n = dsc.sub %p, %g : tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
  %nu = dsc.sub %u, %g : tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
  return %n, %p, %nu, %nu : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// An asynchronous collective still reads the shard until its dsc.wait,
// which comes after the update: double-buffered. With the wait before it,
// in place.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<2xf32> {dsc.param_update = "a"}, tensor<4xf32> {dsc.output = "ga"}, tensor<2xf32> {dsc.in_place = 1 : i64, dsc.param_update = "b"}, tensor<4xf32> {dsc.output = "gb"})
shard.grid @dsc_ranks(shape = 1x2)
func.func @train_step(%a: tensor<2xf32> {dsc.param = "a"},
                      %b: tensor<2xf32> {dsc.param = "b"},
                      %g: tensor<2xf32> {dsc.input = "g"})
    -> (tensor<2xf32> {dsc.param_update = "a"},
        tensor<4xf32> {dsc.output = "ga"},
        tensor<2xf32> {dsc.param_update = "b"},
        tensor<4xf32> {dsc.output = "gb"}) {
  %ia = dsc.collective_input %a : tensor<2xf32>
  %ga = shard.all_gather %ia on @dsc_ranks grid_axes = [1] gather_axis = 0 : tensor<2xf32> -> tensor<4xf32>
  %ib = dsc.collective_input %b : tensor<2xf32>
  %gb = shard.all_gather %ib on @dsc_ranks grid_axes = [1] gather_axis = 0 : tensor<2xf32> -> tensor<4xf32>
  %wb = dsc.wait %gb : tensor<4xf32>
  %na = dsc.sub %a, %g : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
  %nb = dsc.sub %b, %g : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
  %wa = dsc.wait %ga : tensor<4xf32>
  return %na, %wa, %nb, %wb : tensor<2xf32>, tensor<4xf32>, tensor<2xf32>, tensor<4xf32>
}

// -----

// ZeRO-1/2: the updated parameter is a piece of the gathered bucket (a
// slice and a reshape of the wait), written over its argument, which
// nothing reads after the gather: in place. A piece of the bucket whose
// argument is read after the gather stays double-buffered.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<2x2xf32> {dsc.in_place = 0 : i64, dsc.param_update = "a"}, tensor<4xf32> {dsc.param_update = "b"}, tensor<4xf32> {dsc.output = "late"})
shard.grid @dsc_ranks(shape = 1x2)
func.func @train_step(%a: tensor<2x2xf32> {dsc.param = "a"},
                      %b: tensor<4xf32> {dsc.param = "b"},
                      %s: tensor<4xf32> {dsc.input = "shard"})
    -> (tensor<2x2xf32> {dsc.param_update = "a"},
        tensor<4xf32> {dsc.param_update = "b"},
        tensor<4xf32> {dsc.output = "late"}) {
  %i = dsc.collective_input %s : tensor<4xf32>
  %g = shard.all_gather %i on @dsc_ranks grid_axes = [1] gather_axis = 0 : tensor<4xf32> -> tensor<8xf32>
  %w = dsc.wait %g : tensor<8xf32>
  %pa = dsc.slice %w {offsets = array<i64: 0>, sizes = array<i64: 4>, strides = array<i64: 1>} : tensor<8xf32> -> tensor<4xf32>
  %ra = dsc.reshape %pa {shape = array<i64: 2, 2>} : tensor<4xf32> -> tensor<2x2xf32>
  %pb = dsc.slice %w {offsets = array<i64: 4>, sizes = array<i64: 4>, strides = array<i64: 1>} : tensor<8xf32> -> tensor<4xf32>
  %late = dsc.exp %b : tensor<4xf32>
  return %ra, %pb, %late : tensor<2x2xf32>, tensor<4xf32>, tensor<4xf32>
}

