#!/usr/bin/env python3
"""Generate the small ONNX models used by the dsc importer tests.

Usage:
    gen_test_models.py OUTDIR [--verbose] [--manifest]

Only the `onnx` helper API is used (onnx.helper / onnx.numpy_helper); no
torch, no onnxruntime.  Everything is deterministic (fixed numpy seeds, fixed
node order), so running the script twice produces byte-identical files.
Stale files from a previous run are overwritten (external-data files are
deleted first, because onnx appends to them).  Prints nothing unless
--verbose.  --manifest prints the MANIFEST below as JSON to stdout (for
test drivers that want the expectations in machine-readable form).

Conventions: opset 17 in the default domain unless stated, ir_version 8,
every node has a distinctive "<scope>/<OpType>" name, the loss is a float
scalar graph output named "loss" with shape [].

VALID models (onnx.checker.check_model is run on each; all must import):

  mlp_loss.onnx        x f32[N,16] (N = dim_param "N"), labels i64[N]
                       fc1/Gemm(transB=1) -> fc1/Relu -> fc2/Gemm(transB=1)
                       -> loss/SoftmaxCrossEntropyLoss(reduction=mean) -> loss
                       params fc1.weight[32,16] fc1.bias[32] fc2.weight[10,32]
                       fc2.bias[10].  Needs --micro-batch to fix N.
  mlp_static.onnx      same with N = 4.
  tied.onnx            ids i64[2,8], targets i64[2,8], param wte[50,16] used
                       TWICE (embedding Gather + transposed LM head), plus
                       ln.weight[16], ln.bias[16].
  shape_fold.onnx      x f32[N,8,16] symbolic N, w[16,16]; Shape / Gather /
                       Unsqueeze / Concat / Reshape / Range / Cast / Slice /
                       ConstantOfShape shape arithmetic that folds to constants
                       once N is fixed; ReduceMean(axes attr, keepdims=0).
  ops_elementwise.onnx x f32[4,8], ~40 elementwise / structural ops (opset 17).
  ops_opset18.onnx     opset 18: SplitToSequence + SequenceAt, ReduceMean with
                       axes as an input, Shape(start,end), Slice,
                       ConstantOfShape.
  extdata_ok/model.onnx + extdata_ok/weights.bin
                       mlp_static with every initializer in weights.bin.
  extdata_missing/model.onnx
                       like extdata_ok but weights.bin is absent: the import
                       must still succeed (only shapes/dtypes are needed).

ERROR models: the import must exit with status 1 and print a diagnostic on
stderr starting with "error:" (never crash, never succeed).  The expected
content of the message is listed in MANIFEST["errors"].
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 8
OPSET = 17

MANIFEST = {
    "valid": {
        "mlp_loss.onnx": "import with --micro-batch N (e.g. 4); params fc1.weight, fc1.bias, fc2.weight, fc2.bias",
        "mlp_static.onnx": "imports as-is; N=4",
        "tied.onnx": "imports; wte is one parameter used by embed/Gather and head/Transpose",
        "shape_fold.onnx": "import with --micro-batch; all shape arithmetic folds to constants",
        "ops_elementwise.onnx": "imports; ~40 elementwise/structural op types",
        "ops_opset18.onnx": "imports; default-domain opset 18",
        "extdata_ok/model.onnx": "imports; initializers in extdata_ok/weights.bin",
        "extdata_missing/model.onnx": "imports; weights.bin missing but only shapes are needed",
    },
    "errors": {
        "err_unsupported_op.onnx": "exit 1, 'error:' naming op type 'Det' and node 'weird/Det'",
        "err_bad_opset.onnx": "exit 1, 'error:' about default-domain opset 7 (unsupported, needs >= 13)",
        "err_bad_domain.onnx": "exit 1, 'error:' about domain 'com.microsoft' / node 'fused/FusedMatMul'",
        "err_truncated.onnx": "exit 1, 'error:' the file cannot be parsed as an ONNX ModelProto",
        "err_not_onnx.onnx": "exit 1, 'error:' the file cannot be parsed as an ONNX ModelProto",
        "err_missing_initializer.onnx": "exit 1, 'error:' value 'fc1.weight' used by node 'fc1/Gemm' is not defined",
        "err_no_scalar_loss.onnx": "exit 1, 'error:' the graph has no scalar float loss output (output 'logits' is f32[4,10]); with --no-loss it imports",
        "err_dynamic_dim.onnx": "exit 1 without --micro-batch, 'error:' symbolic dimension 'N' of input 'x'; with --micro-batch 4 it imports",
        "err_extdata_outside/model.onnx": "exit 1, 'error:' external data location '../outside.bin' of 'fc1.weight' escapes the model directory",
        "err_extdata_absolute/model.onnx": "exit 1, 'error:' external data location '/etc/passwd' of 'fc1.weight' is an absolute path",
    },
}

# ---------------------------------------------------------------------------
# helpers


def _const(name, value, dtype=None):
    """A Constant node named '<name>/Constant' producing tensor '<name>'."""
    arr = np.asarray(value, dtype=dtype)
    return helper.make_node(
        "Constant", [], [name], name=name + "/Constant",
        value=numpy_helper.from_array(arr, name=name))


def _init(name, arr):
    return numpy_helper.from_array(np.ascontiguousarray(arr), name=name)


def _model(graph, opset=OPSET, extra_opsets=()):
    opsets = [helper.make_opsetid("", opset)]
    opsets += [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(graph, opset_imports=opsets,
                          producer_name="dsc-gen_test_models",
                          producer_version="1")
    m.ir_version = IR_VERSION
    return m


def _loss_out():
    return helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])


def _mlp_params():
    rng = np.random.RandomState(0)
    return [
        _init("fc1.weight", (rng.randn(32, 16) * 0.1).astype(np.float32)),
        _init("fc1.bias", (rng.randn(32) * 0.1).astype(np.float32)),
        _init("fc2.weight", (rng.randn(10, 32) * 0.1).astype(np.float32)),
        _init("fc2.bias", (rng.randn(10) * 0.1).astype(np.float32)),
    ]


def _mlp_body():
    return [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["fc1.out"],
                         name="fc1/Gemm", transB=1),
        helper.make_node("Relu", ["fc1.out"], ["fc1.act"], name="fc1/Relu"),
        helper.make_node("Gemm", ["fc1.act", "fc2.weight", "fc2.bias"],
                         ["logits"], name="fc2/Gemm", transB=1),
    ]


# ---------------------------------------------------------------------------
# valid models


def mlp(batch):
    nodes = _mlp_body() + [
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"],
                         ["loss"], name="loss/SoftmaxCrossEntropyLoss",
                         reduction="mean"),
    ]
    g = helper.make_graph(
        nodes, "mlp_loss" if isinstance(batch, str) else "mlp_static",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16]),
         helper.make_tensor_value_info("labels", TensorProto.INT64, [batch])],
        [_loss_out()], initializer=_mlp_params())
    return _model(g)


def tied():
    rng = np.random.RandomState(1)
    inits = [
        _init("wte", (rng.randn(50, 16) * 0.02).astype(np.float32)),
        _init("ln.weight", (1.0 + 0.1 * rng.randn(16)).astype(np.float32)),
        _init("ln.bias", (0.1 * rng.randn(16)).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Gather", ["wte", "ids"], ["embed.out"],
                         name="embed/Gather", axis=0),
        helper.make_node("LayerNormalization",
                         ["embed.out", "ln.weight", "ln.bias"], ["ln.out"],
                         name="ln/LayerNormalization", axis=-1, epsilon=1e-5),
        helper.make_node("Transpose", ["wte"], ["head.wteT"],
                         name="head/Transpose", perm=[1, 0]),
        helper.make_node("MatMul", ["ln.out", "head.wteT"], ["head.out"],
                         name="head/MatMul"),
        _const("logits.shape", [16, 50], np.int64),
        helper.make_node("Reshape", ["head.out", "logits.shape"], ["logits"],
                         name="logits/Reshape"),
        _const("targets.shape", [16], np.int64),
        helper.make_node("Reshape", ["targets", "targets.shape"],
                         ["targets.flat"], name="targets/Reshape"),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "targets.flat"],
                         ["loss"], name="loss/SoftmaxCrossEntropyLoss",
                         reduction="mean", ignore_index=-1),
    ]
    g = helper.make_graph(
        nodes, "tied",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 8]),
         helper.make_tensor_value_info("targets", TensorProto.INT64, [2, 8])],
        [_loss_out()], initializer=inits)
    return _model(g)


def shape_fold():
    rng = np.random.RandomState(2)
    inits = [_init("w", (rng.randn(16, 16) * 0.1).astype(np.float32))]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["proj.out"], name="proj/MatMul"),
        # new shape = Concat(Unsqueeze(Shape(x)[0]), [-1], [16]) = [N, -1, 16]
        helper.make_node("Shape", ["x"], ["x.shape"], name="shape/Shape"),
        _const("idx0", 0, np.int64),
        helper.make_node("Gather", ["x.shape", "idx0"], ["batch"],
                         name="batch/Gather", axis=0),
        _const("axes0", [0], np.int64),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch.1d"],
                         name="batch/Unsqueeze"),
        _const("minus1", [-1], np.int64),
        _const("hidden", [16], np.int64),
        helper.make_node("Concat", ["batch.1d", "minus1", "hidden"],
                         ["new.shape"], name="newshape/Concat", axis=0),
        helper.make_node("Reshape", ["proj.out", "new.shape"], ["proj.resh"],
                         name="proj/Reshape"),
        # positions: Range(0, Shape(x)[1], 1) -> float -> [8,1] -> broadcast add
        _const("idx1", 1, np.int64),
        helper.make_node("Gather", ["x.shape", "idx1"], ["seq"],
                         name="seq/Gather", axis=0),
        _const("range.start", 0, np.int64),
        _const("range.delta", 1, np.int64),
        helper.make_node("Range", ["range.start", "seq", "range.delta"],
                         ["pos.i64"], name="pos/Range"),
        helper.make_node("Cast", ["pos.i64"], ["pos.f32"], name="pos/Cast",
                         to=TensorProto.FLOAT),
        _const("axes1", [1], np.int64),
        helper.make_node("Unsqueeze", ["pos.f32", "axes1"], ["pos.col"],
                         name="pos/Unsqueeze"),
        helper.make_node("Add", ["proj.resh", "pos.col"], ["act.pos"],
                         name="pos/Add"),
        # ones = ConstantOfShape(Shape(x)[1:2], 1.0) -> [8] -> [8,1] -> Mul
        _const("slice.starts", [1], np.int64),
        _const("slice.ends", [2], np.int64),
        helper.make_node("Slice", ["x.shape", "slice.starts", "slice.ends"],
                         ["seq.1d"], name="seq/Slice"),
        helper.make_node("ConstantOfShape", ["seq.1d"], ["ones"],
                         name="ones/ConstantOfShape",
                         value=numpy_helper.from_array(
                             np.array([1.0], np.float32), "one")),
        helper.make_node("Unsqueeze", ["ones", "axes1"], ["ones.col"],
                         name="ones/Unsqueeze"),
        helper.make_node("Mul", ["act.pos", "ones.col"], ["act"],
                         name="scale/Mul"),
        helper.make_node("ReduceMean", ["act"], ["loss"],
                         name="loss/ReduceMean", axes=[0, 1, 2], keepdims=0),
    ]
    g = helper.make_graph(
        nodes, "shape_fold",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 16])],
        [_loss_out()], initializer=inits)
    return _model(g)


def ops_elementwise():
    rng = np.random.RandomState(3)
    inits = [
        _init("w", (rng.randn(8, 8) * 0.3).astype(np.float32)),
        _init("b", (rng.randn(8) * 0.1).astype(np.float32)),
    ]
    N = helper.make_node
    nodes = [
        N("MatMul", ["x", "w"], ["h0"], name="lin/MatMul"),
        N("Add", ["h0", "b"], ["h1"], name="lin/Add"),
        _const("half", 0.5, np.float32),
        N("Sub", ["h1", "half"], ["h2"], name="center/Sub"),
        N("Mul", ["h2", "h2"], ["h3"], name="square/Mul"),
        _const("eps", 1e-3, np.float32),
        N("Add", ["h3", "eps"], ["h3e"], name="eps/Add"),
        N("Sqrt", ["h3e"], ["h4"], name="norm/Sqrt"),             # h4 > 0
        N("Div", ["h1", "h4"], ["h5"], name="normalize/Div"),
        _const("two", 2.0, np.float32),
        N("Pow", ["h4", "two"], ["h6"], name="pow/Pow"),          # h6 > 0
        _const("one", 1.0, np.float32),
        N("Add", ["h6", "one"], ["h6p"], name="log1p/Add"),
        N("Log", ["h6p"], ["h7"], name="log1p/Log"),
        N("Neg", ["h6"], ["h6n"], name="decay/Neg"),
        N("Exp", ["h6n"], ["h8"], name="decay/Exp"),
        N("Tanh", ["h5"], ["h9"], name="act/Tanh"),
        N("Erf", ["h9"], ["h10"], name="act/Erf"),
        N("Reciprocal", ["h4"], ["h11"], name="inv/Reciprocal"),
        N("Sigmoid", ["h1"], ["h12"], name="gate/Sigmoid"),
        N("Relu", ["h2"], ["h13"], name="gate/Relu"),
        # comparisons / boolean logic
        _const("zero", 0.0, np.float32),
        N("Less", ["h1", "zero"], ["is_neg"], name="cmp/Less"),
        N("Greater", ["h1", "zero"], ["is_pos"], name="cmp/Greater"),
        N("Equal", ["h13", "zero"], ["is_zero"], name="cmp/Equal"),
        N("Not", ["is_neg"], ["not_neg"], name="cmp/Not"),
        N("Where", ["not_neg", "h12", "h13"], ["h14"], name="select/Where"),
        N("Cast", ["is_pos"], ["pos_f"], name="pos/Cast", to=TensorProto.FLOAT),
        N("CastLike", ["is_zero", "h1"], ["zero_f"], name="zero/CastLike"),
        # structural
        N("Transpose", ["h14"], ["t0"], name="tr/Transpose", perm=[1, 0]),
        N("Softmax", ["t0"], ["t1"], name="tr/Softmax", axis=0),
        N("Transpose", ["t1"], ["h15"], name="tr_back/Transpose", perm=[1, 0]),
        N("LogSoftmax", ["h10"], ["h16"], name="lsm/LogSoftmax", axis=-1),
        _const("split.sizes", [3, 5], np.int64),
        N("Split", ["h7", "split.sizes"], ["sp0", "sp1"], name="split/Split",
          axis=1),
        N("Concat", ["sp1", "sp0"], ["h17"], name="swap/Concat", axis=1),
        _const("rows.lo", [0], np.int64),
        _const("rows.mid", [2], np.int64),
        _const("rows.hi", [4], np.int64),
        _const("axis0", [0], np.int64),
        _const("step1", [1], np.int64),
        N("Slice", ["h8", "rows.mid", "rows.hi", "axis0"], ["sl0"],
          name="rot/Slice_hi"),
        N("Slice", ["h8", "rows.lo", "rows.mid", "axis0", "step1"], ["sl1"],
          name="rot/Slice_lo"),
        N("Concat", ["sl0", "sl1"], ["h18"], name="rot/Concat", axis=0),
        N("Unsqueeze", ["h11", "axis0"], ["u0"], name="u/Unsqueeze"),   # [1,4,8]
        N("Squeeze", ["u0", "axis0"], ["h19"], name="u/Squeeze"),       # [4,8]
        N("Flatten", ["u0"], ["h20"], name="u/Flatten", axis=2),        # [4,8]
        _const("bshape", [4, 8], np.int64),
        N("Expand", ["b", "bshape"], ["h21"], name="bias/Expand"),
        N("Trilu", ["h17"], ["h22"], name="mask/Trilu", upper=0),
        _const("drop.ratio", 0.1, np.float32),
        _const("drop.train", True, np.bool_),
        N("Dropout", ["h15", "drop.ratio", "drop.train"], ["h23", "drop.mask"],
          name="drop/Dropout", seed=0),
        N("Where", ["drop.mask", "h23", "zero"], ["h24"], name="drop/Where"),
        # accumulate everything into one [4,8] tensor
        N("Sum", ["h16", "h18", "h19", "h20", "h21", "h22"], ["acc0"],
          name="acc/Sum"),
        N("Add", ["acc0", "h24"], ["acc1"], name="acc/Add_drop"),
        N("Add", ["acc1", "pos_f"], ["acc2"], name="acc/Add_pos"),
        N("Add", ["acc2", "zero_f"], ["acc3"], name="acc/Add_zero"),
        N("Identity", ["acc3"], ["acc"], name="acc/Identity"),
        # reductions to a scalar loss
        _const("axes_last", [1], np.int64),
        N("ReduceSum", ["acc", "axes_last"], ["rsum"], name="red/ReduceSum",
          keepdims=0),                                                  # [4]
        N("ReduceMax", ["acc"], ["rmax"], name="red/ReduceMax", axes=[1],
          keepdims=0),                                                  # [4]
        N("Add", ["rsum", "rmax"], ["rtot"], name="red/Add"),
        N("ReduceMean", ["rtot"], ["rmean"], name="red/ReduceMean", axes=[0],
          keepdims=0),                                                  # []
        N("Identity", ["rmean"], ["loss"], name="loss/Identity"),
    ]
    g = helper.make_graph(
        nodes, "ops_elementwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [_loss_out()], initializer=inits)
    return _model(g)


def ops_opset18():
    rng = np.random.RandomState(4)
    inits = [_init("w", (rng.randn(6, 6) * 0.2).astype(np.float32))]
    N = helper.make_node
    nodes = [
        N("MatMul", ["x", "w"], ["h"], name="lin/MatMul"),              # [4,6]
        _const("split.sizes", [2, 4], np.int64),
        N("SplitToSequence", ["h", "split.sizes"], ["seq"],
          name="split/SplitToSequence", axis=1, keepdims=1),
        _const("seq.i0", 0, np.int64),
        _const("seq.i1", 1, np.int64),
        N("SequenceAt", ["seq", "seq.i0"], ["a"], name="seq/SequenceAt_0"),  # [4,2]
        N("SequenceAt", ["seq", "seq.i1"], ["c"], name="seq/SequenceAt_1"),  # [4,4]
        N("Shape", ["c"], ["c.cols"], name="cols/Shape", start=1, end=2),    # [4]
        N("ConstantOfShape", ["c.cols"], ["halfs"],
          name="halfs/ConstantOfShape",
          value=numpy_helper.from_array(np.array([0.5], np.float32), "v")),
        N("Add", ["c", "halfs"], ["c2"], name="c/Add"),                  # [4,4]
        _const("sl.starts", [1], np.int64),
        _const("sl.ends", [3], np.int64),
        _const("sl.axes", [1], np.int64),
        N("Slice", ["c2", "sl.starts", "sl.ends", "sl.axes"], ["c3"],
          name="c/Slice"),                                               # [4,2]
        N("Mul", ["a", "c3"], ["m"], name="m/Mul"),
        _const("rm.axes", [0, 1], np.int64),
        N("ReduceMean", ["m", "rm.axes"], ["loss"], name="loss/ReduceMean",
          keepdims=0),
    ]
    g = helper.make_graph(
        nodes, "ops_opset18",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
        [_loss_out()], initializer=inits)
    return _model(g, opset=18)


def cumsum_tile(axis=-1, repeats=(2, 1)):
    """CumSum and Tile on run-time data (a dsc.cumsum; Tile as reshape,
    expand, reshape) and on constants (folded at import); x is a parameter,
    so the step differentiates both."""
    N = helper.make_node
    nodes = [
        _const("ax1", 1, np.int64),
        N("CumSum", ["mask", "ax1"], ["pos"], name="pos/CumSum"),
        N("Cast", ["pos"], ["pos.f"], name="pos/Cast", to=TensorProto.FLOAT),
        N("ReduceSum", ["pos.f"], ["a"], name="a/ReduceSum", keepdims=0),
        _const("axis", axis, np.int64),
        N("CumSum", ["x", "axis"], ["xs"], name="xs/CumSum", exclusive=1,
          reverse=1),
        _const("c", [1.0, 2.0, 3.0], np.float32),
        _const("ax0", 0, np.int64),
        N("CumSum", ["c", "ax0"], ["cs"], name="cs/CumSum"),
        N("Mul", ["xs", "cs"], ["b.el"], name="b/Mul"),
        N("ReduceSum", ["b.el"], ["b"], name="b/ReduceSum", keepdims=0),
        _const("reps", list(repeats), np.int64),
        N("Tile", ["x", "reps"], ["xt"], name="xt/Tile"),
        _const("axes1", [1], np.int64),
        N("ReduceSum", ["xt", "axes1"], ["rows"], name="rows/ReduceSum",
          keepdims=0),
        _const("c2", [1.0, 2.0], np.float32),
        _const("reps2", [2], np.int64),
        N("Tile", ["c2", "reps2"], ["ct"], name="ct/Tile"),
        N("Mul", ["rows", "ct"], ["d.el"], name="d/Mul"),
        N("ReduceSum", ["d.el"], ["d"], name="d/ReduceSum", keepdims=0),
        N("Sum", ["a", "b", "d"], ["loss"], name="loss/Sum"),
    ]
    x = np.random.RandomState(6).randn(2, 3).astype(np.float32)
    g = helper.make_graph(
        nodes, "cumsum_tile",
        [helper.make_tensor_value_info("mask", TensorProto.INT64, [2, 4])],
        [_loss_out()], initializer=[_init("x", x)])
    return _model(g)


def scatter(nd_index=1, reduction=None, el_updates=(2, 1)):
    """T5's label shift: decoder ids = ScatterND(zeros, [[.., 1:]], labels[..,
    :-1]) then the start token at [.., 0]; ScatterElements on a parameter;
    a ScatterND of constants (folded)."""
    N = helper.make_node
    red = {} if reduction is None else {"reduction": reduction}
    idx = np.array([[[b, t] for t in range(nd_index, 4)] for b in range(2)])
    nodes = [
        _const("zeros", np.zeros((2, 4), np.int64), np.int64),
        _const("idx", idx, np.int64),
        _const("s.starts", [0], np.int64),
        _const("s.ends", [3], np.int64),
        _const("s.axes", [1], np.int64),
        N("Slice", ["labels", "s.starts", "s.ends", "s.axes"], ["shifted"],
          name="shift/Slice"),
        N("ScatterND", ["zeros", "idx", "shifted"], ["dec"], name="shift/ScatterND",
          **red),
        N("Cast", ["dec"], ["dec.f"], name="dec/Cast", to=TensorProto.FLOAT),
        N("Mul", ["dec.f", "w"], ["a.el"], name="a/Mul"),
        N("ReduceSum", ["a.el"], ["a"], name="a/ReduceSum", keepdims=0),
        _const("el.idx", np.array([[3], [0]])[: el_updates[0], : el_updates[1]],
               np.int64),
        N("ScatterElements", ["w", "el.idx", "u"], ["we"],
          name="w/ScatterElements", axis=1),
        N("ReduceSum", ["we"], ["b"], name="b/ReduceSum", keepdims=0),
        _const("c.data", [1.0, 2.0, 3.0, 4.0], np.float32),
        _const("c.idx", [[3], [0]], np.int64),
        _const("c.upd", [9.0, 8.0], np.float32),
        N("ScatterND", ["c.data", "c.idx", "c.upd"], ["cs"], name="c/ScatterND"),
        N("Mul", ["we", "cs"], ["d.el"], name="d/Mul"),
        N("ReduceSum", ["d.el"], ["d"], name="d/ReduceSum", keepdims=0),
        N("Sum", ["a", "b", "d"], ["loss"], name="loss/Sum"),
    ]
    rng = np.random.RandomState(7)
    g = helper.make_graph(
        nodes, "scatter",
        [helper.make_tensor_value_info("labels", TensorProto.INT64, [2, 4])],
        [_loss_out()],
        initializer=[_init("w", rng.randn(2, 4).astype(np.float32)),
                     _init("u", rng.randn(2, 1).astype(np.float32))])
    return _model(g, opset=18)


def scatter_huge():
    """ScatterND into a [65536, 65536] run-time value: its source map would
    be a 32 GiB constant; refused before anything is allocated."""
    N = helper.make_node
    nodes = [
        _const("zero", 0, np.int64),
        _const("big", [65536, 65536], np.int64),
        N("Expand", ["zero", "big"], ["data"], name="big/Expand"),
        _const("idx", [[0, 0]], np.int64),
        _const("s.starts", [0], np.int64),
        _const("s.ends", [1], np.int64),
        N("Slice", ["labels", "s.starts", "s.ends"], ["upd"], name="upd/Slice"),
        N("ScatterND", ["data", "idx", "upd"], ["out"], name="big/ScatterND"),
        N("ReduceSum", ["out"], ["sum"], name="sum/ReduceSum", keepdims=0),
        N("Cast", ["sum"], ["loss"], name="loss/Cast", to=TensorProto.FLOAT),
    ]
    g = helper.make_graph(
        nodes, "scatter_huge",
        [helper.make_tensor_value_info("labels", TensorProto.INT64, [4])],
        [_loss_out()])
    return _model(g, opset=18)


# ---------------------------------------------------------------------------
# error models


def err_unsupported_op():
    rng = np.random.RandomState(5)
    inits = [_init("w", (rng.randn(4, 4) * 0.5).astype(np.float32))]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="lin/MatMul"),
        helper.make_node("Det", ["h"], ["d"], name="weird/Det"),        # [2]
        helper.make_node("ReduceMean", ["d"], ["loss"],
                         name="loss/ReduceMean", axes=[0], keepdims=0),
    ]
    g = helper.make_graph(
        nodes, "err_unsupported_op",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 4])],
        [_loss_out()], initializer=inits)
    return _model(g)


def err_bad_opset():
    # Only ops that exist at opset 7 so the model itself is valid ONNX.
    nodes = _mlp_body() + [
        helper.make_node("ReduceMean", ["logits"], ["loss"],
                         name="loss/ReduceMean", axes=[0, 1], keepdims=0),
    ]
    g = helper.make_graph(
        nodes, "err_bad_opset",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [_loss_out()], initializer=_mlp_params())
    return _model(g, opset=7)


def err_bad_domain():
    rng = np.random.RandomState(6)
    inits = [_init("w", (rng.randn(16, 8) * 0.1).astype(np.float32))]
    nodes = [
        helper.make_node("FusedMatMul", ["x", "w"], ["h"],
                         name="fused/FusedMatMul", domain="com.microsoft",
                         alpha=1.0, transA=0, transB=0),
        helper.make_node("ReduceMean", ["h"], ["loss"],
                         name="loss/ReduceMean", axes=[0, 1], keepdims=0),
    ]
    g = helper.make_graph(
        nodes, "err_bad_domain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [_loss_out()], initializer=inits)
    return _model(g, extra_opsets=[("com.microsoft", 1)])


def err_missing_initializer():
    params = [p for p in _mlp_params() if p.name != "fc1.weight"]
    nodes = _mlp_body() + [
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"],
                         ["loss"], name="loss/SoftmaxCrossEntropyLoss",
                         reduction="mean"),
    ]
    g = helper.make_graph(
        nodes, "err_missing_initializer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16]),
         helper.make_tensor_value_info("labels", TensorProto.INT64, [4])],
        [_loss_out()], initializer=params)
    return _model(g)


def err_no_scalar_loss():
    g = helper.make_graph(
        _mlp_body(), "err_no_scalar_loss",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, 10])],
        initializer=_mlp_params())
    return _model(g)


def _with_external_fc1_weight(location, graph_name):
    """mlp_static whose fc1.weight points at external data `location`."""
    m = mlp(4)
    m.graph.name = graph_name
    t = next(t for t in m.graph.initializer if t.name == "fc1.weight")
    nbytes = len(numpy_helper.to_array(t).tobytes())
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"),
                 ("length", str(nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return m


# ---------------------------------------------------------------------------
# writing


def _write_bytes(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _save(path, model):
    # Serialize ourselves: onnx.save_model would try to (re)write external
    # data for tensors marked EXTERNAL.
    _write_bytes(path, model.SerializeToString(deterministic=True))


def _save_external(dirpath, model):
    """All initializers in dirpath/weights.bin (fresh file, not appended)."""
    if os.path.isdir(dirpath):
        shutil.rmtree(dirpath)
    os.makedirs(dirpath)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    onnx.save_model(m, os.path.join(dirpath, "model.onnx"),
                    save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0,
                    convert_attribute=False)


def generate(outdir, verbose=False):
    os.makedirs(outdir, exist_ok=True)
    written = []

    def out(rel):
        p = os.path.join(outdir, rel)
        written.append(p)
        return p

    valid = {
        "mlp_loss.onnx": mlp("N"),
        "mlp_static.onnx": mlp(4),
        "tied.onnx": tied(),
        "shape_fold.onnx": shape_fold(),
        "ops_elementwise.onnx": ops_elementwise(),
        "ops_opset18.onnx": ops_opset18(),
        "cumsum_tile.onnx": cumsum_tile(),
        "scatter.onnx": scatter(),
    }
    for name, m in valid.items():
        onnx.checker.check_model(m, full_check=True)
        _save(out(name), m)

    # Valid ONNX, rejected by dsc for its own reasons.
    for name, m in {
        "err_unsupported_op.onnx": err_unsupported_op(),
        "err_bad_opset.onnx": err_bad_opset(),
        "err_bad_domain.onnx": err_bad_domain(),
        "err_no_scalar_loss.onnx": err_no_scalar_loss(),
    }.items():
        onnx.checker.check_model(m)
        _save(out(name), m)

    # Valid ONNX whose CumSum axis or Tile repeats do not fit the data.
    for name, m in {
        "err_cumsum_axis.onnx": cumsum_tile(axis=2),
        "err_tile_negative.onnx": cumsum_tile(repeats=(2, -1)),
        "err_tile_rank.onnx": cumsum_tile(repeats=(2, 1, 1)),
        "err_scatter_updates.onnx": scatter(nd_index=0),
        "err_scatter_reduction.onnx": scatter(reduction="add"),
        "err_scatter_elements.onnx": scatter(el_updates=(1, 1)),
        "err_scatter_huge.onnx": scatter_huge(),
    }.items():
        _save(out(name), m)

    # Invalid by design: no checker.
    _save(out("err_missing_initializer.onnx"), err_missing_initializer())
    static_bytes = valid["mlp_static.onnx"].SerializeToString(deterministic=True)
    _write_bytes(out("err_truncated.onnx"),
                 static_bytes[: int(len(static_bytes) * 0.6)])
    _write_bytes(out("err_not_onnx.onnx"),
                 b"this is not an onnx model\n" * 8)
    _write_bytes(out("err_dynamic_dim.onnx"),
                 valid["mlp_loss.onnx"].SerializeToString(deterministic=True))

    fc1 = next(t for t in valid["mlp_static.onnx"].graph.initializer
               if t.name == "fc1.weight")
    _write_bytes(out("outside.bin"), numpy_helper.to_array(fc1).tobytes())
    _save(out("err_extdata_outside/model.onnx"),
          _with_external_fc1_weight("../outside.bin", "err_extdata_outside"))
    _save(out("err_extdata_absolute/model.onnx"),
          _with_external_fc1_weight("/etc/passwd", "err_extdata_absolute"))

    # External data: ok, and with the data file missing.
    ok_dir = os.path.join(outdir, "extdata_ok")
    _save_external(ok_dir, valid["mlp_static.onnx"])
    out("extdata_ok/model.onnx")
    out("extdata_ok/weights.bin")
    onnx.checker.check_model(os.path.join(ok_dir, "model.onnx"))
    miss_dir = os.path.join(outdir, "extdata_missing")
    _save_external(miss_dir, valid["mlp_static.onnx"])
    os.remove(os.path.join(miss_dir, "weights.bin"))
    out("extdata_missing/model.onnx")

    if verbose:
        for p in written:
            print(f"wrote {p} ({os.path.getsize(p)} bytes)")
    return written


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--manifest", action="store_true",
                    help="also print the expectations as JSON on stdout")
    args = ap.parse_args(argv)
    generate(args.outdir, args.verbose)
    if args.manifest:
        json.dump(MANIFEST, sys.stdout, indent=2)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
