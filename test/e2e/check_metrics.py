#!/usr/bin/env python3
"""Checks that the metrics a run wrote, read back by TensorBoard's, MLflow's
and Python's own readers (test/tools/read_metrics.py), hold the losses,
learning rates and gradient norms of its --log, step by step.

  check_metrics.py LOG.jsonl --tensorboard DIR --mlflow DIR --csv DIR/JOB

Prints one line per reader (`tensorboard: 5 steps of loss, lr, grad_norm
match`), then MLflow's run status and recorded params; exits 1 on a
mismatch."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import read_metrics  # noqa: E402

KEYS = ["loss", "lr", "grad_norm"]


def compare(name, log, series, rel):
    """series: key -> [(step, value)]; checks every logged step."""
    for key in KEYS:
        got = dict(series.get(key, []))
        for row in log:
            want = row[key]
            v = got.get(row["step"])
            if v is None or abs(v - want) > rel * abs(want):
                sys.exit(f"FAILED: {name} {key} at step {row['step']}: "
                         f"{v} vs the log's {want}")
    print(f"{name}: {len(log)} steps of {', '.join(KEYS)} match")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--tensorboard")
    ap.add_argument("--mlflow")
    ap.add_argument("--csv")
    a = ap.parse_args()
    log = [json.loads(l) for l in open(a.log)]
    if a.tensorboard:
        tb = read_metrics.read_tensorboard(a.tensorboard)["scalars"]
        compare("tensorboard", log, {
            k: [(e["step"], e["value"]) for e in tb.get("train/" + k, [])]
            for k in KEYS}, 1e-6)  # float32 simple_value
    if a.mlflow:
        exps = read_metrics.read_mlflow(a.mlflow)
        runs = [r for e in exps.values() for r in e["runs"]]
        if len(runs) != 1:
            sys.exit(f"FAILED: {len(runs)} MLflow runs")
        run = runs[0]
        compare("mlflow", log, {
            k: [(m["step"], m["value"]) for m in run["metrics"].get(
                "train/" + k, [])] for k in KEYS}, 1e-8)
        print(f"mlflow run {run['run_name']}: {run['status']}, params "
              + ", ".join(sorted(p for p in run["params"]
                                 if not p.startswith("hyper/"))))
    if a.csv:
        files = {"loss": "Train_Steps_train_loss.csv",
                 "lr": "Train_Steps_lr.csv",
                 "grad_norm": "train_grad_norm.csv"}
        series = {}
        for k, f in files.items():
            with open(os.path.join(a.csv, f)) as fh:
                rows = [l.strip().split(",") for l in fh][1:]
            series[k] = [(int(s), float(v)) for s, v in rows]
        compare("csv", log, series, 1e-8)


if __name__ == "__main__":
    main()
