#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention, forward + backward, at the layer
shapes dsc-attention-bench times (GPT-2 124M: 16 x 12 heads x 1024 x 64;
Llama-3.2-1B: 4 x 32 query / 8 key-value heads x 2048 x 64), causal, bf16,
per backend (cuDNN, flash, memory-efficient); CUDA events, median of 20
after 3 warm-ups, TFLOP/s with the causal count of dsc-attention-bench
(4 B H T^2 D / 2 forward, 2.5x that backward). One JSON line per case.
Run on the GPU machine: python3 bench/attention_torch.py"""
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [("gpt2-124m", 16, 12, 12, 1024, 64), ("llama-3.2-1b", 4, 32, 8, 2048, 64)]
BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def timed(fn, iters=20, warmup=3):
    times = []
    for i in range(warmup + iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    for name, b, hq, hkv, t, d in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, hq, t, d, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(b, hkv, t, d, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(b, hkv, t, d, device="cuda", dtype=torch.bfloat16, generator=g)
        q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
        dout = torch.randn(b, hq, t, d, device="cuda", dtype=torch.bfloat16, generator=g)
        flops = 4 * b * hq * t * t * d / 2
        for bname, backend in BACKENDS:
            row = dict(shape=name, backend=bname)
            try:
                with sdpa_kernel([backend]):
                    def fwd():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                              enable_gqa=hkv != hq)
                    out = fwd()
                    fwd_ms = timed(fwd)
                    def fwdbwd():
                        o = fwd()
                        torch.autograd.grad(o, (q, k, v), dout)
                    total = timed(fwdbwd)
                row.update(fwd_ms=fwd_ms, bwd_ms=total - fwd_ms, fwd_bwd_ms=total,
                           fwd_tflops=flops / fwd_ms / 1e9,
                           bwd_tflops=2.5 * flops / (total - fwd_ms) / 1e9)
            except Exception as e:  # noqa: BLE001
                row["error"] = str(e).splitlines()[0][:200]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
