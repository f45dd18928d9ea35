#!/usr/bin/env python3
"""Where a compiled dsc step spends its GPU time, kernel by kernel.

  python3 bench/kernel_breakdown.py --out kernels.json -- ./train --steps 1 ...

Runs the program once under Nsight Compute with one metric
(gpu__time_duration.sum: each kernel's duration, one pass, no replay), then
sums the durations by kernel family (cuBLASLt GEMMs, generated fused
elementwise chains, softmax, layer norm, the loss, the optimizer, casts,
data movement, reductions, collectives...) and prints the families and the
top kernels with their share of the step. Kernel time only: the gaps
between kernels (launch overhead, host work) are the step time minus the
sum."""
import argparse
import collections
import csv
import io
import json
import os
import subprocess
import sys
import tempfile

FAMILIES = [
    # cuDNN's SDPA kernels (and the dQ reduction of its deterministic
    # backward) before the cuDNN catch-all below.
    ("attention", ("sdpa", "flash", "attention", "matmul_dq")),
    ("gemm (cuBLASLt)", ("gemm", "gemv", "cutlass", "sm90_xmma", "nvjet", "cublas")),
    ("fused elementwise (generated)", ("fused",)),
    ("softmax", ("softmax",)),
    ("layer norm", ("layernorm", "layer_norm", "layerNorm")),
    ("loss", ("crossentropy", "cross_entropy", "classloss", "nll")),
    ("optimizer", ("adamw", "sgd", "optimizer")),
    ("cast", ("cast",)),
    ("reduction", ("reduce", "sum")),
    ("data movement", ("transpose", "copy", "gather", "scatter", "slice",
                       "concat", "expand", "pad", "strided")),
    ("elementwise (runtime)", ("unary", "binary", "where", "gelu")),
    ("collectives", ("nccl",)),
    ("convolution (cuDNN)", ("conv", "cudnn", "implicit")),
]


def family(name):
    low = name.lower()
    for fam, keys in FAMILIES:
        if any(k.lower() in low for k in keys):
            return fam
    return "other"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        sys.exit("kernel_breakdown: no program given (after --)")
    log = tempfile.NamedTemporaryFile(suffix=".csv", delete=False).name
    # Clocks as the program runs them (ncu locks them to base by default).
    run = [a.ncu, "--csv", "--clock-control", "none", "--print-units", "base", "--metrics",
           "gpu__time_duration.sum", "--log-file", log] + cmd
    r = subprocess.run(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode != 0:
        sys.exit(f"kernel_breakdown: ncu failed ({r.returncode}):\n{r.stdout[-2000:]}")
    text = open(log).read()
    os.unlink(log)
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    by_kernel = collections.Counter()
    count = collections.Counter()
    for row in rows:
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ns = float(row["Metric Value"].replace(",", ""))
        name = row["Kernel Name"]
        by_kernel[name] += ns
        count[name] += 1
    total = sum(by_kernel.values())
    if total == 0:
        sys.exit("kernel_breakdown: no kernel timings in ncu's output")
    fams = collections.Counter()
    fam_count = collections.Counter()
    for k, v in by_kernel.items():
        fams[family(k)] += v
        fam_count[family(k)] += count[k]
    print(f"{sum(count.values())} kernel launches, {total / 1e6:.2f} ms of kernel time")
    print(f"{'family':34} {'launches':>8} {'ms':>9} {'share':>7}")
    for f, v in fams.most_common():
        print(f"{f:34} {fam_count[f]:8d} {v / 1e6:9.2f} {v / total:7.1%}")
    print(f"\ntop {a.top} kernels")
    for k, v in by_kernel.most_common(a.top):
        print(f"{v / 1e6:9.2f} ms {v / total:6.1%} x{count[k]:<4d} {k[:100]}")
    if a.out:
        json.dump({"launches": sum(count.values()), "kernel_ms": total / 1e6,
                   "families": {f: {"ms": v / 1e6, "launches": fam_count[f]}
                                for f, v in fams.items()},
                   "kernels": [{"name": k, "ms": v / 1e6, "launches": count[k]}
                               for k, v in by_kernel.most_common()]},
                  open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
