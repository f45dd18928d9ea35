//===- Passes.td - every dsc pass -----------------------------------------===//
#ifndef DSC_PASSES_TD
#define DSC_PASSES_TD

include "mlir/Pass/PassBase.td"

def DscVerifyStatic : Pass<"dsc-verify-static", "mlir::ModuleOp"> {
  let summary = "Check that a module is in the form every later pass expects";
  let description = [{
    The importer promises static shapes and no shape arithmetic. This pass
    checks that promise on any module, e.g. one written by hand for a lit
    test: every value is a tensor of static shape, every function argument
    says what it is (`dsc.param`, `dsc.input` or `dsc.buffer`), and the
    `@forward` function returns the loss as a scalar first.

    Example that passes:
    ```mlir
    func.func @forward(%w: tensor<4x4xf32> {dsc.param = "w"},
                       %x: tensor<2x4xf32> {dsc.input = "x"})
        -> (tensor<f32> {dsc.output = "loss"}) {
      %0 = dsc.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
      %1 = dsc.reduce_mean %0 {axes = array<i64: 0, 1>, keepdims = false}
          : tensor<2x4xf32> -> tensor<f32>
      return %1 : tensor<f32>
    }
    ```
  }];
  let options = [
    Option<"requireLoss", "require-loss", "bool", /*default=*/"true",
           "Require @forward to return a scalar loss as its first result">
  ];
}

def DscFuseAttention : Pass<"dsc-fuse-attention", "mlir::ModuleOp"> {
  let summary = "Attention subgraphs of every exporter become dsc.attention";
  let description = [{
    Finds, in the forward function, `softmax(scale * q k^T + mask) v` as
    the exporters write it (scalings of q, k or the scores; added float
    masks and `where` masks with -inf or the dtype's minimum; the IsNaN
    guard of HF's sdpa export; dropout on the probabilities; GQA's
    repeat_kv) and replaces it by one `dsc.attention`. A constant mask that
    is exactly causal (optionally with a sliding window) becomes the
    `causal`/`window` attributes; any other mask stays an operand (summed,
    rank 4, broadcast dims kept). A chain that computes anything else (a
    softmax over another axis, a mask that depends on a parameter) is left
    as it is. The module gets `dsc.fused_attention = N`. With
    `nondeterministic-backward`, each gets the marker
    `dsc.nondeterministic_backward`, which its gradient (dsc-autodiff) turns
    into `deterministic = false` on the dsc.attention_backward.

    ```mlir
    %s = dsc.matmul %q, %kt : ... -> tensor<4x2x32x32xf32>
    %m = dsc.add %s, %causal_mask : ...
    %p = dsc.softmax %m {axis = 3 : i64} : tensor<4x2x32x32xf32>
    %o = dsc.matmul %p, %v : ...
    ```
    becomes
    ```mlir
    %o, %lse = dsc.attention %q, %k, %v {causal = true, scale = 1.0 : f64} : ...
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", /*default=*/"\"forward\"",
           "The function whose attention is fused">,
    Option<"nondeterministicBackward", "nondeterministic-backward", "bool",
           /*default=*/"false",
           "Let the target's attention backward add dQ with atomics">
  ];
}

def DscAutodiff : Pass<"dsc-autodiff", "mlir::ModuleOp"> {
  let summary = "Reverse-mode differentiation of the forward function";
  let description = [{
    Builds `@<output>` from `@<function>`: the same forward computation, then
    its reverse sweep, returning the forward results followed by one gradient
    per trainable parameter (`dsc.grad = "<name>"`, in argument order). A
    parameter used several times (a tied weight) gets the sum of its uses.
    Each op states its vector-Jacobian product through the
    `VJPOpInterface`; the pass has no per-op code. Values that do not depend
    on a parameter get no gradient; an op on the gradient path without the
    interface is an error located at its ONNX node.

    Before:
    ```mlir
    func.func @forward(%w: tensor<3xf32> {dsc.param = "w"},
                       %x: tensor<3xf32> {dsc.input = "x"})
        -> (tensor<f32> {dsc.output = "loss"}) {
      %0 = dsc.mul %w, %x : tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
      %1 = dsc.reduce_sum %0 {axes = array<i64: 0>, keepdims = false}
          : tensor<3xf32> -> tensor<f32>
      return %1 : tensor<f32>
    }
    ```
    After (`@forward` is kept):
    ```mlir
    func.func @forward_backward(...) -> (tensor<f32> {dsc.output = "loss"},
                                         tensor<3xf32> {dsc.grad = "w"}) {
      ... forward ...
      %one = dsc.constant dense<1.0> : tensor<f32>
      %g0 = dsc.reshape %one {shape = array<i64: 1>} ...
      %g1 = dsc.expand %g0 {shape = array<i64: 3>} ...
      %gw = dsc.mul %g1, %x ...
      return %1, %gw : tensor<f32>, tensor<3xf32>
    }
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", /*default=*/"\"forward\"",
           "The function to differentiate">,
    Option<"output", "output", "std::string",
           /*default=*/"\"forward_backward\"",
           "Name of the function to create">
  ];
}

def DscOptimizer : Pass<"dsc-optimizer", "mlir::ModuleOp"> {
  let summary = "Build the training step: accumulation, clipping, schedule, "
                "optimizer update";
  let description = [{
    From `@forward_backward` (dsc-autodiff's output) builds `@train_step`:

    1. the global batch (dim 0 = micro-batch x accum-steps) is sliced into
       micro-batches, each runs `@forward_backward` (buffers such as
       batch-norm statistics carry from one to the next), losses and
       gradients are averaged;
    2. the global gradient norm is computed and, when `clip` > 0, gradients
       are scaled by min(1, clip / (norm + 1e-6)) as
       torch.nn.utils.clip_grad_norm_ does;
    3. the learning rate comes from `dsc.lr_schedule` at the step;
    4. every parameter is updated by `dsc.adamw` or `dsc.sgd`; parameters
       whose name matches `no-decay` get no weight decay.

    Hyperparameters are arguments of `@train_step` (`dsc.hyper = "lr"`...)
    so that a compiled program can override them; the option values are
    their defaults, recorded in the module's `dsc.hypers`.

    ```mlir
    func.func @train_step(%p: tensor<3xf32> {dsc.param = "w"},
        %m: tensor<3xf32> {dsc.opt_state = "w/exp_avg"},
        %v: tensor<3xf32> {dsc.opt_state = "w/exp_avg_sq"},
        %x: tensor<4x3xf32> {dsc.input = "x"},
        %lr: tensor<f32> {dsc.hyper = "lr"}, ...,
        %step: tensor<i64> {dsc.step}, %seed: tensor<i64> {dsc.seed})
        -> (tensor<f32> {dsc.output = "loss"},
            tensor<3xf32> {dsc.param_update = "w"}, ...) {
      %r:2 = call @forward_backward(%p, %x) : ...
      ...
      %new:3 = dsc.adamw %p, %g, %m, %v, %lr1, %b1, %b2, %eps, %wd, %step
      return %r#0, %new#0, %new#1, %new#2, ...
    }
    ```
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "adamw or sgd">,
    Option<"lr", "lr", "double", /*default=*/"1e-3", "Base learning rate">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.01",
           "Weight decay (decoupled for AdamW, L2 for SGD)">,
    Option<"momentum", "momentum", "double", /*default=*/"0.9",
           "SGD momentum">,
    Option<"dampening", "dampening", "double", /*default=*/"0.0",
           "SGD dampening">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false",
           "SGD with Nesterov momentum">,
    Option<"schedule", "schedule", "std::string",
           /*default=*/"\"constant\"",
           "constant, warmup_cosine or warmup_linear">,
    Option<"warmupSteps", "warmup-steps", "int64_t", /*default=*/"0",
           "Linear warm-up steps">,
    Option<"totalSteps", "total-steps", "int64_t", /*default=*/"0",
           "Steps at which the schedule ends">,
    Option<"warmupMinRatio", "warmup-min-ratio", "double", /*default=*/"0.0",
           "LR ratio at the start of warm-up">,
    Option<"minRatio", "min-ratio", "double", /*default=*/"0.0",
           "LR ratio at the end of the decay">,
    Option<"clip", "clip", "double", /*default=*/"0.0",
           "Global gradient-norm clipping threshold; 0 disables it">,
    Option<"accumSteps", "accum-steps", "int64_t", /*default=*/"1",
           "Micro-batches per optimizer step">,
    Option<"noDecay", "no-decay", "std::string", /*default=*/"\"\"",
           "Regex: parameters whose name matches get no weight decay">
  ];
}

def DscZeroPartition : Pass<"dsc-zero-partition", "mlir::ModuleOp"> {
  let summary = "Shard parameters, gradients and optimizer state (ZeRO 0-3, "
                "hybrid) and insert the collectives";
  let description = [{
    Rewrites `@train_step` (dsc-optimizer's output) into the step one rank
    of `world-size` runs, SPMD, on its contiguous slice of the global batch.
    Ranks form the grid `shard.grid @dsc_ranks(shape = R x G)`: state is
    sharded inside groups of G = `hybrid-group` ranks (axis 1) and
    replicated across the R = world-size / G groups (axis 0).

    Parameters are packed, in argument order, into flat buckets (one per
    weight-decay group, split at `reduce-bucket-size` elements) padded with
    zeros to a multiple of G. Then, by stage:

    | stage | gradients | optimizer state | parameters |
    |---|---|---|---|
    | 0 | all-reduce | replicated | replicated |
    | 1 | all-reduce | shard of each bucket | updated shard all-gathered |
    | 2 | reduce-scatter (+ all-reduce across groups) | shard | updated shard all-gathered |
    | 3 | reduce-scatter (+ all-reduce across groups) | shard | shard only: gathered in `@forward_backward` before the first forward use, again before the first backward use |

    Gradients are reduced once per optimizer step, after accumulation, and
    divided by world-size (each rank's loss is a mean over its slice). The
    global gradient norm is one scalar all-reduce of the shards' squared
    sums. The loss returned is the mean over ranks. Parameters smaller than
    `stage3-param-persistence-threshold` elements stay replicated at stage 3
    (handled as stage 2). Sharded arguments and results carry
    `dsc.bucket = i`; the module's `dsc.buckets` says where each parameter
    lies in its bucket, so that dumps and checkpoints are never padded.

    Every collective that talks to other ranks reads its operand through a
    `dsc.collective_input`, and a stage-3 bucket's forward copy ends at a
    `dsc.release`: both have effects on `dsc::CollectiveResource`, so the
    Pure `shard` ops cannot be merged by CSE (a bucket's backward gather
    into its forward one) or moved by any generic pass.

    ```mlir
    // stage 2, world-size 2: one bucket of 9610 elements
    %flat = dsc.concat ...  : ... -> tensor<9610xf32>
    %in = dsc.collective_input %flat : tensor<9610xf32>
    %gs = shard.reduce_scatter %in on @dsc_ranks grid_axes = [1]
        scatter_axis = 0 : tensor<9610xf32> -> tensor<4805xf32>
    %p:3 = dsc.adamw %pshard, %gs, %m, %v, ... : tensor<4805xf32>, ...
    %in2 = dsc.collective_input %p#0 : tensor<4805xf32>
    %full = shard.all_gather %in2 on @dsc_ranks grid_axes = [1]
        gather_axis = 0 : tensor<4805xf32> -> tensor<9610xf32>
    ```
  }];
  let dependentDialects = ["mlir::shard::ShardDialect"];
  let options = [
    Option<"stage", "stage", "int64_t", /*default=*/"0", "ZeRO stage 0..3">,
    Option<"worldSize", "world-size", "int64_t", /*default=*/"1",
           "Number of ranks">,
    Option<"hybridGroup", "hybrid-group", "int64_t", /*default=*/"0",
           "Shard inside groups of this many ranks, replicate across "
           "groups (HYBRID_SHARD); 0 = world-size">,
    Option<"allgatherBucketSize", "allgather-bucket-size", "int64_t",
           /*default=*/"0",
           "Stages 1-2: elements per all-gather of updated parameters "
           "(DeepSpeed allgather_bucket_size); 0: one per bucket">,
    Option<"reduceBucketSize", "reduce-bucket-size", "int64_t",
           /*default=*/"500000000",
           "Elements per gradient bucket (DeepSpeed reduce_bucket_size)">,
    Option<"persistenceThreshold", "stage3-param-persistence-threshold",
           "int64_t", /*default=*/"0",
           "Stage 3: parameters with fewer elements stay replicated">,
    Option<"keepGathered", "keep-gathered", "bool", /*default=*/"false",
           "Stage 3: keep parameters gathered from forward to backward "
           "(FSDP reshard_after_forward=False)">,
    Option<"shardMasters", "shard-masters", "bool", /*default=*/"false",
           "Stages 1-2 in mixed precision: the fp32 parameters (masters) "
           "are sharded as at stage 3, and their 16-bit compute copies "
           "gathered once a micro-batch, kept through its backward (DeepSpeed's "
           "ZeRO-1/2 layout: at stage 2, 2 + 18/N bytes a parameter with "
           "fp32 gradients, where replicated masters take 6 + 12/N)">,
    Option<"syncBatchNorm", "sync-batchnorm", "bool", /*default=*/"false",
           "Batch-norm statistics over the global batch (all-reduced), "
           "instead of each rank's own (DDP's default)">
  ];
}

def DscSchedule : Pass<"dsc-schedule", "mlir::ModuleOp"> {
  let summary = "Make collectives asynchronous: early starts, late waits";
  let description = [{
    Every collective (`shard.all_gather`, `shard.reduce_scatter`,
    `shard.all_reduce`) becomes a start/wait pair: the `shard` op is the
    start, and a `dsc.wait` of its result is placed just before the result's
    first use, so the transfer runs while the ops in between compute.

    In `@forward_backward` the stage-3 parameter gathers are issued
    `prefetch` buckets ahead: the gather of the bucket used k-th starts
    right after the wait of the (k - prefetch)-th, so the next bucket is in
    flight while the current one computes. A start is the collective
    together with its `dsc.collective_input`, moved as one.

    The waits have effects (`dsc::CollectiveResource`), so CSE, canonicalize
    and other generic passes after this one keep the order placed here.

    ```mlir
    %g0 = shard.all_gather %s0 ...      // start, bucket 0 (%s0, %s1: the
    %g1 = shard.all_gather %s1 ...      // shards' dsc.collective_inputs)
    %w0 = dsc.wait %g0                  // bucket 0 needed
    ... layer 0 ...
    %g2 = shard.all_gather %s2 ...      // start, bucket 2
    %w1 = dsc.wait %g1
    ... layer 1 ...
    ```
  }];
  let options = [
    Option<"prefetch", "prefetch", "int64_t", /*default=*/"1",
           "Buckets gathered ahead of the one in use (0: at first use)">,
    Option<"prefetchBucketSize", "prefetch-bucket-size", "int64_t",
           /*default=*/"0",
           "Elements in flight at most (DeepSpeed "
           "stage3_prefetch_bucket_size); 0: no bound">,
    Option<"maxLiveParameters", "max-live-parameters", "int64_t",
           /*default=*/"0",
           "Gathered parameter elements alive at once at most, counting the "
           "bucket in use (DeepSpeed stage3_max_live_parameters); 0: no "
           "bound">
  ];
}

def DscRecompute : Pass<"dsc-recompute", "mlir::ModuleOp"> {
  let summary = "Recompute cheap forward values in backward instead of "
                "keeping them (selective activation recomputation)";
  let description = [{
    In `@forward_backward`, a forward value the backward reads is normally
    kept from its forward op to its last backward use. With
    `mode=selective`, a value made by a cheap op (elementwise math, casts,
    where, layer norm, softmax, log-softmax; never dropout, the matmuls,
    attention or collectives) is computed again right before its first
    backward use, from operands the backward keeps anyway (its block
    arguments, constants, values a backward op reads, or other recomputed
    values), so no value lives longer than it did; the forward copy then
    dies at its last forward use. The clone is the same op on the same
    operands, so it computes the same bits (same kernel, same order), and
    carries `dsc.recomputed` so that CSE does not merge it back.

    ```mlir
    // before
    %h = dsc.matmul %x, %w1 ...
    %g = dsc.gelu %h ...             // kept until dW2 reads it
    ... backward_begin ...
    %dw2 = dsc.matmul %gT, %dy ...   // via a transpose of %g
    // after
    %g = dsc.gelu %h ...             // dies in forward
    ... backward_begin ...
    %g2 = dsc.gelu %h {dsc.recomputed} ...
    %dw2 = ... %g2 ...
    ```
    `mode=full` is per-block checkpointing: in each repeated block (the ops
    whose ONNX node name has a module-list entry, `/h.11/...`,
    `/model/layers.3/...`) the matmuls, GEMMs, attention without dropout and
    every other deterministic op are candidates too, except the block's
    checkpoints: results the forward reads outside the block (the residual
    stream into the next one), which are kept, so each block's backward
    recomputes it from them. Dropout (its mask is drawn from the op's
    position) and ops with effects are never redone. The same rule places
    the clones.

    `mode=elementwise` takes only the elementwise candidates (no norm, no
    softmax) and clones per reader: each elementwise backward op that reads
    a recomputed value gets its own clones right before it, so that
    dsc-fuse-elementwise puts them inside that op's kernel (SwiGLU's
    `silu(g) * u` is neither written nor kept, only g and u are); the
    other readers (matmuls) of the same values share one set of clones
    before the first of them. Each set is marked `dsc.recomputed = N`.

    ```mlir
    // after, for %s = sigmoid(%g), %a = %g * %s read by two backward muls
    %s0 = dsc.sigmoid %g {dsc.recomputed = 0 : i64} ...
    %du = dsc.mul %dy, %s0 ...
    %s1 = dsc.sigmoid %g {dsc.recomputed = 1 : i64} ...
    %a1 = dsc.mul %g, %s1 {dsc.recomputed = 1 : i64} ...
    %dv = dsc.mul %dy, %a1 ...
    ```

    `mode=none` (the default) leaves the IR as it is. Any other mode also
    bounds the attention backward's library workspace: each
    `dsc.attention_backward` gets `workspace_limit = attention-workspace`
    (default 256 MiB), and the runtime slices the batch to stay under it
    (the Llama-3.2-1B shape at 4 x 2048: 1.1 GiB -> 273 MiB, 1.2% slower).
  }];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"none\"",
           "none, elementwise, selective or full">,
    Option<"attentionWorkspace", "attention-workspace", "int64_t",
           /*default=*/"268435456",
           "bytes one attention backward call's library workspace may take "
           "(0: no limit)">,
  ];
}

def DscGlobalMeanLoss : Pass<"dsc-global-mean-loss", "mlir::ModuleOp"> {
  let summary = "Make a mean loss with ignored labels exact across "
                "micro-batches and ranks";
  let description = [{
    A loss that is the mean over the labels that count (ignore_index, class
    weights) is not the mean of the micro-batches' or ranks' means when they
    count different numbers of labels. When `@forward` returns such a
    `dsc.softmax_cross_entropy` / `dsc.nll_loss` (reduction "mean"), this
    pass makes it return the sum instead, and adds a result
    `{dsc.loss_count}`: the total weight of the labels that count (computed
    from the labels alone). dsc-optimizer and dsc-zero-partition then divide
    the summed losses and gradients once by the global count, so every
    sharding and accumulation gives exactly the full batch's gradient.

    ```mlir
    %l = dsc.softmax_cross_entropy %s, %y {ignore_index = -1, reduction = "mean"}
    // becomes
    %l = dsc.softmax_cross_entropy %s, %y {ignore_index = -1, reduction = "sum"}
    %n = ... reduce_sum(cast(not(equal(%y, -1)))) ...
    return %l, %n : tensor<f32>, tensor<f32> {dsc.loss_count}
    ```
  }];
}

def DscMixedPrecision : Pass<"dsc-mixed-precision", "mlir::ModuleOp"> {
  let summary = "bf16 / fp16 compute copies, fp32 master weights, fp16 "
                "dynamic loss scaling";
  let description = [{
    Runs on the step after dsc-optimizer (and dsc-zero-partition, so that it
    sees the stage-3 gathers and the gradient reductions), before
    dsc-schedule. With `precision` bf16 or fp16:

    1. `@forward_backward` takes a 16-bit **compute copy** of each parameter
       (at stage 3 of each parameter shard, so the all-gathers move half the
       bytes); `@train_step` makes the copies from the fp32 masters once per
       step (`dsc.cast {dsc.compute_copy}`), whatever the accumulation.
    2. Each op of `@forward_backward` computes in the precision of its class
       (`precisionClassOf`, documented in docs/numerics.md): matmul, gemm,
       conv and the conv gradients take 16-bit operands and give 16-bit
       results (fp32 accumulation in the kernels); data movement follows its
       operands; everything else (norms, softmax, the loss, reductions,
       elementwise math, gradient collectives) is fp32, with a cast where a
       16-bit value enters it. Results leave in their declared fp32 type, so
       gradients are accumulated, reduced over ranks and clipped in fp32 and
       the optimizer updates the fp32 masters.
    3. fp16 only, DeepSpeed's loss scaling: `@forward_backward` seeds the
       loss gradient with the scale (a `dsc.loss_scale` argument) and
       divides the gradients by it as they leave. `@train_step` keeps the
       scaler's state (`dsc.scaler` arguments and `dsc.scaler_update`
       results: loss_scale, hysteresis, good_steps, applied_steps); a step
       whose gradient norm is not finite (on any rank: the norm is already
       reduced) returns parameters and optimizer state unchanged, sets the
       `dsc.overflow` result, and does not advance the optimizer's step.

    ```mlir
    // before (precision=bf16)
    func.func @forward_backward(%w: tensor<4x4xf32> {dsc.param = "w"}, ...) {
      %y = dsc.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
      %z = dsc.relu %y : tensor<2x4xf32>
    // after
    func.func @forward_backward(%w: tensor<4x4xbf16> {dsc.param = "w"}, ...) {
      %xl = dsc.cast %x {to = bf16} : tensor<2x4xf32> -> tensor<2x4xbf16>
      %y = dsc.matmul %xl, %w : tensor<2x4xbf16>, tensor<4x4xbf16> -> tensor<2x4xbf16>
      %yf = dsc.cast %y {to = f32} : tensor<2x4xbf16> -> tensor<2x4xf32>
      %z = dsc.relu %yf : tensor<2x4xf32>
    ```
  }];
  let dependentDialects = ["mlir::shard::ShardDialect"];
  let options = [
    Option<"precision", "precision", "std::string", /*default=*/"\"fp32\"",
           "bf16, fp16 or fp32 (fp32: the pass changes nothing)">,
    Option<"lossScale", "loss-scale", "double", /*default=*/"0.0",
           "fp16: a static loss scale; 0 = dynamic (DeepSpeed loss_scale)">,
    Option<"initialScalePower", "initial-scale-power", "int64_t",
           /*default=*/"16",
           "fp16: the dynamic scale starts at 2^this (initial_scale_power)">,
    Option<"lossScaleWindow", "loss-scale-window", "int64_t",
           /*default=*/"1000",
           "fp16: steps without overflow before the scale doubles "
           "(loss_scale_window)">,
    Option<"hysteresis", "hysteresis", "int64_t", /*default=*/"2",
           "fp16: overflows tolerated before the scale is lowered "
           "(hysteresis)">,
    Option<"minLossScale", "min-loss-scale", "double", /*default=*/"1.0",
           "fp16: the scale never goes below this (min_loss_scale)">,
    Option<"gradReduceDtype", "grad-reduce-dtype", "std::string",
           /*default=*/"\"fp32\"",
           "fp32 or bf16: the element type of the gradient reductions over "
           "ranks (DeepSpeed communication_data_type); bf16 halves their "
           "bytes and rounds each rank's contribution to 8 bits">
  ];
}


def DscFuseNormResidual : Pass<"dsc-fuse-norm-residual", "mlir::ModuleOp"> {
  let summary = "Add the residual stream's gradient in the norm backward's "
                "epilogue";
  let description = [{
    In backward, a pre-norm block's residual stream gets two gradients: the
    one flowing past the block and the norm's input gradient. After
    dsc-fuse-elementwise they meet in a fused chain `add(r, gx)`, often
    with a 16-bit cast of the sum for the next GEMM:

    ```mlir
    %gx, %gs, %gb = dsc.layer_norm_backward %g, %x, %w : ...
    %s:2 = dsc.fused "elementwise"(%r, %gx) : ... -> (f32, bf16) {
      add; cast to bf16; yield both }
    // becomes
    %gx, %gs, %gb, %c = dsc.layer_norm_backward %g, %x, %w residual %r
        {copy_type = bf16} : ...
    ```

    The norm's kernels add the residual and write the 16-bit copy as they
    write the input gradient, so the input gradient is never written on its
    own and read back (the same bits: one f32 add, one rounding). Only for
    a target with generated kernels, on chains that are exactly that add
    (and its cast) of an f32 norm gradient read by nothing else.
  }];
}

def DscFuseElementwise : Pass<"dsc-fuse-elementwise", "mlir::ModuleOp"> {
  let summary = "Group elementwise chains into dsc.fused ops (one kernel each)";
  let description = [{
    For a target with generated kernels (`dsc.target` says
    `generated_kernels`; nothing happens otherwise), every chain of
    elementwise ops over one shape becomes one `dsc.fused "elementwise"` op
    whose body holds the chain: unary and binary math, comparisons, where,
    gelu, leaky_relu on f32 and bool values, casts between f32 and bool and
    between f32 and bf16/f16. A value used only inside its chain is then
    never written to memory. An op joins the chain of an operand while no op
    outside the chain has used a value of it yet, so the fused op can stand
    where the chain's last op stood; operands of another shape broadcast to
    the chain's shape and are read from memory, splat constants are copied
    into the body. Chains of one op stay as they are. First, casts beside
    layer norms are folded into them (an exact rewrite the target's norm
    kernels support): a norm whose only reader casts its f32 result to 16
    bits writes 16 bits, and a norm backward reads a 16-bit input instead
    of its f32 widening. Then a chain that reads a value of an earlier
    chain which another op (a GEMM) closed before it moves right before
    that op, when everything else it reads is ready there and the values
    it spares are at least as many bytes as it writes, and joins the
    earlier chain (SwiGLU's backward: `dP * u` is never written). Last, a
    widening cast that no chain took, of a 16-bit `dsc.matmul` (or the
    weight gradient of a `dsc.matmul_bias_grad`) read by nothing else,
    becomes the product's epilogue: the product's result is f32 (the GEMM
    writes its accumulator) and the cast is gone.

    ```mlir
    %0 = dsc.cast %x {to = f32} : tensor<4x8xbf16> -> tensor<4x8xf32>
    %1 = dsc.add %0, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    // becomes
    %1 = dsc.fused "elementwise" (%x, %b) : (tensor<4x8xbf16>, tensor<8xf32>)
        -> tensor<4x8xf32> { ... dsc.yield ... }
    ```
  }];
}


def DscFuseGemmEpilogue : Pass<"dsc-fuse-gemm-epilogue", "mlir::ModuleOp"> {
  let summary = "Bias, bias gradient, GELU and GELU's derivative as GEMM "
                "epilogues (dsc.gemm, dsc.matmul_bias_grad, dsc.gemm_gelu, "
                "dsc.matmul_gelu_grad)";
  let description = [{
    For a target whose GEMMs reduce an operand over K in their epilogue
    (`dsc.target` says `gemm_epilogues`; nothing happens otherwise): a
    `dsc.reduce_sum` of a gradient G over all its dims but the last (a
    bias gradient) and a `dsc.matmul` that reads G, reshaped to [T, C], as
    one operand of a product over T (the weight gradient `G^T x X`, or
    `X^T x G` for a layer that stores its weight [in, out], as GPT-2's
    Conv1D) become one `dsc.matmul_bias_grad`: the bias gradient is no
    kernel of its own and G is read once.

    Under mixed precision the sum reads the f32 gradient and the GEMM its
    16-bit cast; the fused op sums the 16-bit values the GEMM reads (f32
    accumulation), as PyTorch's autocast does for a bf16 linear layer
    (`grad_output.sum(0)` over the bf16 gradient), and the f32 gradient is
    then no longer written when nothing else reads it.

    In the forward, a 16-bit product widened to f32, plus a bias that is a
    widened 16-bit [N] of the same type, and rounded back to that type
    (the qkv projection; the MLP's first layer, whose GELU reads the f32
    sum) becomes one `dsc.gemm` over the rows with the 16-bit bias as its
    C: the GEMM adds the bias to its f32 accumulator and rounds once
    (cuBLASLt's bias epilogue; PyTorch's bf16 nn.Linear), and the other
    readers of the f32 sum read the widened 16-bit sum, so no kernel adds
    the bias and GELU's chain writes only its output. Runs before
    dsc-fuse-elementwise, which widens the weight gradient's result to f32
    as it does a matmul's.

    GELU (tanh approximation; GPT-2's `gelu_new`): a 16-bit product (that
    `dsc.gemm` with its bias, or a `dsc.matmul`) widened, through
    `dsc.gelu`, and rounded back becomes one `dsc.gemm_gelu` whose epilogue
    applies GELU to the f32 sum and also writes the rounded sum (`pre`),
    which backward reads for the derivative. Not where another GELU reads
    the same product (a clone of GELU alone that dsc-recompute made: it
    computes GELU from the rounded sum, so the two would differ). In
    backward, the rounding of a 16-bit product widened times GELU's
    derivative at a widened 16-bit value becomes one `dsc.matmul_gelu_grad`
    (the derivative in the epilogue, the product not rounded before it).
    The derivative is recognized by value: an f32 expression of that one
    widened value and scalar constants that equals GELU's derivative at
    sample points, in whatever form autodiff and the passes since left it.

    ```mlir
    %b = dsc.reduce_sum %g {axes = array<i64: 0, 1>} : tensor<4x8x16xbf16> -> tensor<1x1x16xf32>
    %g2 = dsc.reshape %g {shape = array<i64: 32, 16>} : ...
    %w = dsc.matmul %g2, %x {transpose_lhs = true} : tensor<32x16xbf16>, tensor<32x24xbf16> -> tensor<16x24xbf16>
    // becomes
    %w, %b1 = dsc.matmul_bias_grad %g2, %x : tensor<32x16xbf16>, tensor<32x24xbf16> -> tensor<16x24xbf16>, tensor<16xf32>
    %b = dsc.reshape %b1 {shape = array<i64: 1, 1, 16>} : ...
    ```
  }];
}


def DscRaiseGelu : Pass<"dsc-raise-gelu", "mlir::ModuleOp"> {
  let summary = "Recognize GELU written out as a formula and make it dsc.gelu";
  let description = [{
    Exporters write GPT-2's GELU (`gelu_new`, nanoGPT's `new_gelu`) and
    often the exact one as elementwise formulas:

        0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
        0.5 * x * (1 + erf(x / sqrt(2)))      (or x * 0.7071...)

    in any order of the products and sums, x^3 as x*x*x or pow(x, 3). Each
    becomes one `dsc.gelu` (with `tanh_approximation` for the first), so
    the backward is GELU's own derivative, read from x alone, instead of the
    product rule through every op of the formula, whose intermediates the
    step would keep. The constants must match to float32 precision; results
    differ from the formula's only in rounding. Runs before dsc-autodiff.
  }];
}


def DscDropUnusedResults : Pass<"dsc-drop-unused-results", "mlir::ModuleOp"> {
  let summary = "Drop the results no call reads from functions called only "
                "by func.call";
  let description = [{
    A value a function returns is computed into its caller's storage, which
    the memory plan holds across the whole call. After dsc-zero-partition
    reduces the gradients inside `@forward_backward` (stages 1-3), the step
    reads only the bucket shards, not the per-parameter gradients it still
    returns. For each function whose every symbol use is a `func.call`, the
    results none of them reads are removed from its returns, its type and
    its calls; such a value then lives from where it is made to its last
    use inside the function. The entry (`entry`) and functions without
    calls (`@forward`) keep their signatures.
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"train_step\"",
           "The program's entry, whose results its caller reads">,
  ];
}


def DscAccumulateInCall : Pass<"dsc-accumulate-in-call", "mlir::ModuleOp"> {
  let summary = "Sum the micro-batches' gradients inside @forward_backward, "
                "over the running sum's storage";
  let description = [{
    With `--accum-steps K` the step calls `@forward_backward` K times and
    sums each gradient over the calls (`add(add(c0#r, c1#r), c2#r)`). A
    returned value is computed into the caller's storage and held across
    the whole call, so every call's gradients existed beside the running
    sum from its forward on: twice the gradients' bytes. For each such sum
    of a floating tensor of rank >= 1 (gradients, reduced shards) whose
    call results and partial sums the chain alone reads, the callee takes
    the running sum as a new argument `{dsc.accumulator = r}` and returns
    `add(sum, gradient)`, made where the gradient is made, as result r
    marked `{dsc.in_place = argument}`: the memory plan writes it over the
    argument when the caller's sum dies at the call. The first call adds to
    zeros (`dsc.constant {dsc.accumulator = r}`), so the sums keep their
    order and bits; the last call's result replaces the chain.

    Example (two calls):

    ```mlir
    %a:2 = call @forward_backward(%p, %x0)
    %b:2 = call @forward_backward(%p, %x1)
    %s = dsc.add %a#1, %b#1
    ```
    becomes
    ```mlir
    %z = dsc.constant {dsc.accumulator = 1} dense<0.0>
    %a:2 = call @forward_backward(%p, %x0, %z)
    %b:2 = call @forward_backward(%p, %x1, %a#1)   // %b#1 is the sum
    ```
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"train_step\"",
           "The step function">,
    Option<"callee", "callee", "std::string",
           /*default=*/"\"forward_backward\"",
           "The function the step calls once per micro-batch">,
  ];
}


def DscInlineStep : Pass<"dsc-inline-step", "mlir::ModuleOp"> {
  let summary = "Inline the step's one call of @forward_backward at ZeRO "
                "stages 0-1 on several ranks";
  let description = [{
    At stages 0 and 1 on several ranks, `@forward_backward` returns the
    full flat gradient buckets it all-reduces, and a returned value is held
    in the caller's frame across the whole call: every bucket through the
    forward. When the module is such a step (`dsc.world_size` > 1,
    `dsc.stage` 0 or 1), the entry makes exactly one call and nothing is
    offloaded, the call is replaced by the callee's body, so each bucket
    lives from the concat that fills it to its last read. The callee stays
    (code generation emits only what the entry calls).
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"train_step\"",
           "The step function">,
  ];
}


def DscRaiseRotateHalf : Pass<"dsc-raise-rotate-half", "mlir::ModuleOp"> {
  let summary = "Recognize rotary embedding's rotate_half and make it "
                "dsc.rotate_half";
  let description = [{
    HF's rotary embeddings (Llama, Mistral, Qwen, Gemma, ...) export
    `rotate_half(x) = cat(-x2, x1)` as two slices of the last dim, a neg
    and a concat; their gradient is two pads or insert_slices, a neg and a
    split. Each `concat(neg(slice(x, [h, 2h))), slice(x, [0, h)))` over the
    last dim of x (2h wide, the slices taking all of the other dims)
    becomes one `dsc.rotate_half`, exact, whose gradient is
    `rotate_half(-g)`: one copy kernel each way. Runs before dsc-autodiff.
  }];
}


def DscRaiseRmsNorm : Pass<"dsc-raise-rms-norm", "mlir::ModuleOp"> {
  let summary = "Recognize RMSNorm written out as a formula and make it "
                "dsc.layer_norm {rms}";
  let description = [{
    HF's LlamaRMSNorm (and Mistral's, Qwen2's, ...) exports as

        w * (x * 1 / sqrt(mean(x^2, last axis) + eps))

    with the reciprocal as `1 / s`, `reciprocal(s)` or a division `x / s`,
    the square as `pow(x, 2)` or `x * x`, in either operand order, every
    intermediate read once, w 1-D of x's last dim. Each becomes

        dsc.layer_norm %x, %w {axis = -1, epsilon = eps, rms}

    one kernel forward and one backward (with the scale's gradient), where
    the formula was seven elementwise ops and a reduction each way whose
    intermediates the step kept. Results differ from the formula's only in
    rounding. Runs before dsc-autodiff.
  }];
}


def DscRaiseSwiglu : Pass<"dsc-raise-swiglu", "mlir::ModuleOp"> {
  let summary = "Recognize SwiGLU's gate written out as a formula and make it "
                "dsc.swiglu";
  let description = [{
    Llama's, Mistral's and Qwen2's MLP computes `act(gate(x)) * up(x)` with
    SiLU, which exporters write as

        (g * sigmoid(g)) * u

    in either operand order, the sigmoid and the silu each read once, g and
    u of one type. Each becomes

        dsc.swiglu %g, %u

    whose backward reads g and u alone: the formula's backward also read
    the sigmoid and the silu, two more [tokens, intermediate] values the
    step kept from forward to backward (4 GiB on the Llama-3.2-1B shape at
    4 x 2048 tokens in bf16). Results differ from the formula's only in
    rounding. Runs before dsc-autodiff.
  }];
}

def DscFuseClassifier : Pass<"dsc-fuse-classifier", "mlir::ModuleOp"> {
  let summary = "Make a classifier, its cross-entropy and their gradients one "
                "chunked dsc.linear_cross_entropy";
  let description = [{
    Runs after canonicalization and CSE (the precision pass's casts of the
    logits folded into the loss ops). Where a step computes

        logits = dsc.matmul(x, w)            // w [V, C] transposed, or [C, V]
        loss   = dsc.softmax_cross_entropy(reshape(logits), labels) {sum}
        g      = dsc.class_loss_backward(seed, reshape(logits), labels)
        dx     = dsc.matmul(reshape(g), w)   // x's type
        dw     = dsc.matmul(g^T, x)          // w's shape

    and nothing else reads the logits or their gradient, the five become one
    `dsc.linear_cross_entropy` at the class_loss_backward's place: the
    [tokens, vocab] logits (GPT-2 124M at 16 x 1024 in bf16: 1.54 GiB, the
    Llama-3.2-1B shape at 4 x 2048: 1.96 GiB, kept from forward to backward)
    are computed, reduced and differentiated `chunk_rows` rows at a time in
    a [chunk_rows, V] scratch of about `chunk-bytes`. A 16-bit weight's
    gradient is accumulated over the chunks in f32 (`f32_weight_grad`): its
    widening casts read the op's result, other readers a cast back to the
    16-bit type. Losses with weights, a "mean" or "none" reduction, a loss
    read before the backward or weights that differ between forward and
    backward (a stage-3 re-gather) are left as they are.
  }];
  let options = [
    Option<"chunkBytes", "chunk-bytes", "int64_t",
           "kDefaultClassifierChunkBytes",
           "bytes of logits one chunk may hold (0: do not fuse)">,
  ];
}

def DscMultiTensorAdamW : Pass<"dsc-multi-tensor-adamw", "mlir::ModuleOp"> {
  let summary = "Group the step's dsc.adamw ops into dsc.adamw_multi (one kernel)";
  let description = [{
    The dsc.adamw ops of a function that share lr, betas, eps, weight decay
    and step (all of them, unless --no-decay gives some parameters no
    decay) become one dsc.adamw_multi where the last of them stood: one
    kernel launch for every parameter at any ZeRO stage, instead of one per
    parameter (GPT-2: 148). A grad that is `dsc.mul(g, s)` of a scalar s,
    used only by its adamw (the clipping factor), is folded into the
    group's `grad_scale` when the whole group shares s; a `dsc.mul(g, t)`
    under it (the loss normalizer) likewise into `grad_prescale`.

    First, when every gradient the function returns ({dsc.grad}) is
    `dsc.mul(g, t)` of one scalar f32 t (dsc-global-mean-loss's 1 / label
    count), it returns the g and t as a result {dsc.grad_normalizer} (the
    program multiplies them when it reports gradients), and the gradient
    norm's `dsc.sum_squares` takes t as its scale: no kernel writes the
    normalized gradients (the Llama-3.2-1B shape: 148 launches, 7.4 ms of
    an H100 step).
    An adamw whose results are read before the group's last adamw stays
    on its own. Results are bitwise those of the separate ops.

    Groups of fewer than `min-group` members stay dsc.adamw. `dsc compile
    --offload-optimizer cpu` sets 1, so that a lone adamw (one bucket at
    ZeRO-3) is an adamw_multi too: dsc-offload then has its host AdamW
    write the next step's compute copy, instead of a cast of the whole
    bucket on the host at the step's start.

    With `compute-copies` (what `dsc compile` sets unless the optimizer is
    offloaded, where dsc-offload does the same on the host), a group whose
    every parameter is a step argument with one compute copy (the 16-bit
    `dsc.cast {dsc.compute_copy}` of dsc-mixed-precision), read only before
    the group, writes those copies too: each new parameter rounded as the
    cast rounds, while it is in registers. The casts become arguments
    (`dsc.compute_copy`) and the copies their updates
    (`dsc.compute_copy_update`), which dsc-in-place-updates writes over
    them; the program fills them from the parameters before the first step
    and on resume. The step then casts no parameter at its start (GPT-2
    124M: 148 cast kernels, 0.56 ms). Stages 1-2 update slices of the
    parameters and keep their casts.
  }];
  let options = [
    Option<"minGroup", "min-group", "unsigned", /*default=*/"2",
           "the fewest dsc.adamw ops that become one dsc.adamw_multi">,
    Option<"computeCopies", "compute-copies", "bool", /*default=*/"false",
           "the group writes its parameters' compute copies (step state)">
  ];
}


def DscInPlaceTemporaries : Pass<"dsc-in-place-temporaries", "mlir::ModuleOp"> {
  let summary = "Write a temporary over an operand that dies at its op";
  let description = [{
    Runs after fusion, on the final order of the step. An op whose kernels
    (CPU and CUDA) may write their result over an operand, element for
    element, each element read before it is written, gets `dsc.overwrites =
    <operand index>` when that operand dies at the op:

    1. the op is `dsc.class_loss_backward` of `softmax_cross_entropy` over
       its scores (operand 1): the gradient of the [tokens, vocab] logits
       takes the logits' own storage, which the classifier's backward is the
       last to read (planned arena of GPT-2 124M in bf16 10.34 -> 8.92 GiB,
       of the Llama-3.2-1B shape 31.7 -> 30.3 GiB); or the op is a fused
       elementwise chain (its first result) or an elementwise op
       (`dsc::writesLaneByLane`), over any operand of the result's type: a
       tied classifier's fp32 weight gradient, to which the embedding's is
       added as the step returns it, is then computed straight into the
       returned gradient (1002 MiB less at the Llama-3.2-1B shape's peak);
    2. the result has the operand's type;
    3. the operand is computed in the body (not an argument, a constant, nor
       a returned value), and nothing reads it or a view of it (reshape) after
       the op.

    The memory plan then places the result in the operand's storage (the
    plan checks the same rule and otherwise gives it its own).

    ```mlir
    %g = dsc.class_loss_backward %d, %logits, %labels
        {kind = "softmax_cross_entropy", reduction = "mean"} : ...
    // becomes
    %g = dsc.class_loss_backward %d, %logits, %labels
        {dsc.overwrites = 1 : i64, kind = "softmax_cross_entropy", ...} : ...
    ```
  }];
}

def DscOffload : Pass<"dsc-offload", "mlir::ModuleOp"> {
  let summary = "Keep the optimizer's state and fp32 master parameters in "
                "host memory and run the optimizer there "
                "(DeepSpeed's offload_optimizer)";
  let description = [{
    With `optimizer=cpu`, in the step function: every argument the
    optimizer updates (fp32 master parameters and optimizer state: whole
    tensors at stage 0, this rank's bucket shards at stage 3; stages 1-2,
    which slice the shard out of replicated parameters, are refused) gets `dsc.memory = "host"`, as do the results that update them; the
    optimizer ops and the compute-copy casts of the masters get
    `dsc.on_host` (the CPU runtime's multi-threaded kernels run them). What
    a host op reads from the device (gradients, learning rate, clipping
    scale, step) is copied to the host right after it is computed, by a
    `dsc.offload_copy {to = "host"}`; what the device reads from a host op
    (the 16-bit compute copies, or the fp32 masters themselves under
    `--precision fp32`) is copied back by a `dsc.offload_copy {to =
    "device"}` right after it is made and waited for by a
    `dsc.offload_wait` right before its first device use. Splat constants
    a host op reads are cloned onto the host. The GPU then holds no
    optimizer state and no fp32 masters; their bytes cross PCIe once each
    way per step (gradients down, compute copies up).

    With `params=cpu` (ZeRO-3 only) the 16-bit compute copies, this rank's
    parameter shards, stay on the host as well: the host AdamW's copies
    are the step's results there, and in the called function each shard
    is copied up (`dsc.offload_copy {to = "device"}`) at the gather before
    its own, and waited for right before its own `dsc.collective_input`,
    every time it is gathered (forward and backward). The GPU then holds
    only gathered parameters, for as long as their layer needs them.

    ```mlir
    // before
    %c = dsc.cast %w {dsc.compute_copy, to = bf16} : ...
    %r:6 = call @forward_backward(%c, ...)
    %n:3 = dsc.adamw %w, %r#2, %m, %v, %lr, ...
    // after
    %c = dsc.cast %w {dsc.compute_copy, dsc.on_host, to = bf16} : ...
    %d = dsc.offload_copy %c {to = "device"} : ...
    %e = dsc.offload_wait %d : ...
    %r:6 = call @forward_backward(%e, ...)
    %g = dsc.offload_copy %r#2 {to = "host"} : ...
    %n:3 = dsc.adamw %w, %g, %m, %v, %lr_host, ... {dsc.on_host}
    ```
    A grouped AdamW (dsc.adamw_multi) is split into chunks of about
    `chunk-elements` elements, and writes the next step's 16-bit compute
    copies itself (N more results): they become step state on the device,
    an argument `dsc.compute_copy` the forward reads instead of the cast,
    and a result `dsc.compute_copy_update` that a copy brings up right after
    the chunk that computed it. The copy stream and the host's work then
    overlap chunk by chunk. A gradient's copy to the host is issued
    `copy-ahead` host tasks before the chunk that reads it, so the host
    holds a few chunks' gradients at a time (the memory plan reuses the
    host frame; the runtime orders a copy into host memory after the host
    tasks that last used those bytes).

    With `ratio` below 1 (DeepSpeed's `offload_optimizer.ratio`, the
    Twin-Flow of ZeRO-Offload++), after the split the optimizer ops taken
    from the last one back whose parameters hold at most `1 - ratio` of the
    elements stay device ops, with their masters, state and compute-copy
    casts: the GPU updates that share while the host updates the rest, and
    the GPU holds 12 more bytes per element kept (fp32 master, two
    moments). `dsc compile --offload-ratio auto` picks the least ratio
    whose plan fits `--memory-budget`.

    With `overlap` the host optimizer runs during backward. The step's
    call of @forward_backward is inlined; the chunks are cut in the order in
    which backward makes their parameters' final gradients (and `ratio`
    then keeps on the device the chunks whose gradients come last, such as
    a tied embedding's); each copy to the host moves up to right after the
    value it reads, together with the ops after backward that make it (a
    gradient's loss normalization, the learning rate), so a chunk's
    gradients come down while backward goes on and its host AdamW starts
    when the last of them is down. Clipping's coefficient would make every
    update wait for the global norm, so overlap needs `clip` = 0 at compile
    time and fixes it: the coefficient becomes its 1 and the `clip`
    hyperparameter leaves the step (the program has no --clip). It also
    needs one micro-batch per step, no fp16 loss scaling and `params=none`;
    otherwise it is an error naming what stands in the way. The host then
    holds every offloaded gradient at once (no copy-ahead).

    With `optimizer=nvme` (DeepSpeed's `offload_optimizer: nvme`) it is
    `cpu` plus a further tier: each fp32 master or optimizer state that only
    host ops read gets `dsc.memory = "nvme"` (a file under the run's
    `--nvme-path`, mapped into the program's memory for everything but the
    step), and so does its update. A `dsc.nvme_read` brings it into the
    host frame right before the first host op that reads it, and a
    `dsc.nvme_write` writes the update back right after the op that makes
    it; the step returns that, in place of its argument. Each chunk's
    reads then move up before the previous chunk's host op, so they run
    (on the runtime's I/O threads) while it updates. Host memory then
    holds a few chunks' state at a time (`chunk-elements`), not all of it.

    ```mlir
    %s = dsc.nvme_read %m {dsc.on_host} : tensor<4xf32>
    %n:8 = dsc.adamw_multi ... %s ... {dsc.on_host}
    %w = dsc.nvme_write %n#1 {dsc.on_host} : tensor<4xf32>
    return ..., %w, ...   // {dsc.memory = "nvme", dsc.in_place = i}
    ```

    `optimizer=none` (the default) leaves the IR as it is. Stages 1-3
    (sharded state reached through slices and gathers) are refused with a
    message, as is an optimizer whose state is not an argument.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"none\"",
           "none, cpu or nvme (cpu, with the masters and optimizer state "
           "the host ops alone read kept in files, staged chunk by chunk)">,
    Option<"chunkElements", "chunk-elements", "int64_t",
           /*default=*/"int64_t(1) << 25",
           "A grouped AdamW over more elements runs as several host tasks of "
           "about this many (whole parameters), so that each one's "
           "gradients come down, and its compute copies go up, while "
           "another computes">,
    Option<"copyAhead", "copy-ahead", "unsigned", /*default=*/"2",
           "A copy to the host of a value only host tasks read is issued "
           "this many host tasks before the first of them (0: right after "
           "the value is made), so the host frame holds a few chunks' "
           "gradients at a time rather than all of them">,
    Option<"ratio", "ratio", "double", /*default=*/"1.0",
           "The share of the optimizer's elements updated on the host "
           "(DeepSpeed's offload_optimizer.ratio): the optimizer ops from the "
           "last back holding at most 1 - ratio of them keep their masters "
           "and state on the device and update there, while the host "
           "updates the rest (0: nothing offloaded)">,
    Option<"overlap", "overlap", "bool", /*default=*/"false",
           "The host optimizer runs during backward: the step's call of "
           "@forward_backward is inlined, the chunks follow the order in "
           "which backward makes their gradients, and each gradient comes "
           "down as soon as it is made (no copy-ahead: the host holds every "
           "offloaded gradient at once). Needs --clip 0 (fixed: the "
           "program has no --clip), one micro-batch per step, bf16 or fp32, "
           "params=none">,
    Option<"function", "function", "std::string", /*default=*/"\"train_step\"",
           "The step function">,
    Option<"params", "params", "std::string", /*default=*/"\"none\"",
           "none or cpu: at ZeRO-3 the 16-bit parameter shards live on the "
           "host too (DeepSpeed's offload_param), each copied up one gather "
           "ahead of its all_gather in the callee">
  ];
}

def DscInPlaceUpdates : Pass<"dsc-in-place-updates", "mlir::ModuleOp"> {
  let summary = "Write updated parameters and optimizer state into their "
                "arguments' storage";
  let description = [{
    Runs last, on the final order of the step. A result of `function` that
    is the updated value of an argument (`dsc.param_update`,
    `dsc.opt_state_update`, `dsc.buffer_update` or `dsc.scaler_update` of
    the argument with the same role and name) gets `dsc.in_place = <argument
    index>` when the op computing it may write it over that argument:

    1. the op updates that operand element by element: `dsc.adamw`,
       `dsc.adamw_multi` and `dsc.sgd` for their own state operand (the new
       exp_avg over exp_avg), elementwise math and `dsc.where` over any
       operand of the result's type (fp16's `where(finite, new, old)` keeps
       a skipped step's values: each element is written with itself). Not
       `dsc.fused` (its kernels' operands are `__restrict__`). Or the op
       writes the whole value from elsewhere: a copy into the device
       (`dsc.offload_copy`), a write into an NVMe file
       (`dsc.nvme_write`), a grouped AdamW's compute copy, or a piece of
       a gathered bucket (a slice or reshape of the `dsc.wait` of a
       `shard.all_gather`: ZeRO-1/2's updated parameters), which then
       need not read the argument;
    2. the op reads the argument itself, not through a view (unless it
       writes the whole value from elsewhere, above);
    3. nothing reads the argument's storage at or after the op: no other
       op, no view (reshape, wait, collective input) of it, no
       asynchronous collective on it before its `dsc.wait`, and the
       argument is not returned;
    4. the value is returned once, in the argument's type.

    The program then holds such state once instead of double-buffering it
    (argument and result swapped after each step). Nothing else changes.

    ```mlir
    func.func @train_step(%p: tensor<3xf32> {dsc.param = "w"},
        %m: tensor<3xf32> {dsc.opt_state = "w/exp_avg"}, ...)
        -> (tensor<f32> {dsc.output = "loss"},
            tensor<3xf32> {dsc.param_update = "w"},
            tensor<3xf32> {dsc.opt_state_update = "w/exp_avg"}, ...)
    // becomes
        -> (tensor<f32> {dsc.output = "loss"},
            tensor<3xf32> {dsc.in_place = 0 : i64, dsc.param_update = "w"},
            tensor<3xf32> {dsc.in_place = 1 : i64,
                           dsc.opt_state_update = "w/exp_avg"}, ...)
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", /*default=*/"\"train_step\"",
           "The step function whose results are decided">
  ];
}

#endif // DSC_PASSES_TD
