#!/usr/bin/env python3
"""Checks on the --log JSON lines of mixed-precision runs.

  compare_curves.py REF.jsonl RUN.jsonl --band B   every step's loss within
                                                   a relative band of REF's
  compare_curves.py --check-recovery RUN.jsonl     fp16: steps were skipped,
                                                   skipped steps kept the
                                                   loss, and the loss then
                                                   fell and the scale grew
  compare_curves.py --same-skips REF.jsonl RUN.jsonl   the same steps skipped
  compare_curves.py --count-skipped RUN.jsonl      prints the skip count
"""
import argparse
import json
import math
import sys


def load(path):
    return [json.loads(line) for line in open(path)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--band", type=float)
    ap.add_argument("--check-recovery", action="store_true")
    ap.add_argument("--same-skips", action="store_true")
    ap.add_argument("--count-skipped", action="store_true")
    a = ap.parse_args()
    runs = [load(p) for p in a.logs]
    if a.count_skipped:
        r = runs[0]
        print(f"skipped {sum(1 for s in r if s.get('skipped'))} of {len(r)}")
        return
    if a.same_skips:
        ref, run = runs
        want = [s["step"] for s in ref if s.get("skipped")]
        got = [s["step"] for s in run if s.get("skipped")]
        if want != got:
            sys.exit(f"FAILED: skipped steps {got}, reference {want}")
        print(f"OK: the same {len(want)} steps skipped")
        return
    if a.check_recovery:
        r = runs[0]
        skipped = [s for s in r if s.get("skipped")]
        if not skipped:
            sys.exit("FAILED: no step was skipped")
        last_skip = skipped[-1]["step"]
        after = [s for s in r if s["step"] > last_skip]
        if len(after) < 10:
            sys.exit("FAILED: too few steps after the last skip")
        if not all(math.isfinite(s["loss"]) for s in after):
            sys.exit("FAILED: a non-finite loss after recovery")
        if not after[-1]["loss"] < r[0]["loss"] - 0.5:
            sys.exit(f"FAILED: the loss did not fall ({r[0]['loss']} -> "
                     f"{after[-1]['loss']})")
        scales = [s["loss_scale"] for s in after]
        if not max(scales) > scales[0]:
            sys.exit("FAILED: the scale never grew again")
        print(f"OK: {len(skipped)} skipped, loss {r[0]['loss']:.3f} -> "
              f"{after[-1]['loss']:.3f}, scale {scales[0]:g} -> {scales[-1]:g}")
        return
    ref, run = runs
    if len(ref) != len(run):
        sys.exit(f"FAILED: {len(run)} steps, reference {len(ref)}")
    worst = max(abs(x["loss"] - y["loss"]) / abs(y["loss"])
                for x, y in zip(run, ref))
    print(f"largest relative loss difference {worst:.2e} (band {a.band:g})")
    if not worst <= a.band:
        sys.exit("FAILED")
    print("OK")


if __name__ == "__main__":
    main()
