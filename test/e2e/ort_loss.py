#!/usr/bin/env python3
"""The loss an ONNX training graph computes in onnxruntime on a batch.

  ort_loss.py MODEL.onnx BATCH.safetensors [--rows N]
  ort_loss.py MODEL.onnx --tokens FILE.bin [--rows N]

Feeds every graph input from the batch file (its first N rows), or for a
language model (inputs idx/input_ids and targets/labels of [B, T]) N
windows of a uint16 token file read from its start, and prints `loss X`
(the graph's first output)."""
import argparse

import numpy as np
import onnxruntime as ort
from safetensors.numpy import load_file


def windows(session, path, rows):
    """Rows of consecutive tokens x[i:i+T] and the targets x[i+1:i+T+1]."""
    tokens = np.fromfile(path, dtype=np.uint16).astype(np.int64)
    inputs = session.get_inputs()
    t = inputs[0].shape[1]
    rows = rows or 4
    starts = [(k * (t + 1)) % (len(tokens) - t - 1) for k in range(rows)]
    x = np.stack([tokens[i:i + t] for i in starts])
    y = np.stack([tokens[i + 1:i + t + 1] for i in starts])
    return {inputs[0].name: x, inputs[-1].name: y} if len(inputs) > 1 else {
        inputs[0].name: x}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("batch", nargs="?")
    ap.add_argument("--tokens")
    ap.add_argument("--rows", type=int, default=0)
    a = ap.parse_args()
    s = ort.InferenceSession(a.model, providers=["CPUExecutionProvider"])
    batch = load_file(a.batch) if a.batch else windows(s, a.tokens, a.rows)
    feeds = {}
    for i in s.get_inputs():
        v = batch[i.name]
        feeds[i.name] = v[:a.rows] if a.rows else v
    loss = s.run(None, feeds)[0]
    print(f"loss {float(np.asarray(loss)):.9g}")


if __name__ == "__main__":
    main()
