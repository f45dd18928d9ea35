#!/usr/bin/env python3
"""A two-rank checkpoint written the way the runtime writes one, for
test/tools/checkpoint.test, and the checks of what `dsc checkpoint` makes of
it.

  checkpoint_fixture.py make DIR            DIR/step_3 (2 ranks, ZeRO pieces of
                                            a flat bucket), DIR/latest, and
                                            DIR/model.onnx, DIR/ext/model.onnx
                                            (the same model, external data)
  checkpoint_fixture.py safetensors FILE    every parameter of FILE against the
                                            values the checkpoint holds
  checkpoint_fixture.py index INDEX.json    the same through a shard index
  checkpoint_fixture.py onnx MODEL.onnx     the initializers of MODEL (in their
                                            own element type)
  checkpoint_fixture.py flip FILE           flips one byte near FILE's end

Prints one line per check for FileCheck; exits 1 with the tensor's name on a
mismatch.
"""

import hashlib
import json
import os
import struct
import sys

import numpy as np

# Logical tensors (float32) and their values: element i of tensor k is
# k * 1000 + i.
TENSORS = [
    ("param/a", [4, 6]),
    ("param/b", [11]),
    ("param/c", [3, 3]),
    ("optim/param/a/exp_avg", [4, 6]),
]


def full(k, shape):
    n = int(np.prod(shape))
    return (np.arange(n, dtype=np.float32) + k * 1000).reshape(shape)


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    offset = 0
    blobs = []
    for name, arr in tensors:
        b = arr.astype(np.float32).tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(b)],
        }
        offset += len(b)
        blobs.append(b)
    text = json.dumps(header).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def make(root):
    step = os.path.join(root, "step_3")
    os.makedirs(step, exist_ok=True)
    total = sum(int(np.prod(s)) for _, s in TENSORS)
    ranks = 2
    per = (total + ranks - 1) // ranks
    files, pieces = [], {name: [] for name, _ in TENSORS}
    for r in range(ranks):
        lo, hi = r * per, min(total, (r + 1) * per)
        stored, start = [], 0
        for k, (name, shape) in enumerate(TENSORS):
            n = int(np.prod(shape))
            a, b = max(lo, start), min(hi, start + n)
            if a < b:
                off = a - start
                whole = off == 0 and b - a == n
                tname = name if whole else f"{name}@{off}"
                data = full(k, shape)
                stored.append((tname, data if whole else data.reshape(-1)[off : off + b - a]))
                pieces[name].append(
                    {"file": r, "tensor": tname, "offset": off, "numel": b - a}
                )
            start += n
        fname = f"rank_{r:05d}.safetensors"
        path = os.path.join(step, fname)
        write_safetensors(path, stored, {"format": "dsc-checkpoint", "rank": str(r)})
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        files.append(
            {"name": fname, "rank": r, "bytes": os.path.getsize(path), "sha256": digest}
        )
    manifest = {
        "format": "dsc-checkpoint",
        "version": 1,
        "step": 3,
        "dsc_version": "dsc 0.1",
        "model": {"path": os.path.join(root, "model.onnx"), "sha256": ""},
        "optimizer": "adamw",
        "precision": "fp32",
        "world_size": ranks,
        "group_size": ranks,
        "stage": 3,
        "compile_command": "dsc compile --stage 3 model.onnx",
        "config": {"zero_optimization": {"stage": 3}},
        "state": {"seed": "1"},
        "files": files,
        "tensors": [
            {"name": name, "dtype": "F32", "shape": shape, "pieces": pieces[name]}
            for name, shape in sorted(TENSORS)
        ],
    }
    with open(os.path.join(step, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    with open(os.path.join(root, "latest"), "w") as f:
        f.write("step_3\n")

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    # The model before training: zeros, c in float16 (converted on the way
    # back), plus a frozen initializer the checkpoint does not hold.
    inits = [
        numpy_helper.from_array(np.zeros([4, 6], np.float32), "a"),
        numpy_helper.from_array(np.zeros([11], np.float32), "b"),
        numpy_helper.from_array(np.zeros([3, 3], np.float16), "c"),
        numpy_helper.from_array(np.full([300], 7, np.float32), "frozen"),
    ]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["y"])],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(model, os.path.join(root, "model.onnx"))
    os.makedirs(os.path.join(root, "ext"), exist_ok=True)
    onnx.save_model(
        model,
        os.path.join(root, "ext", "model.onnx"),
        save_as_external_data=True,
        location="model.onnx.data",
        size_threshold=0,
    )
    # A model the checkpoint does not fit: a reshaped, b absent.
    bad = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["y"])],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [24])],
        initializer=[
            numpy_helper.from_array(np.zeros([24], np.float32), "a"),
            inits[2],
        ],
    )
    onnx.save_model(
        helper.make_model(bad, opset_imports=[helper.make_opsetid("", 17)]),
        os.path.join(root, "bad.onnx"),
    )
    print("made", step)


def expected():
    return {name.split("/", 1)[1]: full(k, s) for k, (name, s) in enumerate(TENSORS) if name.startswith("param/")}


def check(got):
    for name, want in expected().items():
        if name not in got:
            sys.exit(f"missing {name}")
        g = np.asarray(got[name]).astype(np.float32)
        if g.shape != want.shape or not np.array_equal(g, want):
            sys.exit(f"{name} differs: {g.reshape(-1)[:4]} vs {want.reshape(-1)[:4]}")
    print("params ok:", " ".join(sorted(got)))


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "make":
        make(path)
    elif mode == "safetensors":
        from safetensors.numpy import load_file

        check(load_file(path))
    elif mode == "index":
        from safetensors.numpy import load_file

        index = json.load(open(path))
        got = {}
        for name, file in index["weight_map"].items():
            got[name] = load_file(os.path.join(os.path.dirname(path), file))[name]
        print("shards", len(set(index["weight_map"].values())),
              "total_size", index["metadata"]["total_size"])
        check(got)
    elif mode == "onnx":
        import onnx
        from onnx import numpy_helper

        bare = onnx.load(path, load_external_data=False)
        external = sorted(
            t.name for t in bare.graph.initializer if t.data_location == 1
        )
        model = onnx.load(path)
        got = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        kinds = {t.name: t.data_type for t in model.graph.initializer}
        print("c is float16:", kinds["c"] == onnx.TensorProto.FLOAT16)
        print("frozen kept:", bool(np.all(got.pop("frozen") == 7)))
        print("external:", " ".join(external) if external else "none")
        check(got)
    elif mode == "flip":
        with open(path, "r+b") as f:
            f.seek(-3, os.SEEK_END)
            b = f.read(1)
            f.seek(-3, os.SEEK_END)
            f.write(bytes([b[0] ^ 0x10]))
        print("flipped", os.path.basename(path))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
