#!/usr/bin/env python3
"""Compares two runs of compiled programs: per-step losses (from --log JSON
lines) and the parameters at the end (from --dump-params). Used to prove that
a sharded program (any ZeRO stage, any number of ranks) trains exactly as the
single-rank program on the full batch.

  compare_runs.py REF.jsonl REF.safetensors RUN.jsonl RUN.safetensors [--tol 1e-6]

Prints `bitwise` when everything is identical, else the largest relative
difference; exits 1 when it exceeds --tol."""
import argparse
import json
import sys

import numpy as np
from safetensors.numpy import load_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref_log")
    ap.add_argument("ref_params")
    ap.add_argument("log")
    ap.add_argument("params")
    ap.add_argument("--tol", type=float, default=1e-6)
    a = ap.parse_args()
    ref_l = [json.loads(l)["loss"] for l in open(a.ref_log)]
    run_l = [json.loads(l)["loss"] for l in open(a.log)]
    if len(ref_l) != len(run_l):
        sys.exit(f"FAILED: {len(run_l)} steps logged, reference has {len(ref_l)}")
    worst = 0.0
    exact = True
    for r, o in zip(ref_l, run_l):
        exact &= r == o
        worst = max(worst, abs(r - o) / max(abs(r), 1e-30))
    ref_p, run_p = load_file(a.ref_params), load_file(a.params)
    if set(ref_p) != set(run_p):
        sys.exit(f"FAILED: tensors differ: {sorted(set(ref_p) ^ set(run_p))}")
    for k in ref_p:
        r, o = ref_p[k].astype(np.float64), run_p[k].astype(np.float64)
        if r.shape != o.shape:
            sys.exit(f"FAILED: {k} has shape {o.shape}, reference {r.shape}")
        exact &= bool(np.array_equal(r, o))
        n = np.linalg.norm(r)
        worst = max(worst, np.linalg.norm(r - o) / (n if n > 0 else 1.0))
    if exact:
        print(f"bitwise: {len(ref_l)} losses and {len(ref_p)} tensors identical")
        return
    print(f"max relative difference {worst:.2e} (bound {a.tol:g})")
    if worst > a.tol:
        sys.exit("FAILED")
    print("OK")


if __name__ == "__main__":
    main()
