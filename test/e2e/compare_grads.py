#!/usr/bin/env python3
"""Compares the gradients of a mixed-precision program with those of the
fp32 program (both from --dump-grads): the relative error over all
gradients together, ||g - g_ref|| / ||g_ref||, against a bound given in
units of the 16-bit format's unit roundoff u (bf16 2^-8, fp16 2^-11).

  compare_grads.py REF.safetensors RUN.safetensors --precision bf16 --units 4

Prints the error in units of u and per tensor the worst; exits 1 above the
bound. With --peer PEER.safetensors (PyTorch autocast's gradients of the
same step) and REF the float64 gradients, RUN passes when its error against
REF is at most --factor times the peer's, or within --units u: as accurate
as autocast, whatever the two do differently. docs/numerics.md says why each fixture has the bound it has."""
import argparse
import sys

import numpy as np
from safetensors.numpy import load_file

UNIT_ROUNDOFF = {"bf16": 2.0**-8, "fp16": 2.0**-11}


def error(ref, run):
    """||run - ref|| / ||ref|| over all tensors, and the worst tensor."""
    if set(ref) != set(run):
        sys.exit(f"FAILED: tensors differ: {sorted(set(ref) ^ set(run))}")
    num = den = 0.0
    worst, worst_name = 0.0, ""
    for k in ref:
        r, o = ref[k].astype(np.float64), run[k].astype(np.float64)
        if r.shape != o.shape:
            sys.exit(f"FAILED: {k} has shape {o.shape}, reference {r.shape}")
        if not np.all(np.isfinite(o)):
            sys.exit(f"FAILED: {k} holds inf or nan")
        d, n = np.linalg.norm(r - o), np.linalg.norm(r)
        num, den = num + d * d, den + n * n
        if n > 0 and d / n > worst:
            worst, worst_name = d / n, k
    return (np.sqrt(num / den) if den > 0 else np.sqrt(num)), (worst, worst_name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("run")
    ap.add_argument("--precision", choices=sorted(UNIT_ROUNDOFF), required=True)
    ap.add_argument("--units", type=float, required=True)
    ap.add_argument("--peer")
    ap.add_argument("--factor", type=float, default=1.5)
    a = ap.parse_args()
    ref, run = load_file(a.ref), load_file(a.run)
    if a.peer:
        peer = load_file(a.peer)
        u = UNIT_ROUNDOFF[a.precision]
        ours, _ = error(ref, run)
        theirs, _ = error(ref, peer)
        between, _ = error(peer, run)
        print(f"{a.precision} against float64: ours {ours:.3e} ({ours / u:.2f} u), "
              f"autocast {theirs:.3e} ({theirs / u:.2f} u); ours against "
              f"autocast {between:.3e}")
        if ours > max(a.factor * theirs, a.units * u):
            sys.exit("FAILED")
        print("OK")
        return
    err, (worst, worst_name) = error(ref, run)
    u = UNIT_ROUNDOFF[a.precision]
    print(f"{a.precision}: relative error {err:.3e} = {err / u:.2f} u "
          f"(bound {a.units:g} u); worst tensor {worst_name} {worst:.3e}")
    if err > a.units * u:
        sys.exit("FAILED")
    print("OK")


if __name__ == "__main__":
    main()
