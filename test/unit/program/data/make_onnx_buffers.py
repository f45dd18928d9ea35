"""Writes cnn_opset17_buffers.safetensors: the BatchNorm running statistics
stored as initializers in test/fixtures/models/cnn_opset17.onnx, as read by
the onnx package (an independent reader), for OnnxWeightsTest.

The exporter's forward passes updated them, so they differ from
ref/cnn/buffers_before.safetensors (zeros and ones).

    python3 make_onnx_buffers.py   # onnx 1.23, numpy
"""
import json
import os
import struct

import numpy as np
import onnx
from onnx import numpy_helper

here = os.path.dirname(os.path.abspath(__file__))
model = onnx.load(os.path.join(here, "../../../fixtures/models/cnn_opset17.onnx"))
tensors = {i.name: numpy_helper.to_array(i).astype(np.float32)
           for i in model.graph.initializer if "running" in i.name}
header, blobs, offset = {}, [], 0
for name, a in sorted(tensors.items()):
    b = a.tobytes()
    header[name] = {"dtype": "F32", "shape": list(a.shape),
                    "data_offsets": [offset, offset + len(b)]}
    blobs.append(b)
    offset += len(b)
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(here, "cnn_opset17_buffers.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
print(sorted(tensors))
