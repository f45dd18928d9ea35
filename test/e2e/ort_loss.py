#!/usr/bin/env python3
"""The loss an ONNX training graph computes in onnxruntime on a batch.

  ort_loss.py MODEL.onnx BATCH.safetensors [--rows N]

Feeds every graph input from the batch file (its first N rows) and prints
`loss X` (the graph's first output)."""
import argparse

import numpy as np
import onnxruntime as ort
from safetensors.numpy import load_file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("batch")
    ap.add_argument("--rows", type=int, default=0)
    a = ap.parse_args()
    s = ort.InferenceSession(a.model, providers=["CPUExecutionProvider"])
    batch = load_file(a.batch)
    feeds = {}
    for i in s.get_inputs():
        v = batch[i.name]
        feeds[i.name] = v[:a.rows] if a.rows else v
    loss = s.run(None, feeds)[0]
    print(f"loss {float(np.asarray(loss)):.9g}")


if __name__ == "__main__":
    main()
