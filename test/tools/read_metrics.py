#!/usr/bin/env python3
"""Reads a run's metrics with the tools' own readers and prints them as JSON.

    read_metrics.py --tensorboard DIR   TensorBoard's EventAccumulator
    read_metrics.py --mlflow DIR        MlflowClient(tracking_uri="file:DIR")
    read_metrics.py --csv DIR           DIR/<job>/*.csv with the csv module

Any combination of the three; the output is one JSON object with a key per
reader, keys sorted, so that a lit test can FileCheck it. Needs the
`tensorboard` and `mlflow-skinny` packages (scripts/setup.sh installs them).
MLflow 3 reads a file store only with MLFLOW_ALLOW_FILE_STORE=true; this
script sets it when it is unset.
"""

import argparse
import csv
import json
import os
import sys


def read_tensorboard(logdir):
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(
        logdir, size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    scalars = {}
    for tag in sorted(acc.Tags()["scalars"]):
        scalars[tag] = [
            {"step": e.step, "value": e.value, "wall_time": e.wall_time}
            for e in acc.Scalars(tag)
        ]
    return {"file_version": acc.file_version, "scalars": scalars}


def read_mlflow(root):
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri="file:" + os.path.abspath(root))
    experiments = {}
    for exp in client.search_experiments(view_type=ViewType.ALL):
        runs = []
        for run in client.search_runs([exp.experiment_id]):
            metrics = {}
            for key in sorted(run.data.metrics):
                history = client.get_metric_history(run.info.run_id, key)
                metrics[key] = [
                    {"step": m.step, "value": m.value, "timestamp": m.timestamp}
                    for m in sorted(history, key=lambda m: (m.step, m.timestamp))
                ]
            runs.append(
                {
                    "run_id": run.info.run_id,
                    "run_name": run.info.run_name,
                    "status": run.info.status,
                    "has_end_time": run.info.end_time is not None,
                    "artifact_uri": run.info.artifact_uri,
                    "params": dict(run.data.params),
                    "tags": {
                        k: v
                        for k, v in run.data.tags.items()
                        if k != "mlflow.user"  # differs between machines
                    },
                    "metrics": metrics,
                }
            )
        runs.sort(key=lambda r: r["run_name"] or "")
        experiments[exp.name] = {
            "lifecycle_stage": exp.lifecycle_stage,
            "runs": runs,
        }
    return experiments


def read_csv(root):
    jobs = {}
    for job in sorted(os.listdir(root)):
        folder = os.path.join(root, job)
        if not os.path.isdir(folder):
            continue
        files = {}
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".csv"):
                continue
            with open(os.path.join(folder, name), newline="") as f:
                rows = list(csv.reader(f))
            files[name] = {
                "header": rows[0] if rows else [],
                "rows": [[int(r[0]), float(r[1])] for r in rows[1:]],
            }
        jobs[job] = files
    return jobs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensorboard", metavar="DIR")
    parser.add_argument("--mlflow", metavar="DIR")
    parser.add_argument("--csv", metavar="DIR")
    args = parser.parse_args()
    if not (args.tensorboard or args.mlflow or args.csv):
        parser.error("give at least one of --tensorboard, --mlflow, --csv")
    found = {}
    if args.tensorboard:
        found["tensorboard"] = read_tensorboard(args.tensorboard)
    if args.mlflow:
        found["mlflow"] = read_mlflow(args.mlflow)
    if args.csv:
        found["csv"] = read_csv(args.csv)
    json.dump(found, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
