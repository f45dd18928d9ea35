#!/usr/bin/env python3
"""Llama shapes for the benchmarks: HF LlamaForCausalLM in its default
configuration but for the sizes.

  --shape 1b (default): the Llama-3.2-1B shape of issue 11 (16 layers, width
      2048, 32 heads / 8 kv heads, MLP 8192, vocab 128256, tied
      embeddings), 4 x 2048 tokens
  --shape 7b: the Llama-2-7B shape of issue 12 (32 layers, width 4096, 32
      heads, MLP 11008, vocab 32000, untied), 1 x 2048 tokens
  --shape qwen3-0.6b, gemma-2b: other families at a real model's size
      (Qwen3ForCausalLM, GemmaForCausalLM), 4 x 2048 tokens

  python3 bench/llama_1b.py export [--shape S] OUT.onnx
      the training graph (shifted mean cross-entropy) by the legacy exporter,
      opset 17, weights left out (dsc compiles it from shapes, --init
      random). The parameters are never initialized (meta device, then
      untouched memory), so a 7B graph exports in a few GiB of memory; they
      go in as graph inputs and come out as external initializers whose
      file does not exist.
  python3 bench/llama_1b.py torch [--shape S] [--compile]
      PyTorch on the same card: bf16 autocast, fp32 masters,
      AdamW(fused=True); one JSON line
  python3 bench/llama_1b.py deepspeed-offload [--shape S]
      DeepSpeed ZeRO-2 with offload_optimizer: cpu (bench/install_deepspeed.sh
      first); one JSON line

torch runs on the GPU machine, or here in a virtual environment for export."""
import argparse
import json
import os
import re
import statistics
import sys
import time

SHAPES = {
    "1b": (dict(num_hidden_layers=16, hidden_size=2048, num_attention_heads=32,
                num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
                tie_word_embeddings=True, max_position_embeddings=2048), 4),
    "7b": (dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                num_key_value_heads=32, intermediate_size=11008, vocab_size=32000,
                tie_word_embeddings=False, max_position_embeddings=4096), 1),
}
# Other families at a real model's size (their HF configuration classes,
# defaults otherwise), for runs beside the Llama shapes: Qwen3-0.6B and
# Gemma-2B (head_dim 256, one key/value head, a 256k vocabulary).
SHAPES.update({
    "qwen3-0.6b": (dict(num_hidden_layers=28, hidden_size=1024, num_attention_heads=16,
                        num_key_value_heads=8, head_dim=128, intermediate_size=3072,
                        vocab_size=151936, tie_word_embeddings=True,
                        max_position_embeddings=4096), 4),
    "gemma-2b": (dict(num_hidden_layers=18, hidden_size=2048, num_attention_heads=8,
                      num_key_value_heads=1, head_dim=256, intermediate_size=16384,
                      vocab_size=256000, tie_word_embeddings=True,
                      max_position_embeddings=4096), 4),
})
FAMILY = {"qwen3-0.6b": "Qwen3", "gemma-2b": "Gemma"}  # else Llama
SHAPE, B = SHAPES["1b"]
NAME = "1b"
T = 2048


def use_shape(name):
    global SHAPE, B, NAME
    SHAPE, B = SHAPES[name]
    NAME = name


def build(torch):
    import torch.nn as nn
    import torch.nn.functional as F
    import transformers as tf

    class CausalLM(nn.Module):
        def __init__(self):
            super().__init__()
            family = FAMILY.get(NAME, "Llama")
            config = getattr(tf, family + "Config")(**SHAPE)
            self.model = getattr(tf, family + "ForCausalLM")(config)

        def forward(self, input_ids, labels):
            # all ones, as a tokenizer gives it for unpadded text (without
            # it the mask is built with aten::diff, which opset 17 lacks)
            attention_mask = torch.ones_like(input_ids)
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                use_cache=False).logits
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                   labels.reshape(-1))

    torch.manual_seed(0)
    return CausalLM()


def export(args):
    import onnx
    import torch
    with torch.device("meta"):
        model = build(torch)
    # Untouched memory (zero pages): the trace computes with it but nothing
    # is written, so the parameters cost address space, not memory.
    model = model.to_empty(device="cpu")
    model.model.tie_weights()  # to_empty gave each name its own tensor
    if SHAPE["tie_word_embeddings"]:
        assert model.model.lm_head.weight is model.model.model.embed_tokens.weight
    fix_buffers(torch, model)
    names = [n for n, _ in model.named_parameters()]
    ids = torch.zeros(1, T, dtype=torch.long)
    tmp = args.out + ".tmp.onnx"
    # No autograd: a 7B trace would keep every activation for a backward.
    with torch.no_grad():
        torch.onnx.export(model, (ids, ids), tmp, dynamo=False, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, export_params=False,
                          input_names=["input_ids", "labels"] + names,
                          output_names=["loss"],
                          dynamic_axes={"input_ids": {0: "batch"},
                                        "labels": {0: "batch"}})
    m = onnx.load(tmp)
    os.remove(tmp)
    # A tied weight is one parameter under two names in the state dict, and
    # the exporter makes an input of each: the alias reads the parameter.
    first = {}
    aliases = {}
    for name, t in model.state_dict(keep_vars=True).items():
        if isinstance(t, torch.nn.Parameter):
            aliases[name] = first.setdefault(id(t), name)
    params_as_external(onnx, m, os.path.basename(args.out) + ".weights", aliases)
    onnx.save_model(m, args.out)
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes; {n} parameters "
          f"left out)")


def fix_buffers(torch, model):
    """Buffers the graph computes with (rotary frequencies) from a one-layer
    model on the CPU: to_empty left them uninitialized."""
    global SHAPE
    full = SHAPE
    SHAPE = dict(full, num_hidden_layers=1)
    try:
        small = dict(build(torch).named_buffers())
    finally:
        SHAPE = full
    with torch.no_grad():
        for name, buf in model.named_buffers():
            buf.copy_(small[re.sub(r"layers\.\d+\.", "layers.0.", name)])
    for mod in model.modules():
        if hasattr(mod, "original_inv_freq"):
            mod.original_inv_freq = mod.inv_freq.clone()


def params_as_external(onnx, m, location, aliases):
    """The parameters the exporter made graph inputs become initializers
    whose data lies in LOCATION, a file that is never written; an input that
    ALIASES names as another's (a tied weight) is replaced by that one."""
    g = m.graph
    keep, offset = [], 0
    for inp in g.input:
        if inp.name in ("input_ids", "labels"):
            keep.append(inp)
            continue
        canonical = aliases.get(inp.name, inp.name)
        if canonical != inp.name:
            for node in g.node:
                for i, x in enumerate(node.input):
                    if x == inp.name:
                        node.input[i] = canonical
            continue
        tt = inp.type.tensor_type
        dims = [d.dim_value for d in tt.shape.dim]
        t = onnx.TensorProto(name=inp.name, data_type=tt.elem_type, dims=dims)
        t.data_location = onnx.TensorProto.EXTERNAL
        size = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).itemsize
        for d in dims:
            size *= d
        for k, v in (("location", location), ("offset", str(offset)), ("length", str(size))):
            e = t.external_data.add()
            e.key, e.value = k, v
        offset += (size + 4095) // 4096 * 4096
        g.initializer.append(t)
    del g.input[:]
    g.input.extend(keep)


def bench_torch(args):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = True
    model = build(torch).cuda()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, fused=True)
    step_fn = model
    if args.compile:
        step_fn = torch.compile(model)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, SHAPE["vocab_size"], (B, T + 1), generator=g)
               for _ in range(4)]
    torch.cuda.reset_peak_memory_stats()
    times = []
    t_first = time.perf_counter()
    for i in range(args.steps):
        b = batches[i % 4].cuda()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(b[:, :-1], b[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if i == 0:
            first = time.perf_counter() - t_first
    t = statistics.median(times[args.warmup:])
    heads = SHAPE["num_attention_heads"]
    width = SHAPE.get("head_dim", SHAPE["hidden_size"] // heads) * heads
    flops = 6 * params * B * T + 12 * SHAPE["num_hidden_layers"] * T * T * width * B
    print(json.dumps(dict(impl="torch.compile" if args.compile else "eager", model=f"{FAMILY.get(NAME, 'llama')} {args.shape} shape",
                          params=params, median_step_ms=t * 1e3, tokens_per_s=B * T / t,
                          flops_per_step=flops, first_step_s=first,
                          peak_gib=torch.cuda.max_memory_allocated() / 2**30,
                          loss=float(loss), steps=args.steps, warmup=args.warmup)))


def bench_deepspeed_offload(args):
    """DeepSpeed ZeRO-2 with offload_optimizer: cpu on the same module (the
    issue's anchor): bf16, fp32 masters and AdamW state in pinned host
    memory, DeepSpeedCPUAdam (JIT-built at first use). One process, one GPU;
    one JSON line."""
    import resource
    import deepspeed
    import torch
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    deepspeed.init_distributed(dist_backend="nccl")
    model = build(torch)
    params = sum(p.numel() for p in model.parameters())
    config = {
        "train_micro_batch_size_per_gpu": B,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2,
                              "offload_optimizer": {"device": "cpu", "pin_memory": True}},
        "optimizer": {"type": "AdamW", "params": {"lr": 6e-4}},
        "steps_per_print": 10 ** 9,
    }
    t0 = time.perf_counter()
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config)
    init_s = time.perf_counter() - t0
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, SHAPE["vocab_size"], (B, T + 1), generator=g)
               for _ in range(4)]
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(args.steps):
        b = batches[i % 4].cuda()
        torch.cuda.synchronize()
        t = time.perf_counter()
        loss = engine(b[:, :-1], b[:, 1:])
        engine.backward(loss)
        engine.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    t = statistics.median(times[args.warmup:])
    print(json.dumps(dict(impl="deepspeed zero2 offload_optimizer cpu", model=f"{FAMILY.get(NAME, 'llama')} {args.shape} shape",
                          params=params, median_step_ms=t * 1e3, tokens_per_s=B * T / t,
                          init_s=init_s, optimizer=type(engine.optimizer.optimizer).__name__,
                          peak_gib=torch.cuda.max_memory_allocated() / 2**30,
                          reserved_gib=torch.cuda.max_memory_reserved() / 2**30,
                          host_peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                          loss=float(loss), steps=args.steps, warmup=args.warmup)))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("out")
    e.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    t = sub.add_parser("torch")
    t.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    t.add_argument("--compile", action="store_true")
    t.add_argument("--steps", type=int, default=20)
    t.add_argument("--warmup", type=int, default=8)
    d = sub.add_parser("deepspeed-offload")
    d.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    d.add_argument("--steps", type=int, default=10)
    d.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    use_shape(args.shape)
    run = {"export": export, "torch": bench_torch, "deepspeed-offload": bench_deepspeed_offload}
    return run[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
