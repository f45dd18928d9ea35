#!/usr/bin/env python3
"""Generate malformed ONNX models, one per class of importer hardening.

Usage:
    gen_malformed_models.py OUTDIR

Each model breaks one rule that a fuzzed or hand-edited file breaks (issue
14): a node that does not match its ONNX signature, a constant computation
the host folder must refuse, a size that overflows or exceeds
--max-constant-bytes, a malformed graph.  `malformed.test` checks that
`dsc import` rejects each with a diagnostic naming the node (or the file)
and exits 1 without crashing.  The models are invalid on purpose, so
onnx.checker is never run and onnx.save writes them as built.

Every model has a float input x[2,3] unless it says otherwise, and is
imported with --no-loss (except the ones named *_loss, which have a loss so
that `dsc compile` reaches the node).
"""

import os
import sys

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

OPSET = 17
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def _model(nodes, outputs, inputs=None, inits=(), name="malformed"):
    if inputs is None:
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8
    )


def _out(name="y", elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _i64(name, values, shape=None):
    arr = np.array(values, dtype=np.int64)
    if shape is not None:
        arr = arr.reshape(shape)
    return helper.make_node(
        "Constant", [], [name], name=name + "/Constant",
        value=numpy_helper.from_array(arr, name),
    )


def _f32(name, values, shape=None):
    arr = np.array(values, dtype=np.float32)
    if shape is not None:
        arr = arr.reshape(shape)
    return helper.make_node(
        "Constant", [], [name], name=name + "/Constant",
        value=numpy_helper.from_array(arr, name),
    )


def _bare_tensor(name, elem, dims):
    """A TensorProto with dims and no data (helper.make_tensor checks them)."""
    t = TensorProto()
    t.name = name
    t.data_type = elem
    t.dims.extend(dims)
    return t


def _raw_attr(name, attr_type, **fields):
    """An AttributeProto whose declared type and stored field are set apart."""
    a = AttributeProto()
    a.name = name
    a.type = attr_type
    for k, v in fields.items():
        if isinstance(v, list):
            getattr(a, k).extend(v)
        else:
            setattr(a, k, v)
    return a


# --- 1. Signatures: counts, required inputs, attribute types --------------


def sig_too_few_inputs():
    n = helper.make_node("Add", ["x"], ["y"], name="bad/Add")
    return _model([n], [_out()])


def sig_too_many_inputs():
    n = helper.make_node("Relu", ["x", "x"], ["y"], name="bad/Relu")
    return _model([n], [_out()])


def sig_too_many_outputs():
    n = helper.make_node("Relu", ["x"], ["y", "z"], name="bad/Relu")
    return _model([n], [_out()])


def sig_required_empty():
    # Gemm's B is required; '' is how an omitted optional input is spelled.
    n = helper.make_node("Gemm", ["x", ""], ["y"], name="bad/Gemm")
    return _model([n], [_out()])


def sig_variadic_empty():
    n = helper.make_node("Concat", ["x", "", "x"], ["y"], name="bad/Concat",
                         axis=0)
    return _model([n], [_out()])


def sig_attr_type():
    n = helper.make_node("Transpose", ["x"], ["y"], name="bad/Transpose")
    n.attribute.append(_raw_attr("perm", AttributeProto.FLOAT, f=1.0))
    return _model([n], [_out()])


def sig_attr_stored():
    # Declared INT, but the value sits in the float field.
    n = helper.make_node("Softmax", ["x"], ["y"], name="bad/Softmax")
    n.attribute.append(_raw_attr("axis", AttributeProto.INT, f=1.0))
    return _model([n], [_out()])


def sig_attr_unknown():
    n = helper.make_node("Relu", ["x"], ["y"], name="bad/Relu", alpha=0.5)
    return _model([n], [_out()])


def sig_attr_required():
    n = helper.make_node("Cast", ["x"], ["y"], name="bad/Cast")
    return _model([n], [_out()])


def sig_sequence_input():
    s = helper.make_node("SplitToSequence", ["x"], ["s"], name="seq/Split",
                         axis=0)
    n = helper.make_node("Relu", ["s"], ["y"], name="bad/Relu")
    return _model([s, n], [_out()])


# --- 2. Folders check what the op's import checks -------------------------


def fold_expand_negative():
    return _model(
        [_f32("c", [1.0, 2.0]), _i64("shape", [-3]),
         helper.make_node("Expand", ["c", "shape"], ["y"], name="bad/Expand")],
        [_out()])


def fold_constant_of_shape_negative():
    return _model(
        [_i64("shape", [2, -2]),
         helper.make_node("ConstantOfShape", ["shape"], ["y"],
                          name="bad/ConstantOfShape")],
        [_out()])


def _split(sizes, outputs):
    return _model(
        [_f32("c", [1.0, 2.0, 3.0, 4.0]), _i64("split", sizes),
         helper.make_node("Split", ["c", "split"], outputs, name="bad/Split",
                          axis=0)],
        [_out(o) for o in outputs])


def fold_split_negative():
    return _split([5, -1], ["y0", "y1"])


def fold_split_sum():
    return _split([1, 2], ["y0", "y1"])


def _div(a, b):
    return _model(
        [_i64("a", a), _i64("b", b),
         helper.make_node("Div", ["a", "b"], ["y"], name="bad/Div")],
        [_out("y", TensorProto.INT64)])


def fold_div_zero():
    return _div([7, 8], [2, 0])


def fold_div_zero_float_divisor():
    # The divisor may be stored as floats: 0.0 must be seen as 0 too.
    return _model(
        [_i64("a", [7]), _f32("b", [0.0]),
         helper.make_node("Div", ["a", "b"], ["y"], name="bad/Div")],
        [_out("y", TensorProto.INT64)])


def fold_div_overflow():
    return _div([INT64_MIN], [-1])


def _transpose(perm):
    return _model(
        [_f32("c", [1, 2, 3, 4, 5, 6], [2, 3]),
         helper.make_node("Transpose", ["c"], ["y"], name="bad/Transpose",
                          perm=perm)],
        [_out()])


def fold_transpose_range():
    return _transpose([0, 5])


def fold_transpose_repeat():
    return _transpose([1, 1])


def import_transpose_repeat():
    # The same rule on run-time data, through the op's handler.
    n = helper.make_node("Transpose", ["x"], ["y"], name="bad/Transpose",
                         perm=[1, 1])
    return _model([n], [_out()])


def fold_gather_scalar():
    return _model(
        [_f32("c", 3.0, []), _i64("i", 0, []),
         helper.make_node("Gather", ["c", "i"], ["y"], name="bad/Gather")],
        [_out()])


def import_gather_scalar():
    n = helper.make_node("Gather", ["x", "i"], ["y"], name="bad/Gather")
    return _model(
        [_i64("i", 0, []), n], [_out()],
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [])])


def fold_gather_index():
    return _model(
        [_f32("c", [1, 2, 3]), _i64("i", [7]),
         helper.make_node("Gather", ["c", "i"], ["y"], name="bad/Gather")],
        [_out()])


def fold_slice_repeat():
    return _model(
        [_f32("c", list(range(16)), [4, 4]), _i64("starts", [0, 1]),
         _i64("ends", [2, 3]), _i64("axes", [0, 0]),
         helper.make_node("Slice", ["c", "starts", "ends", "axes"], ["y"],
                          name="bad/Slice")],
        [_out()])


def _range(start, limit, delta):
    return _model(
        [_i64("start", start, np.shape(start)), _i64("limit", limit, []),
         _i64("delta", delta, []),
         helper.make_node("Range", ["start", "limit", "delta"], ["y"],
                          name="bad/Range")],
        [_out("y", TensorProto.INT64)])


def fold_range_nonscalar():
    return _range([1, 2], 5, 1)


def fold_range_overflow():
    return _range(INT64_MIN, INT64_MAX, 1)


# --- 3. Sizes: limits and overflow ----------------------------------------


def size_range_limit():
    # 2^40 elements: the folder must refuse before it allocates.
    return _range(0, 2**40, 1)


def size_range_elements():
    # Within --max-constant-bytes (40 MB) but past the 2^22 elements dsc folds.
    return _range(0, 5000000, 1)


def size_range_loss():
    # A Range of 1000 int64 (8000 bytes) that must fold, with a scalar loss
    # so that `dsc compile` reaches it too.
    return _model(
        [_i64("start", 0, []), _i64("limit", 1000, []), _i64("delta", 1, []),
         helper.make_node("Range", ["start", "limit", "delta"], ["r"],
                          name="big/Range"),
         helper.make_node("Cast", ["r"], ["f"], name="big/Cast",
                          to=TensorProto.FLOAT),
         helper.make_node("ReduceSum", ["f"], ["loss"], name="loss/ReduceSum",
                          keepdims=0)],
        [_out("loss", TensorProto.FLOAT, [])])


def size_expand_runtime():
    # A constant Expand of 1000 floats (4000 bytes): above the limit it is
    # not folded but becomes a run-time dsc.expand.
    return _model(
        [_f32("c", [1.0]), _i64("shape", [1000]),
         helper.make_node("Expand", ["c", "shape"], ["y"], name="big/Expand")],
        [_out("y", TensorProto.FLOAT, [1000])])


def size_result_overflow():
    # [2^61] int64 elements: the count fits in int64, the bytes do not.
    n = helper.make_node("Expand", ["x", "shape"], ["y"], name="bad/Expand")
    return _model(
        [_i64("shape", [2**61]), n], [_out("y", TensorProto.INT64)],
        inputs=[helper.make_tensor_value_info("x", TensorProto.INT64, [1])])


def size_init_overflow():
    w = _bare_tensor("w", TensorProto.INT64, [2**61, 8])
    n = helper.make_node("Add", ["x", "w"], ["y"], name="use/Add")
    return _model(
        [n], [_out("y", TensorProto.INT64)], inits=[w],
        inputs=[helper.make_tensor_value_info("x", TensorProto.INT64, [1])])


def size_extdata_wrap(outdir):
    """offset + length wraps around 2^64 to 8, inside the 16-byte file."""
    d = os.path.join(outdir, "size_extdata_wrap")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "weights.bin"), "wb") as f:
        f.write(np.arange(2, dtype=np.int64).tobytes())
    w = TensorProto()
    w.name = "w"
    w.data_type = TensorProto.INT64
    w.dims.append(2)
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", str(2**64 - 8)),
                 ("length", "16")):
        e = w.external_data.add()
        e.key, e.value = k, v
    n = helper.make_node("Add", ["x", "w"], ["y"], name="use/Add")
    m = _model(
        [n], [_out("y", TensorProto.INT64)], inits=[w],
        inputs=[helper.make_tensor_value_info("x", TensorProto.INT64, [2])])
    onnx.save(m, os.path.join(d, "model.onnx"))


def size_conv_stride_zero():
    # SAME padding divides by the stride: 0 was a floating-point exception.
    w = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")
    n = helper.make_node("Conv", ["x", "w"], ["y"], name="bad/Conv",
                         strides=[0, 0], auto_pad="SAME_UPPER")
    return _model(
        [n], [_out()], inits=[w],
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                              [1, 1, 4, 4])])


def size_pad_huge():
    n = helper.make_node("Pad", ["x", "pads"], ["y"], name="bad/Pad")
    return _model([_i64("pads", [0, 2**62, 0, 2**62]), n], [_out()])


# --- 5. Graph-level checks ------------------------------------------------


def graph_duplicate_initializer():
    w1 = numpy_helper.from_array(np.ones(3, np.float32), "w")
    w2 = numpy_helper.from_array(np.zeros(3, np.float32), "w")
    n = helper.make_node("Add", ["x", "w"], ["y"], name="use/Add")
    return _model([n], [_out()], inits=[w1, w2])


def graph_output_not_computed():
    n = helper.make_node("Relu", ["x"], ["y"], name="ok/Relu")
    return _model([n], [_out(), _out("nowhere")])


def graph_output_is_input():
    n = helper.make_node("Relu", ["x"], ["y"], name="ok/Relu")
    return _model([n], [_out(), _out("x", TensorProto.FLOAT, [2, 3])])


def graph_value_redefined():
    a = helper.make_node("Relu", ["x"], ["y"], name="first/Relu")
    b = helper.make_node("Neg", ["x"], ["y"], name="second/Neg")
    return _model([a, b], [_out()])


def graph_negative_dim_initializer():
    w = _bare_tensor("w", TensorProto.FLOAT, [-2])
    n = helper.make_node("Add", ["x", "w"], ["y"], name="use/Add")
    return _model([n], [_out()], inits=[w])


def graph_negative_dim_constant():
    t = _bare_tensor("v", TensorProto.FLOAT, [-1, 3])
    c = helper.make_node("Constant", [], ["c"], name="bad/Constant", value=t)
    n = helper.make_node("Add", ["x", "c"], ["y"], name="use/Add")
    return _model([c, n], [_out()])


def graph_constant_external():
    # A Constant's value pointing at a file: it would be read from the
    # working directory, not the model's.
    t = _bare_tensor("v", TensorProto.FLOAT, [3])
    t.data_location = TensorProto.EXTERNAL
    e = t.external_data.add()
    e.key, e.value = "location", "weights.bin"
    c = helper.make_node("Constant", [], ["c"], name="bad/Constant", value=t)
    n = helper.make_node("Add", ["x", "c"], ["y"], name="use/Add")
    return _model([c, n], [_out()])


MODELS = [
    sig_too_few_inputs, sig_too_many_inputs, sig_too_many_outputs, sig_required_empty,
    sig_variadic_empty, sig_attr_type, sig_attr_stored, sig_attr_unknown,
    sig_attr_required, sig_sequence_input,
    fold_expand_negative, fold_constant_of_shape_negative,
    fold_split_negative, fold_split_sum, fold_div_zero, fold_div_zero_float_divisor,
    fold_div_overflow,
    fold_transpose_range, fold_transpose_repeat, import_transpose_repeat,
    fold_gather_scalar, import_gather_scalar, fold_gather_index,
    fold_slice_repeat, fold_range_nonscalar, fold_range_overflow,
    size_range_limit, size_range_elements, size_range_loss, size_expand_runtime, size_result_overflow,
    size_init_overflow, size_conv_stride_zero, size_pad_huge,
    graph_duplicate_initializer, graph_output_not_computed,
    graph_output_is_input, graph_value_redefined,
    graph_negative_dim_initializer, graph_negative_dim_constant,
    graph_constant_external,
]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    for make in MODELS:
        onnx.save(make(), os.path.join(outdir, make.__name__ + ".onnx"))
    size_extdata_wrap(outdir)


if __name__ == "__main__":
    main()
