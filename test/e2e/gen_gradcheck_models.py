#!/usr/bin/env python3
"""Writes small float64 ONNX training graphs, one per op family, whose
gradients a compiled program checks by central finite differences
(`--gradcheck`). Each graph applies the ops to trainable initializers and
reduces with a fixed random weighting to a scalar loss, so every element's
gradient matters. Deterministic; standard onnx helper API only.

usage: gen_gradcheck_models.py OUTDIR"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

D = TensorProto.DOUBLE
rng = np.random.default_rng(1234)


class G:
    def __init__(self, name, opset=17):
        self.name, self.opset = name, opset
        self.nodes, self.inits, self.count = [], [], 0

    def param(self, name, shape, lo=-1.0, hi=1.0):
        self.inits.append(numpy_helper.from_array(
            rng.uniform(lo, hi, shape).astype(np.float64), name))
        return name

    def const(self, value, dtype=np.float64):
        self.count += 1
        n = f"c{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), n))
        return n

    def op(self, op_type, inputs, nout=1, **attrs):
        self.count += 1
        outs = [f"{op_type.lower()}{self.count}_{i}" for i in range(nout)]
        self.nodes.append(helper.make_node(
            op_type, inputs, outs, name=f"{op_type}_{self.count}", **attrs))
        return outs[0] if nout == 1 else outs

    def loss_of(self, values):
        """sum(v * W) over each value, added up."""
        total = None
        for v, shape in values:
            w = self.const(rng.uniform(-1, 1, shape))
            s = self.op("ReduceSum", [self.op("Mul", [v, w])], keepdims=0)
            total = s if total is None else self.op("Add", [total, s])
        self.nodes.append(helper.make_node("Identity", [total], ["loss"],
                                           name="loss"))

    def save(self, outdir, inputs=()):
        graph = helper.make_graph(
            self.nodes, self.name, list(inputs),
            [helper.make_tensor_value_info("loss", D, [])], self.inits)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", self.opset)],
            producer_name="dsc-gen_gradcheck_models")
        model.ir_version = 8
        onnx.checker.check_model(model)
        onnx.save(model, os.path.join(outdir, f"{self.name}.onnx"))


def elementwise(outdir):
    g = G("gc_elementwise", opset=20)
    x = g.param("x", [3, 4])
    pos = g.op("Add", [g.op("Mul", [x, x]), g.const(0.5)])  # > 0
    vals = []
    for op in ["Exp", "Tanh", "Erf", "Sigmoid", "Neg", "Sin", "Cos",
               "Softplus", "Abs", "Relu"]:
        vals.append(g.op(op, [x]))
    for op in ["Log", "Sqrt", "Reciprocal"]:
        vals.append(g.op(op, [pos]))
    vals.append(g.op("LeakyRelu", [x], alpha=0.2))
    vals.append(g.op("Clip", [x, g.const(-0.5), g.const(0.6)]))
    vals.append(g.op("Gelu", [x]))
    vals.append(g.op("Gelu", [x], approximate="tanh"))
    g.loss_of([(v, [3, 4]) for v in vals])
    g.save(outdir)


def binary(outdir):
    g = G("gc_binary")
    a = g.param("a", [2, 3, 4])
    b = g.param("b", [4])
    c = g.param("c", [3, 1], 0.5, 1.5)
    pos = g.op("Add", [g.op("Mul", [a, a]), g.const(0.5)])
    vals = [(g.op("Add", [a, b]), [2, 3, 4]), (g.op("Sub", [b, a]), [2, 3, 4]),
            (g.op("Mul", [a, c]), [2, 3, 4]), (g.op("Div", [a, c]), [2, 3, 4]),
            (g.op("Pow", [pos, c]), [2, 3, 4]),
            (g.op("Pow", [pos, g.const(3.0)]), [2, 3, 4]),
            (g.op("Max", [a, b]), [2, 3, 4]), (g.op("Min", [a, c]), [2, 3, 4]),
            (g.op("Where", [g.const(rng.uniform(0, 1, [3, 4]) > 0.5, np.bool_),
                            a, b]), [2, 3, 4])]
    g.loss_of(vals)
    g.save(outdir)


def linalg(outdir):
    g = G("gc_linalg")
    a = g.param("a", [2, 3, 5])
    b = g.param("b", [5, 4])
    v = g.param("v", [5])
    m = g.param("m", [3, 5])
    n = g.param("n", [4, 5])
    bias = g.param("bias", [4])
    vals = [(g.op("MatMul", [a, b]), [2, 3, 4]),
            (g.op("MatMul", [a, v]), [2, 3]),
            (g.op("MatMul", [v, b]), [4]),
            (g.op("Gemm", [m, n, bias], transB=1, alpha=0.7, beta=1.3), [3, 4]),
            (g.op("Gemm", [g.op("Transpose", [m], perm=[1, 0]), b], transA=1),
             [3, 4])]
    g.loss_of(vals)
    g.save(outdir)


def conv_pool(outdir):
    g = G("gc_conv_pool")
    x = g.param("x", [2, 4, 7, 6])
    w = g.param("w", [6, 2, 3, 3])
    bias = g.param("bias", [6])
    conv = g.op("Conv", [x, w, bias], group=2, strides=[2, 1],
                pads=[1, 0, 1, 2], dilations=[1, 2])
    vals = [(conv, [2, 6, 4, 4]),
            (g.op("MaxPool", [x], kernel_shape=[3, 2], strides=[2, 2],
                  ceil_mode=1), [2, 4, 3, 3]),
            (g.op("AveragePool", [x], kernel_shape=[2, 3], strides=[2, 2],
                  pads=[1, 1, 0, 1], count_include_pad=1), [2, 4, 4, 3]),
            (g.op("AveragePool", [x], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             [2, 4, 7, 6]),
            (g.op("GlobalAveragePool", [x]), [2, 4, 1, 1]),
            (g.op("GlobalMaxPool", [x]), [2, 4, 1, 1])]
    g.loss_of(vals)
    g.save(outdir)


def norm_loss(outdir):
    g = G("gc_norm_loss")
    x = g.param("x", [4, 3, 5])
    scale = g.param("scale", [3])
    shift = g.param("shift", [3])
    ln_s = g.param("ln_s", [5])
    ln_b = g.param("ln_b", [5])
    mean = g.const(np.zeros(3))
    var = g.const(np.ones(3))
    bn = g.op("BatchNormalization", [x, scale, shift, mean, var], nout=3,
              training_mode=1, epsilon=1e-3)[0]
    bn_inf = g.op("BatchNormalization", [x, scale, shift,
                                         g.const(rng.uniform(-1, 1, 3)),
                                         g.const(rng.uniform(0.5, 2, 3))])
    ln = g.op("LayerNormalization", [x, ln_s, ln_b], axis=-1, epsilon=1e-4)
    sm = g.op("Softmax", [x], axis=1)
    lsm = g.op("LogSoftmax", [x], axis=-1)
    labels = g.const(np.array([[0, 2, 1, 0, 2], [1, 1, 0, 2, 2],
                               [2, -1, 0, 1, 0], [0, 1, -1, 2, 1]]), np.int64)
    sce = g.op("SoftmaxCrossEntropyLoss", [x, labels, g.const([0.3, 1.0, 2.0])],
               ignore_index=-1)
    sce_sum = g.op("SoftmaxCrossEntropyLoss", [x, labels], ignore_index=-1,
                   reduction="sum")
    nll = g.op("NegativeLogLikelihoodLoss",
               [g.op("LogSoftmax", [x], axis=1), labels], ignore_index=-1)
    nll_none = g.op("NegativeLogLikelihoodLoss",
                    [g.op("LogSoftmax", [x], axis=1), labels],
                    ignore_index=-1, reduction="none")
    g.loss_of([(bn, [4, 3, 5]), (bn_inf, [4, 3, 5]), (ln, [4, 3, 5]),
               (sm, [4, 3, 5]), (lsm, [4, 3, 5]), (sce, []), (sce_sum, []),
               (nll, []), (nll_none, [4, 5])])
    g.save(outdir)


def reductions_movement(outdir):
    g = G("gc_movement")
    x = g.param("x", [2, 3, 4])
    t = g.param("table", [6, 3])
    pos = g.op("Add", [g.op("Mul", [x, x]), g.const(0.5)])
    ax = g.const(np.array([1]), np.int64)
    vals = [(g.op("ReduceSum", [x, ax], keepdims=1), [2, 1, 4]),
            (g.op("ReduceMean", [x], axes=[0, 2], keepdims=0), [3]),
            (g.op("ReduceMax", [x], axes=[2], keepdims=0), [2, 3]),
            (g.op("ReduceMin", [x], axes=[1], keepdims=1), [2, 1, 4]),
            (g.op("ReduceProd", [pos], axes=[2], keepdims=0), [2, 3]),
            (g.op("Reshape", [x, g.const(np.array([4, -1]), np.int64)]),
             [4, 6]),
            (g.op("Transpose", [x], perm=[2, 0, 1]), [4, 2, 3]),
            (g.op("Expand", [g.op("ReduceSum", [x, ax], keepdims=1),
                             g.const(np.array([2, 3, 4]), np.int64)]),
             [2, 3, 4]),
            (g.op("Slice", [x, g.const(np.array([3, 0]), np.int64),
                            g.const(np.array([-5, 3]), np.int64),
                            g.const(np.array([-1, 1]), np.int64),
                            g.const(np.array([-2, 1]), np.int64)]),
             [2, 3, 2]),
            (g.op("Concat", [x, g.op("Neg", [x])], axis=1), [2, 6, 4])]
    s = g.op("Split", [x, g.const(np.array([1, 3]), np.int64)], nout=2,
             axis=2)
    vals += [(s[0], [2, 3, 1]), (s[1], [2, 3, 3])]
    idx = g.const(np.array([[0, 5, 2], [5, 5, 1]]), np.int64)
    vals.append((g.op("Gather", [t, idx], axis=0), [2, 3, 3]))
    vals.append((g.op("Gather", [t, g.const(np.array([2, 0]), np.int64)],
                      axis=1), [6, 2]))
    vals.append((g.op("Pad", [x, g.const(np.array([0, 1, 2, 0, 0, -1]),
                                         np.int64), g.const(0.5)]),
                 [2, 4, 5]))
    vals.append((g.op("Trilu", [x, g.const(np.array(1), np.int64)], upper=0),
                 [2, 3, 4]))
    axis = lambda a: g.const(np.array(a), np.int64)
    vals.append((g.op("CumSum", [x, axis(1)]), [2, 3, 4]))
    vals.append((g.op("CumSum", [x, axis(-1)], exclusive=1, reverse=1),
                 [2, 3, 4]))
    vals.append((g.op("CumSum", [x, axis(0)], reverse=1), [2, 3, 4]))
    vals.append((g.op("Tile", [x, g.const(np.array([2, 1, 3]), np.int64)]),
                 [4, 3, 12]))
    # ScatterND writes rows 2 and 0 of x's first dim-1 slab (T5's label
    # shift); ScatterElements writes along the last axis (BART's).
    u = g.param("updates", [2, 4])
    vals.append((g.op("ScatterND", [x, g.const(np.array([[0, 2], [1, 0]]),
                                                np.int64), u]), [2, 3, 4]))
    ue = g.param("updates_el", [2, 3, 1])
    vals.append((g.op("ScatterElements",
                      [x, g.const(np.array([[[3], [0], [-1]], [[1], [2], [0]]]),
                                  np.int64), ue], axis=2), [2, 3, 4]))
    vals.append((g.op("Dropout", [x, g.const(0.3),
                                  g.const(np.array(True), np.bool_)]),
                 [2, 3, 4]))
    g.loss_of(vals)
    g.save(outdir)


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    for f in (elementwise, binary, linalg, conv_pool, norm_loss,
              reductions_movement):
        f(outdir)


if __name__ == "__main__":
    main()
