"""A linear classifier with SoftmaxCrossEntropyLoss, class weights and an
ignore index, in bf16 (argv[2] == "bf16") or f32, for class_weights.test."""
import sys, numpy as np, onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
out = sys.argv[1]
low = len(sys.argv) > 2 and sys.argv[2] == "bf16"
rng = np.random.default_rng(0)
def bf16(a):
    a = np.asarray(a, np.float32).view(np.uint32)
    return ((a + 0x7FFF + ((a >> 16) & 1)) >> 16).astype(np.uint16)
def init(name, arr):
    if low:
        return h.make_tensor(name, T.BFLOAT16, arr.shape, bf16(arr).tobytes(), raw=True)
    return h.make_tensor(name, T.FLOAT, arr.shape, np.asarray(arr, np.float32).tobytes(), raw=True)
w = init("w", rng.uniform(-1, 1, (8, 5)))
cw = init("class_w", rng.uniform(0.5, 1.5, (5,)))
nodes = [h.make_node("MatMul", ["x", "w"], ["s"]),
         h.make_node("SoftmaxCrossEntropyLoss", ["s", "y", "class_w"], ["loss"],
                     reduction="mean", ignore_index=-1)]
g = h.make_graph(nodes, "bf16_weighted_ce",
                 [h.make_tensor_value_info("x", T.BFLOAT16 if low else T.FLOAT, ["batch", 8]),
                  h.make_tensor_value_info("y", T.INT64, ["batch"])],
                 [h.make_tensor_value_info("loss", T.BFLOAT16 if low else T.FLOAT, [])], [w, cw])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
onnx.save(m, out)
