#!/usr/bin/env python3
"""compare_losses.py REF.jsonl RUN.jsonl TOL: the losses two --log files
recorded agree step by step within TOL (relative); exit 1 otherwise. For
runs whose parameters cannot be dumped (one process per GPU)."""
import json
import sys


def main():
    ref_path, run_path, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
    ref = [json.loads(line)["loss"] for line in open(ref_path)]
    run = [json.loads(line)["loss"] for line in open(run_path)]
    if len(ref) != len(run) or not ref:
        sys.exit(f"FAILED: {len(run)} steps logged, reference has {len(ref)}")
    if any(x is None for x in ref + run):
        sys.exit("FAILED: a loss is not finite")
    worst = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(ref, run))
    print(f"losses: max relative difference {worst:.2e} (bound {tol:g})")
    if worst > tol:
        sys.exit("FAILED")
    print("OK")


if __name__ == "__main__":
    main()
