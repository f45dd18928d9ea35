#!/usr/bin/env python3
"""GPT-2 124M (nanoGPT's model: 12 layers, 768 wide, 12 heads, 1024 tokens,
vocabulary 50257, tied embeddings, no dropout) for the H200 benchmark.

  export OUT.onnx [--vocab N]
                       write the training graph (model + mean cross-entropy)
                       with the legacy exporter, opset 17; the weights go to
                       external data, which is then deleted: dsc compiles the
                       step from shapes alone and the program starts with
                       --init random.
  torch [options]      time the same model in PyTorch on this machine's GPU:
                       median step time after warm-up, peak memory
                       (torch.cuda.max_memory_allocated), fused AdamW.

Both use the same module, so the side-by-side numbers time the same math.
"""

import argparse
import json
import math
import os
import sys
import time


def build(torch, block_size=1024, vocab_size=50257, n_layer=12, n_head=12,
          n_embd=768, sdpa=False):
    import torch.nn as nn
    import torch.nn.functional as F

    class LayerNorm(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n))
            self.bias = nn.Parameter(torch.zeros(n))

        def forward(self, x):
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(n_embd, dim=2)
            q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
            k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
            v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
            if sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                att = att.masked_fill(~mask, float("-inf"))
                att = F.softmax(att, dim=-1)
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.gelu = nn.GELU(approximate="tanh")
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = LayerNorm(n_embd)
            self.attn = Attention()
            self.ln_2 = LayerNorm(n_embd)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab_size, n_embd)
            self.wpe = nn.Embedding(block_size, n_embd)
            self.h = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f = LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
            self.wte.weight = self.lm_head.weight  # tied, as GPT-2

        def forward(self, idx, targets):
            b, t = idx.size()
            pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)),
                                   targets.view(-1))

    torch.manual_seed(0)
    return GPT()


def export(args):
    import onnx
    import torch
    model = build(torch, vocab_size=args.vocab)
    # Traced with one sequence (the activations of 16 would take ~20 GB of
    # host memory); the batch dim is symbolic and dsc compile --micro-batch
    # sets it.
    idx = torch.zeros(1, 1024, dtype=torch.long)
    tmp = args.out + ".full.onnx"
    torch.onnx.export(model, (idx, idx), tmp, dynamo=False, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["idx", "targets"],
                      output_names=["loss"], export_params=True,
                      dynamic_axes={"idx": {0: "batch"}, "targets": {0: "batch"}})
    m = onnx.load(tmp)
    os.remove(tmp)
    data = os.path.basename(args.out) + ".weights"
    onnx.save_model(m, args.out, save_as_external_data=True,
                    all_tensors_to_one_file=True, location=data,
                    size_threshold=4096)
    weights = os.path.join(os.path.dirname(os.path.abspath(args.out)), data)
    size = os.path.getsize(weights)
    os.remove(weights)  # compiled from shapes alone; --init random
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes; "
          f"{size / 2**20:.0f} MiB of weights left out)")


def bench_torch(args):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    dev = "cuda"
    model = build(torch, sdpa=args.sdpa).to(dev)
    if args.compile:
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1,
                            fused=True)
    g = torch.Generator(device=dev).manual_seed(0)
    B, T = args.micro_batch, 1024
    times = []
    torch.cuda.reset_peak_memory_stats()
    for step in range(args.steps):
        idx = torch.randint(0, 50257, (B, T), device=dev, generator=g)
        tgt = torch.randint(0, 50257, (B, T), device=dev, generator=g)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.bf16):
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    warm = times[args.warmup:]
    warm.sort()
    median = warm[len(warm) // 2]
    result = {
        "impl": "pytorch " + torch.__version__,
        "precision": "bf16 autocast" if args.bf16 else
                     ("fp32 (tf32 matmul)" if args.tf32 else "fp32"),
        "attention": "sdpa" if args.sdpa else "matmul+softmax",
        "compile": bool(args.compile),
        "micro_batch": B,
        "median_step_s": median,
        "tokens_per_s": B * T / median,
        "peak_bytes": torch.cuda.max_memory_allocated(),
        "final_loss": float(loss),
        "card": torch.cuda.get_device_name(),
    }
    print(json.dumps(result))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("out")
    e.add_argument("--vocab", type=int, default=50257,
                   help="50304: nanoGPT's padded vocabulary, as "
                        "bench/peers_bf16.py's nanogpt config")
    t = sub.add_parser("torch")
    t.add_argument("--micro-batch", type=int, default=16)
    t.add_argument("--steps", type=int, default=20)
    t.add_argument("--warmup", type=int, default=5)
    t.add_argument("--bf16", action="store_true")
    t.add_argument("--tf32", action="store_true")
    t.add_argument("--sdpa", action="store_true")
    t.add_argument("--compile", action="store_true")
    args = p.parse_args()
    if args.cmd == "export":
        export(args)
    else:
        bench_torch(args)


if __name__ == "__main__":
    sys.exit(main())
