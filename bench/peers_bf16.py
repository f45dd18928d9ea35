#!/usr/bin/env python3
"""GPT-2 124M training steps in bf16 for the peers, side by side, on one GPU.

Runs on the GPU machine (one H200, torch 2.11 + cu130), from the repo root:

  python3 bench/peers_bf16.py --out $OUT/peers_bf16.json

and prints one JSON object on stdout (everything else -- DeepSpeed's logs,
the JIT build of its fused Adam -- goes to stderr; a table for people is
printed on stderr at the end). The file named by --out is rewritten after
every measurement, so a run cut short still leaves what it measured.

What it measures, in one process, one after the other:

  ceiling     8192^3 bf16 torch.matmul on random data: mean TFLOP/s of ten
              products after three warm-ups (each timed with CUDA events).
  configs     gpt2_124m_matmul  the module bench/gpt2_124m.py builds today
                                (its `build`): vocab 50257, attention as
                                matmul, scale+mask, softmax, matmul
              gpt2_124m_sdpa    the same with sdpa=True
                                (F.scaled_dot_product_attention, causal)
              nanogpt           nanoGPT's quoted setup: vocab padded to 50304,
                                SDPA is_causal=True, tied embeddings, fused
                                AdamW with weight decay on the 2-D weights
                                only (nanoGPT's configure_optimizers), TF32
                                on for the fp32 matmuls left outside autocast
  impls       eager      fp32 master weights, torch.autocast(bf16),
                         torch.optim.AdamW(fused=True)
              compile    the same module through torch.compile (default
                         mode); the first step (compilation) and the
                         warm-up are reported apart from the timed steps
              deepspeed  DeepSpeed ZeRO-2, bf16 enabled (weights held in
                         bf16, fp32 master copy in the ZeRO optimizer),
                         FusedAdam in AdamW mode, micro-batch 16, no
                         gradient accumulation, one process (RANK=0
                         WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1
                         MASTER_PORT=29511). If FusedAdam cannot be built,
                         it is retried with torch_adam (torch.optim.AdamW)
                         and the row says so. If `import deepspeed` fails,
                         the error is recorded and the other rows go on.

Every run: batch 16 x 1024 random tokens in [0, 50257) (fixed seed, the same
batches for every run), lr 6e-4, betas (0.9, 0.95), weight decay 0.1, no
gradient clipping; --steps steps (30), the median over the steps after
--warmup (10), torch.cuda.synchronize() around each step. Peak memory is
torch.cuda.max_memory_allocated(), reset before each run; models are freed
between runs (del, gc.collect(), torch.cuda.empty_cache(), and
torch._dynamo.reset() after compiled runs).

FLOPs per step (bench/README.md): 6 x params x tokens + 12 x layers x
1024^2 x 768 x batch for the attention products, with params the module's
own count (tied weights once, position embeddings included): 124,439,808
for vocab 50257 and 124,475,904 for 50304. The padded vocabulary adds
36,096 parameters, 3.55 GFLOP a step (14.0919 against 14.0884 TFLOP, +0.025%);
the lm_head product really is that much bigger, so MFU counts it. MFU is against the ceiling measured in
the same run.

--smoke runs the same code on the CPU with a 2-layer, 64-wide model, batch
2 x 64 tokens (a test of the script, not a measurement).
"""

import os

# NVLink multicast stays off on shared machines (KINDS.md).
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_124m import build  # noqa: E402  (imports torch only when called)

DATA_VOCAB = 50257  # tokens are GPT-2 ids; the padded 47 are never targets
LR, BETAS, EPS, WD = 6e-4, (0.9, 0.95), 1e-8, 0.1
DS_ENV = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
          "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511"}

CONFIGS = {
    "gpt2_124m_matmul": dict(
        vocab_size=50257, sdpa=False, tf32=False, decay_groups=False,
        what="bench/gpt2_124m.py build(): vocab 50257, attention as "
             "matmul+mask+softmax+matmul, tied embeddings"),
    "gpt2_124m_sdpa": dict(
        vocab_size=50257, sdpa=True, tf32=False, decay_groups=False,
        what="bench/gpt2_124m.py build(sdpa=True): vocab 50257, "
             "F.scaled_dot_product_attention(is_causal=True), tied embeddings"),
    "nanogpt": dict(
        vocab_size=50304, sdpa=True, tf32=True, decay_groups=True,
        what="nanoGPT's quoted setup: vocab 50304, "
             "F.scaled_dot_product_attention(is_causal=True), tied embeddings, "
             "fused AdamW with decay on 2-D weights only, TF32 on"),
}
IMPLS = ("eager", "compile", "deepspeed")
FUSED_ADAM_FAILED = None  # DeepSpeed's FusedAdam JIT build failed once: torch_adam after


class Ctx:
    """What differs between the GPU run and the CPU smoke test."""

    def __init__(self, torch, smoke):
        self.torch = torch
        self.smoke = smoke
        self.cuda = not smoke
        self.dev = "cuda" if self.cuda else "cpu"
        if smoke:
            self.dims = dict(block_size=64, n_layer=2, n_head=2, n_embd=64)
            self.batch = 2
        else:
            self.dims = dict(block_size=1024, n_layer=12, n_head=12, n_embd=768)
            self.batch = 16
        self.seq = self.dims["block_size"]

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def reset_peak(self):
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()

    def peak(self):
        return self.torch.cuda.max_memory_allocated() if self.cuda else 0

    def allocated(self):
        return self.torch.cuda.memory_allocated() if self.cuda else 0

    def free(self):
        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()

    def flops_per_step(self, n_params):
        d = self.dims
        tokens = self.batch * self.seq
        return (6 * n_params * tokens
                + 12 * d["n_layer"] * self.seq ** 2 * d["n_embd"] * self.batch)


def matmul_ceiling(ctx, n=8192, warmup=3, reps=10):
    torch = ctx.torch
    if ctx.smoke:
        n = 256
    g = torch.Generator(device=ctx.dev).manual_seed(0)
    a = torch.randn(n, n, device=ctx.dev, dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, n, device=ctx.dev, dtype=torch.bfloat16, generator=g)
    for _ in range(warmup):
        torch.matmul(a, b)
    ctx.sync()
    rates, total = [], 0.0
    for _ in range(reps):
        if ctx.cuda:
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            torch.matmul(a, b)
            e1.record()
            e1.synchronize()
            s = e0.elapsed_time(e1) / 1e3
        else:
            t0 = time.perf_counter()
            torch.matmul(a, b)
            s = time.perf_counter() - t0
        total += s
        rates.append(2 * n ** 3 / s / 1e12)
    del a, b
    ctx.free()
    return {"n": n, "tflops_mean_of_ten": statistics.mean(rates),
            "tflops_each": rates, "tflops_total_time": 2 * n ** 3 * reps / total / 1e12}


def make_batches(ctx, steps):
    torch = ctx.torch
    g = torch.Generator(device=ctx.dev).manual_seed(0)
    shape = (ctx.batch, ctx.seq)
    return [(torch.randint(0, DATA_VOCAB, shape, device=ctx.dev, generator=g),
             torch.randint(0, DATA_VOCAB, shape, device=ctx.dev, generator=g))
            for _ in range(steps)]


def param_groups(model, decay_groups):
    params = list(model.parameters())  # a tied weight once
    if not decay_groups:
        return [{"params": params, "weight_decay": WD}]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": WD},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def timed(ctx, step, batches, steps):
    times, losses = [], []
    for i in range(steps):
        idx, tgt = batches[i]
        ctx.sync()
        t0 = time.perf_counter()
        loss = step(idx, tgt)
        ctx.sync()
        times.append(time.perf_counter() - t0)
        losses.append(loss.detach())
    return times, [float(x) for x in losses]


def run_torch(ctx, cfg, compiled):
    torch = ctx.torch
    torch.backends.cuda.matmul.allow_tf32 = cfg["tf32"]
    torch.backends.cudnn.allow_tf32 = cfg["tf32"]
    model = build(torch, vocab_size=cfg["vocab_size"], sdpa=cfg["sdpa"],
                  **ctx.dims).to(ctx.dev)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(param_groups(model, cfg["decay_groups"]), lr=LR,
                            betas=BETAS, eps=EPS, fused=True)
    extra = {"optimizer": "torch.optim.AdamW(fused=True)",
             "precision": "bf16 autocast, fp32 master weights",
             "tf32": cfg["tf32"]}
    fwd = model
    if compiled:
        t0 = time.perf_counter()
        fwd = torch.compile(model)
        extra["torch_compile_call_s"] = time.perf_counter() - t0
        extra["compile_mode"] = "default"

    def step(idx, tgt):
        with torch.autocast(ctx.dev, dtype=torch.bfloat16):
            loss = fwd(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return n_params, step, extra, (model, opt, fwd)


def ds_import():
    os.environ.update(DS_ENV)
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    import deepspeed
    import logging
    deepspeed.utils.logger.setLevel(logging.WARNING)
    return deepspeed


def run_deepspeed(ctx, cfg, deepspeed):
    global FUSED_ADAM_FAILED
    torch = ctx.torch
    torch.backends.cuda.matmul.allow_tf32 = cfg["tf32"]
    torch.backends.cudnn.allow_tf32 = cfg["tf32"]
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="gloo" if ctx.smoke else "nccl")

    def config(torch_adam):
        params = {"lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WD}
        if torch_adam:
            params["torch_adam"] = True
        return {
            "train_micro_batch_size_per_gpu": ctx.batch,
            "gradient_accumulation_steps": 1,
            "bf16": {"enabled": True},
            "zero_optimization": {"stage": 2},
            "optimizer": {"type": "AdamW", "params": params},
            "steps_per_print": 10 ** 9,
            "wall_clock_breakdown": False,
        }

    extra = {"precision": "bf16 weights (DeepSpeed bf16), fp32 master in ZeRO-2",
             "tf32": cfg["tf32"]}
    for torch_adam in (False, True):
        if not torch_adam and FUSED_ADAM_FAILED:
            extra["fused_adam_error"] = "failed earlier in this run: " + FUSED_ADAM_FAILED
            continue
        model = build(torch, vocab_size=cfg["vocab_size"], sdpa=cfg["sdpa"],
                      **ctx.dims)
        n_params = sum(p.numel() for p in model.parameters())
        t0 = time.perf_counter()
        try:
            engine, opt, _, _ = deepspeed.initialize(
                model=model, model_parameters=param_groups(model, cfg["decay_groups"]),
                config=config(torch_adam))
        except Exception as e:  # FusedAdam's JIT build, most likely
            if torch_adam:
                raise
            extra["fused_adam_error"] = f"{type(e).__name__}: {e}"[-2000:]
            FUSED_ADAM_FAILED = extra["fused_adam_error"]
            print(traceback.format_exc(), file=sys.stderr)
            model = None
            ctx.free()
            continue
        extra["init_s"] = time.perf_counter() - t0
        extra["ds_config"] = config(torch_adam)
        extra["optimizer"] = (type(engine.optimizer).__name__ + " over "
                              + type(getattr(engine.optimizer, "optimizer", opt)).__name__)
        break

    def step(idx, tgt):
        loss = engine(idx, tgt)
        engine.backward(loss)
        engine.step()
        return loss

    return n_params, step, extra, (engine, model)


def measure(ctx, name, cfg, impl, batches, args, ceiling, deepspeed):
    row = {"config": name, "impl": impl, "vocab_size": cfg["vocab_size"],
           "attention": "sdpa" if cfg["sdpa"] else "matmul+softmax",
           "micro_batch": ctx.batch, "seq": ctx.seq}
    ctx.free()
    row["allocated_before_bytes"] = ctx.allocated()
    ctx.reset_peak()
    holders = None
    try:
        if impl == "deepspeed":
            if isinstance(deepspeed, str):
                raise RuntimeError("import deepspeed failed: " + deepspeed)
            n_params, step, extra, holders = run_deepspeed(ctx, cfg, deepspeed)
        else:
            n_params, step, extra, holders = run_torch(ctx, cfg, impl == "compile")
        row.update(extra)
        times, losses = timed(ctx, step, batches, args.steps)
        after = times[args.warmup:]
        med = statistics.median(after)
        flops = ctx.flops_per_step(n_params)
        row.update({
            "params": n_params,
            "flops_per_step": flops,
            "median_step_ms": med * 1e3,
            "mean_step_ms": statistics.mean(after) * 1e3,
            "min_step_ms": min(after) * 1e3,
            "tokens_per_s": ctx.batch * ctx.seq / med,
            "achieved_tflops": flops / med / 1e12,
            "mfu": flops / med / 1e12 / ceiling if ceiling else None,
            "first_step_s": times[0],
            "warmup_s": sum(times[:args.warmup]),
            "step_ms": [round(t * 1e3, 3) for t in times],
            "loss_first": losses[0], "loss_last": losses[-1],
            "peak_bytes": ctx.peak(),
            "peak_gib": ctx.peak() / 2 ** 30,
        })
        if impl == "compile":
            row["compile_s"] = times[0]  # the first step compiles fwd and bwd
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {e}"[-2000:]
        row["traceback"] = traceback.format_exc()[-4000:]
        print(row["traceback"], file=sys.stderr)
    finally:
        if holders is not None and impl == "deepspeed" and hasattr(holders[0], "destroy"):
            try:
                holders[0].destroy()
            except Exception as e:  # noqa: BLE001
                row["destroy_error"] = repr(e)[-500:]
        del holders
        step = None  # noqa: F841  (the closure holds the model)
        if impl == "compile":
            try:
                ctx.torch._dynamo.reset()
            except Exception:  # noqa: BLE001
                pass
        ctx.free()
    row["allocated_after_bytes"] = ctx.allocated()
    return row


def table(result):
    lines = [f"bf16 matmul ceiling: {result.get('ceiling_tflops') or float('nan'):.0f} TFLOP/s "
             f"({result.get('card', '?')})",
             f"{'config':18} {'impl':10} {'ms/step':>9} {'tok/s':>10} {'MFU':>6} "
             f"{'peak GiB':>9} {'first s':>8} {'warm s':>7}  note"]
    for r in result["runs"]:
        if "error" in r:
            lines.append(f"{r['config']:18} {r['impl']:10} {'-':>9} {'-':>10} {'-':>6} "
                         f"{'-':>9} {'-':>8} {'-':>7}  ERROR {r['error'][:80]}")
            continue
        mfu = f"{r['mfu']:.1%}" if r.get("mfu") is not None else "-"
        note = r.get("optimizer", "")
        lines.append(f"{r['config']:18} {r['impl']:10} {r['median_step_ms']:9.2f} "
                     f"{r['tokens_per_s']:10.0f} {mfu:>6} {r['peak_gib']:9.2f} "
                     f"{r['first_step_s']:8.1f} {r['warmup_s']:7.1f}  {note}")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="also write the JSON object here (rewritten after each run)")
    p.add_argument("--only", default=",".join(IMPLS),
                   help="comma-separated subset of: " + ",".join(IMPLS))
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help="comma-separated subset of: " + ",".join(CONFIGS))
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--no-ceiling", action="store_true",
                   help="skip the matmul ceiling (MFU left out)")
    p.add_argument("--smoke", action="store_true",
                   help="CPU, tiny model: tests the script, measures nothing")
    args = p.parse_args()
    impls = [s for s in args.only.split(",") if s]
    configs = [s for s in args.configs.split(",") if s]
    for s in impls:
        if s not in IMPLS:
            p.error(f"--only: unknown {s!r} (choose from {','.join(IMPLS)})")
    for s in configs:
        if s not in CONFIGS:
            p.error(f"--configs: unknown {s!r} (choose from {','.join(CONFIGS)})")
    if args.steps <= args.warmup:
        p.error("--steps must be larger than --warmup")

    # Everything but the final JSON goes to stderr, C-level output included
    # (DeepSpeed logs to stdout; ninja and nvcc print there too).
    sys.stdout.flush()
    real_stdout = os.dup(1)
    os.dup2(2, 1)

    result = {"script": "bench/peers_bf16.py", "argv": sys.argv[1:],
              "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "python": platform.python_version(), "smoke": args.smoke,
              "steps": args.steps, "warmup": args.warmup,
              "median_over": f"steps {args.warmup + 1}-{args.steps}",
              "hyper": {"lr": LR, "betas": BETAS, "eps": EPS, "weight_decay": WD,
                        "grad_clip": None},
              "flops_formula": "6*params*batch*seq + 12*n_layer*seq^2*n_embd*batch",
              "vocab_50304_note": "vocab 50304 adds 47 x 768 = 36,096 parameters "
                                  "(124,475,904 vs 124,439,808): +3.55 GFLOP a step by the "
                                  "formula (14.0919 vs 14.0884 TFLOP, +0.025%); the lm_head "
                                  "product is that much larger, so it counts; tokens stay in "
                                  "[0, 50257)",
              "configs": {k: CONFIGS[k] for k in configs}, "runs": []}

    def save():
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out + ".tmp", "w") as f:
                json.dump(result, f, indent=1)
            os.replace(args.out + ".tmp", args.out)

    try:
        import torch
        ctx = Ctx(torch, args.smoke)
        result["torch"] = torch.__version__
        result["torch_cuda"] = torch.version.cuda
        if ctx.cuda:
            result["card"] = torch.cuda.get_device_name()
        result["dims"] = dict(ctx.dims, batch=ctx.batch)
        # Warm caches make compile_s and DeepSpeed's init_s smaller than on a
        # fresh machine: say whether they were there at the start.
        import getpass
        caches = {
            "inductor": os.environ.get("TORCHINDUCTOR_CACHE_DIR")
            or f"/tmp/torchinductor_{getpass.getuser()}",
            "torch_extensions": os.environ.get("TORCH_EXTENSIONS_DIR")
            or os.path.expanduser("~/.cache/torch_extensions"),
        }
        result["caches_at_start"] = {k: {"path": v, "existed": os.path.isdir(v)}
                                     for k, v in caches.items()}
        ceiling = None
        if not args.no_ceiling:
            try:
                c = matmul_ceiling(ctx)
                result["ceiling"] = c
                ceiling = result["ceiling_tflops"] = c["tflops_mean_of_ten"]
            except Exception as e:  # noqa: BLE001
                result["ceiling_error"] = f"{type(e).__name__}: {e}"
        save()
        deepspeed = None
        if "deepspeed" in impls:
            try:
                deepspeed = ds_import()
                result["deepspeed"] = deepspeed.__version__
            except Exception as e:  # noqa: BLE001
                deepspeed = f"{type(e).__name__}: {e}"[-2000:]
                result["deepspeed_error"] = deepspeed
                print(traceback.format_exc(), file=sys.stderr)
        batches = make_batches(ctx, args.steps)
        for name in configs:
            for impl in impls:
                print(f"== {name} / {impl}", file=sys.stderr, flush=True)
                result["runs"].append(
                    measure(ctx, name, CONFIGS[name], impl, batches, args, ceiling, deepspeed))
                save()
        if deepspeed is not None and not isinstance(deepspeed, str):
            try:
                if torch.distributed.is_initialized():
                    torch.distributed.destroy_process_group()
            except Exception:  # noqa: BLE001
                pass
    except Exception as e:  # noqa: BLE001  (torch itself missing, say)
        result["error"] = f"{type(e).__name__}: {e}"
        print(traceback.format_exc(), file=sys.stderr)
    save()
    print(table(result), file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.dup2(real_stdout, 1)
    print(json.dumps(result), flush=True)
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
