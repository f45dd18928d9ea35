#!/usr/bin/env python3
"""How close two runs' losses are, step by step (an offloaded run against
the GPU optimizer's): the largest relative difference.

  close_losses.py RUN.jsonl BASE.jsonl"""
import json
import os
import sys


def main():
    run, base = sys.argv[1], sys.argv[2]
    if not os.path.exists(base):
        print(f"close_losses: no {base} (run its part first)")
        return
    a = [json.loads(l)["loss"] for l in open(run)]
    b = [json.loads(l)["loss"] for l in open(base)]
    n = min(len(a), len(b))
    worst = max((abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b)),
                default=0.0)
    print(f"{run} against {base}: {n} steps, largest relative loss "
          f"difference {worst:.2e}; first {a[:1]} vs {b[:1]}")


if __name__ == "__main__":
    main()
