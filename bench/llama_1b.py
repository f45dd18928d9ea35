#!/usr/bin/env python3
"""The Llama-3.2-1B shape of issue 11 (HF LlamaForCausalLM in its default
configuration but for the sizes: 16 layers, width 2048, 32 heads / 8 kv
heads, MLP 8192, vocab 128256, tied embeddings), 4 x 2048 tokens.

  python3 bench/llama_1b.py export OUT.onnx   # on the GPU machine (torch):
      the training graph (shifted mean cross-entropy) by the legacy exporter,
      opset 17, weights left out (dsc compiles it from shapes, --init random)
  python3 bench/llama_1b.py torch [--compile] # PyTorch on the same card:
      bf16 autocast, fp32 masters, AdamW(fused=True); one JSON line

Both run on the GPU machine (torch is not on the compile machine)."""
import argparse
import json
import os
import statistics
import sys
import time

SHAPE = dict(num_hidden_layers=16, hidden_size=2048, num_attention_heads=32,
             num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
             tie_word_embeddings=True, max_position_embeddings=2048)
B, T = 4, 2048


def build(torch):
    import torch.nn as nn
    import torch.nn.functional as F
    import transformers as tf

    class CausalLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = tf.LlamaForCausalLM(tf.LlamaConfig(**SHAPE))

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
    model = build(torch)
    ids = torch.zeros(1, T, dtype=torch.long)
    tmp = args.out + ".full.onnx"
    torch.onnx.export(model, (ids, ids), tmp, dynamo=False, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False,
                      input_names=["input_ids", "labels"], output_names=["loss"],
                      export_params=True,
                      dynamic_axes={"input_ids": {0: "batch"}, "labels": {0: "batch"}})
    m = onnx.load(tmp)
    os.remove(tmp)
    data = os.path.basename(args.out) + ".weights"
    onnx.save_model(m, args.out, save_as_external_data=True,
                    all_tensors_to_one_file=True, location=data, size_threshold=4096)
    weights = os.path.join(os.path.dirname(os.path.abspath(args.out)), data)
    size = os.path.getsize(weights)
    os.remove(weights)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes; "
          f"{size / 2**20:.0f} MiB of weights left out)")


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
    flops = 6 * params * B * T + 12 * SHAPE["num_hidden_layers"] * T * T * SHAPE["hidden_size"] * B
    print(json.dumps(dict(impl="torch.compile" if args.compile else "eager", model="llama3.2-1b shape",
                          params=params, median_step_ms=t * 1e3, tokens_per_s=B * T / t,
                          flops_per_step=flops, first_step_s=first,
                          peak_gib=torch.cuda.max_memory_allocated() / 2**30,
                          loss=float(loss), steps=args.steps, warmup=args.warmup)))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("out")
    t = sub.add_parser("torch")
    t.add_argument("--compile", action="store_true")
    t.add_argument("--steps", type=int, default=20)
    t.add_argument("--warmup", type=int, default=8)
    args = p.parse_args()
    return export(args) if args.cmd == "export" else bench_torch(args)


if __name__ == "__main__":
    sys.exit(main())
