#!/usr/bin/env python3
"""Export small PyTorch training graphs (model + loss) to ONNX and write numeric
reference data for dsc's importer / gradient tests.

NOT run in CI and not runnable on a machine without torch.  It needs
python3 with torch (2.11), onnx, onnxscript, onnxruntime, transformers (5.x),
safetensors and numpy.  The committed fixtures under test/fixtures/ were made
on the lent device machine (CPU torch only), see test/fixtures/README.md:

    NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 \
        python3 scripts/export_torch_models.py /tmp/fx 2>&1 | tee /tmp/fx_log.txt
    # then: models (*.onnx, gpt2_nodrop_extdata/) -> test/fixtures/models/
    #       ref/<model>/                          -> test/fixtures/ref/

Output layout (OUTDIR):
    <name>_opset17.onnx        legacy TorchScript exporter (dynamo=False), opset 17,
                               TrainingMode.TRAINING, no constant folding, symbolic
                               batch dim "batch"
    <name>_opset18.onnx        dynamo exporter (dynamo=True, optimize=False), opset 18,
                               static B=4, model in train(); local functions inlined,
                               all weights internal
    gpt2_nodrop_extdata/model.onnx + weights.bin   external-data variant (legacy exporter)
    ref/<name>/...             reference data (see write_reference)
    report.json                everything printed below, machine readable

Every model's forward(inputs...) returns ONLY the scalar loss.
"""

import copy
import json
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter

import numpy as np
import onnx
from onnx import numpy_helper

B = 4
T = 32
MAX_FILE_BYTES = 2 * 1024 * 1024
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)

REPORT = {"files": {}, "models": {}, "errors": [], "warnings": []}


def log(*a):
    print(*a, flush=True)


def loud(msg):
    log("!" * 78)
    log("!!! " + msg)
    log("!" * 78)
    REPORT["warnings"].append(msg)


# --------------------------------------------------------------------------
# ONNX inspection helpers (no torch needed)
# --------------------------------------------------------------------------

def _dims(vi):
    t = vi.type
    if not t.HasField("tensor_type"):
        return str(t)
    tt = t.tensor_type
    dt = onnx.TensorProto.DataType.Name(tt.elem_type)
    if not tt.HasField("shape"):
        return f"{dt}[?]"
    ds = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            ds.append(str(d.dim_value))
        elif d.HasField("dim_param"):
            ds.append(d.dim_param)
        else:
            ds.append("?")
    return f"{dt}[{','.join(ds)}]"


def _attr_str(a):
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, onnx.TensorProto):
        return f"tensor<{onnx.TensorProto.DataType.Name(v.data_type)}{list(v.dims)}>"
    if isinstance(v, onnx.GraphProto):
        return "graph"
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, (list, tuple)) and len(v) > 16:
        return f"list(len={len(v)})"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def describe_model(m):
    g = m.graph
    init_names = {i.name for i in g.initializer}
    op_counts = Counter(
        (n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}")
        for n in g.node)
    details = {}
    for n in g.node:
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
        if key in details:
            continue
        details[key] = {
            "n_inputs": len(n.input),
            "n_outputs": len(n.output),
            "outputs_used": [o != "" for o in n.output],
            "attrs": {a.name: _attr_str(a) for a in n.attribute},
        }
    graph_inputs = [(i.name, _dims(i)) for i in g.input if i.name not in init_names]
    init_as_inputs = [i.name for i in g.input if i.name in init_names]
    return {
        "ir_version": m.ir_version,
        "producer": f"{m.producer_name} {m.producer_version}",
        "opset_imports": {(o.domain or "ai.onnx"): o.version for o in m.opset_import},
        "op_types": sorted(op_counts),
        "op_counts": dict(sorted(op_counts.items())),
        "op_details": details,
        "n_nodes": len(g.node),
        "inputs": graph_inputs,
        "initializers_as_inputs": init_as_inputs,
        "outputs": [(o.name, _dims(o)) for o in g.output],
        "n_initializers": len(g.initializer),
        "initializers": [(i.name, onnx.TensorProto.DataType.Name(i.data_type), list(i.dims))
                         for i in g.initializer],
        "n_local_functions": len(m.functions),
        "uses_external_data": any(onnx.external_data_helper.uses_external_data(t)
                                  for t in g.initializer),
    }


def print_description(fname, d):
    log(f"--- {fname}")
    log(f"    producer={d['producer']} ir={d['ir_version']} opsets={d['opset_imports']}")
    log(f"    op_types ({len(d['op_types'])}): {d['op_types']}")
    log(f"    op_counts: {d['op_counts']}")
    log(f"    inputs:  {d['inputs']}")
    if d["initializers_as_inputs"]:
        log(f"    initializers also listed as inputs: {len(d['initializers_as_inputs'])}")
    log(f"    outputs: {d['outputs']}")
    log(f"    n_nodes={d['n_nodes']} n_initializers={d['n_initializers']} "
        f"local_functions={d['n_local_functions']} external={d['uses_external_data']}")
    for name, dt, dims in d["initializers"]:
        log(f"      init {name}: {dt}{dims}")
    for op in ("BatchNormalization", "Dropout", "SoftmaxCrossEntropyLoss",
               "NegativeLogLikelihoodLoss", "LogSoftmax", "LayerNormalization", "Split",
               "Gemm", "Trilu", "Where", "Erf", "Gelu", "MaxPool", "GlobalAveragePool",
               "ReduceMean", "Conv", "Slice", "Gather", "GatherElements", "Range"):
        if op in d["op_details"]:
            log(f"      {op}: {d['op_details'][op]}")


def check(m_or_path):
    res = {}
    try:
        onnx.checker.check_model(m_or_path)
        res["check_model"] = "ok"
    except Exception as e:  # noqa: BLE001
        res["check_model"] = f"FAIL: {e}"[:2000]
    try:
        onnx.checker.check_model(m_or_path, full_check=True)
        res["check_model_full"] = "ok"
    except Exception as e:  # noqa: BLE001
        res["check_model_full"] = f"FAIL: {e}"[:2000]
    return res


def initializer_arrays(m):
    return {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}


def map_by_value(named_arrays, inits):
    """named_arrays: {torch_name: np.ndarray}; inits: {onnx_name: np.ndarray}.
    Returns (mapping, problems). Every torch tensor must match exactly one
    initializer (exact equality, same dtype/shape) and no initializer twice."""
    mapping, problems = {}, []
    for tname, arr in named_arrays.items():
        cands = [n for n, a in inits.items()
                 if a.shape == arr.shape and a.dtype == arr.dtype and np.array_equal(a, arr)]
        if len(cands) == 1:
            mapping[tname] = cands[0]
        elif len(cands) > 1:
            same = [c for c in cands if c == tname]
            if len(same) == 1:
                mapping[tname] = same[0]
                problems.append(f"{tname}: {len(cands)} value-equal initializers {cands}; "
                                f"chose exact name")
            else:
                problems.append(f"{tname}: AMBIGUOUS, {len(cands)} value-equal initializers {cands}")
        else:
            by_name = inits.get(tname)
            if by_name is None:
                problems.append(f"{tname}: NO initializer matches (shape {arr.shape})")
            else:
                problems.append(f"{tname}: initializer with same name has different value "
                                f"(max abs diff {np.abs(by_name.astype(np.float64) - arr).max()})")
    rev = Counter(mapping.values())
    for n, c in rev.items():
        if c > 1:
            problems.append(f"initializer {n} matched by {c} torch params")
    return mapping, problems


def ort_run(path, feeds_by_pos):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    feeds = dict(zip(names, feeds_by_pos))
    out = sess.run(None, feeds)
    return float(np.asarray(out[0]).reshape(-1)[0]), [np.asarray(o).shape for o in out]


# --------------------------------------------------------------------------
# models (torch imported lazily so the helpers above import without torch)
# --------------------------------------------------------------------------

def build_models():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

        def forward(self, x, y):
            return F.cross_entropy(self.net(x), y)

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

        def forward(self, x, y):
            return F.cross_entropy(self.net(x), y)

    # ---- nanoGPT (after Karpathy's model.py, non-flash attention path) ----
    class GPTConfig:
        def __init__(self, **kw):
            self.block_size = 32
            self.vocab_size = 65
            self.n_layer = 2
            self.n_head = 2
            self.n_embd = 32
            self.dropout = 0.0
            self.bias = True
            self.__dict__.update(kw)

    class LayerNorm(nn.Module):
        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(ndim))
            self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

        def forward(self, input):
            return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            assert config.n_embd % config.n_head == 0
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
            self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
            self.attn_dropout = nn.Dropout(config.dropout)
            self.resid_dropout = nn.Dropout(config.dropout)
            self.n_head = config.n_head
            self.n_embd = config.n_embd
            self.dropout = config.dropout
            self.flash = getattr(config, "flash", False)
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                 .view(1, 1, config.block_size, config.block_size))

        def forward(self, x):
            Bx, Tx, C = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(Bx, Tx, self.n_head, C // self.n_head).transpose(1, 2)
            q = q.view(Bx, Tx, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(Bx, Tx, self.n_head, C // self.n_head).transpose(1, 2)
            if self.flash:
                # nanoGPT's flash path (its default with torch >= 2.0)
                y = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=None,
                    dropout_p=self.dropout if self.training else 0, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = att.masked_fill(self.bias[:, :, :Tx, :Tx] == 0, float("-inf"))
                att = F.softmax(att, dim=-1)
                att = self.attn_dropout(att)
                y = att @ v
            y = y.transpose(1, 2).contiguous().view(Bx, Tx, C)
            y = self.resid_dropout(self.c_proj(y))
            return y

    class GPTMLP(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
            self.dropout = nn.Dropout(config.dropout)

        def forward(self, x):
            return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
            self.attn = CausalSelfAttention(config)
            self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
            self.mlp = GPTMLP(config)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlp(self.ln_2(x))
            return x

    class GPT(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd, bias=config.bias),
            ))
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # weight tying
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith("c_proj.weight"):
                    torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets):
            b, t = idx.size()
            pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
            tok_emb = self.transformer.wte(idx)
            pos_emb = self.transformer.wpe(pos)
            x = self.transformer.drop(tok_emb + pos_emb)
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)
            return loss

    class GPT2Loss(nn.Module):
        """HF GPT2LMHeadModel -> loss only.  manual_loss=True computes the same
        shifted mean cross entropy by hand (used for the float64 reference,
        because HF's loss helper upcasts logits with .float(), i.e. to fp32)."""

        def __init__(self, hf):
            super().__init__()
            self.model = hf
            self.manual_loss = False

        def forward(self, input_ids):
            # An all-ones attention_mask (no padding; semantically a no-op) is
            # passed so HF skips its "packed sequence" detection from
            # position_ids, which uses torch.diff (aten::diff has no symbolic
            # in the legacy exporter) and adds CumSum/Pad/... to the graph.
            attention_mask = torch.ones_like(input_ids)
            if self.manual_loss:
                logits = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                    use_cache=False).logits
                V = logits.size(-1)
                return F.cross_entropy(logits[:, :-1, :].reshape(-1, V),
                                       input_ids[:, 1:].reshape(-1))
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              labels=input_ids, use_cache=False).loss

    def make_gpt2(nodrop):
        from transformers import GPT2Config, GPT2LMHeadModel
        kw = dict(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                  attn_implementation="eager", use_cache=False)
        if nodrop:
            kw.update(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        cfg = GPT2Config(**kw)
        torch.manual_seed(0)
        hf = GPT2LMHeadModel(cfg)
        try:
            impl = hf.config._attn_implementation
        except Exception:  # noqa: BLE001
            impl = "?"
        log(f"    gpt2 (nodrop={nodrop}): attn_implementation={impl} "
            f"pdrop resid/embd/attn={cfg.resid_pdrop}/{cfg.embd_pdrop}/{cfg.attn_pdrop} "
            f"tied={hf.lm_head.weight is hf.transformer.wte.weight}")
        return GPT2Loss(hf)

    def seeded(fn):
        torch.manual_seed(0)
        return fn()

    def gen():
        return torch.Generator().manual_seed(1234)

    def batch_mlp():
        g = gen()
        return {"x": torch.randn(B, 64, generator=g), "y": torch.randint(0, 10, (B,), generator=g)}

    def batch_cnn():
        g = gen()
        return {"x": torch.randn(B, 3, 16, 16, generator=g),
                "y": torch.randint(0, 10, (B,), generator=g)}

    def batch_nanogpt():
        g = gen()
        idx = torch.randint(0, 65, (B, T), generator=g)
        targets = torch.randint(0, 65, (B, T), generator=g)
        targets[1, T - 4:] = -1  # exercise ignore_index=-1 (4 positions ignored)
        return {"idx": idx, "targets": targets}

    def batch_gpt2():
        g = gen()
        return {"input_ids": torch.randint(0, 128, (B, T), generator=g)}

    return {
        "mlp": dict(make=lambda: seeded(MLP), batch=batch_mlp, ref=True),
        "cnn": dict(make=lambda: seeded(CNN), batch=batch_cnn, ref=True, bn=True),
        "nanogpt": dict(make=lambda: seeded(lambda: GPT(GPTConfig())), batch=batch_nanogpt, ref=True),
        "nanogpt_sdpa": dict(make=lambda: seeded(lambda: GPT(GPTConfig(flash=True))),
                             batch=batch_nanogpt, ref=True),
        "gpt2": dict(make=lambda: make_gpt2(False), batch=batch_gpt2, ref=False),
        "gpt2_nodrop": dict(make=lambda: make_gpt2(True), batch=batch_gpt2, ref=True),
    }


def unique_params(model):
    """named_parameters() with tied weights de-duplicated (torch default)."""
    return dict(model.named_parameters())


def perturb_constant_params(model):
    """Parameters that are initialised to a constant (zero biases, LayerNorm /
    BatchNorm gamma=1 beta=0) get + N(0, 0.05^2) noise, so every parameter is
    value-unique (needed for the by-value name mapping) and bias gradients are
    exercised with non-trivial values.  Deterministic (own generator)."""
    import torch
    g = torch.Generator().manual_seed(4321)
    touched = []
    with torch.no_grad():
        for n, p in unique_params(model).items():
            flat = p.detach().reshape(-1)
            if flat.numel() > 0 and bool((flat == flat[0]).all()):
                p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.05)
                touched.append(n)
    return touched


# --------------------------------------------------------------------------
# exporters
# --------------------------------------------------------------------------

def export_legacy(model, batch, path):
    import torch
    names = list(batch)
    args = tuple(batch[k] for k in names)
    dyn = {k: {0: "batch"} for k in names}
    kw = dict(export_params=True, opset_version=17,
              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
              input_names=names, output_names=["loss"], dynamic_axes=dyn)
    try:
        torch.onnx.export(model, args, path, dynamo=False, **kw)
        how = "torch.onnx.export(dynamo=False)"
    except TypeError as e:
        log(f"    torch.onnx.export(dynamo=False) TypeError ({e}); trying torch.onnx.utils.export")
        torch.onnx.utils.export(model, args, path, **kw)
        how = "torch.onnx.utils.export"
    return how


def bn_train_translation_table():
    """onnxscript's torchlib (0.7.x) translates aten::_native_batch_norm_legit_functional
    with a hard-coded `training = False` ("temporary fix" for ORT), i.e. the stock
    dynamo export of a train()-mode BatchNorm is an INFERENCE-mode
    BatchNormalization (running stats, 1 output).  This custom translation emits
    BatchNormalization(training_mode=1) with 3 outputs instead (ONNX momentum =
    1 - torch momentum)."""
    import torch
    from onnxscript import opset18 as op

    def bn_legit_functional(input, weight, bias, running_mean, running_var,
                            training: bool = False, momentum: float = 0.1, eps: float = 1e-5):
        if not training:
            y = op.BatchNormalization(input, weight, bias, running_mean, running_var,
                                      epsilon=eps, momentum=1.0 - momentum, training_mode=0)
            return y, running_mean, running_var, running_mean, running_var
        y, new_mean, new_var = op.BatchNormalization(
            input, weight, bias, running_mean, running_var,
            epsilon=eps, momentum=1.0 - momentum, training_mode=1)
        # outputs: (y, save_mean, save_rstd, new_running_mean, new_running_var);
        # save_* only feed the autograd backward, never used in the forward graph.
        return y, new_mean, new_var, new_mean, new_var

    return {torch.ops.aten._native_batch_norm_legit_functional.default: bn_legit_functional}


def export_dynamo_bntrain(model, batch, path):
    """Dynamo export with BatchNormalization kept in training mode.  Two things
    are needed (both found in torch 2.11 / onnxscript 0.7.2 / onnx-ir 1.0):
      1. the custom translation above (torchlib hard-codes training=False);
      2. skipping the opset "conversion" 18 -> 18: torch.onnx.export always calls
         onnxscript.version_converter.convert_version(model, opset_version), whose
         clean-up RemoveUnusedNodesPass (onnx_ir.passes.common.unused_removal)
         renames BatchNormalization's unused running-stat outputs to "" AND pops
         its training_mode attribute, silently turning it into inference BN.
         The dynamo exporter drops the BUFFER_MUTATION outputs, so those
         outputs are always unused.  We make convert_version a no-op when the
         model already has the target opset (no conversion is needed then)."""
    import onnxscript.version_converter as vc
    orig = vc.convert_version

    def convert_version_skip_same(model, target_version, *a, **k):
        if model.graph.opset_imports.get("", None) == target_version:
            return None
        return orig(model, target_version, *a, **k)

    vc.convert_version = convert_version_skip_same
    try:
        info = export_dynamo(model, batch, path, custom_translation_table=bn_train_translation_table())
    finally:
        vc.convert_version = orig
    info["custom_translation"] = ("aten._native_batch_norm_legit_functional -> "
                                  "BatchNormalization(training_mode=1); "
                                  "convert_version(18->18) clean-up skipped")
    return info


def export_dynamo(model, batch, path, custom_translation_table=None):
    import torch
    names = list(batch)
    args = tuple(batch[k] for k in names)
    info = {}
    t0 = time.time()
    kw = {}
    if custom_translation_table:
        kw["custom_translation_table"] = custom_translation_table
    prog = torch.onnx.export(model, args, dynamo=True, optimize=False, opset_version=18,
                             input_names=names, output_names=["loss"], **kw)
    info["export_seconds"] = round(time.time() - t0, 2)
    try:
        ep = prog.exported_program
        if ep is not None:
            sig = ep.graph_signature
            info["ep_output_kinds"] = [str(s.kind).split(".")[-1] for s in sig.output_specs]
            info["ep_input_kinds"] = dict(Counter(str(s.kind).split(".")[-1] for s in sig.input_specs))
            info["ep_buffers_to_mutate"] = dict(getattr(sig, "buffers_to_mutate", {}) or {})
            targets = Counter()
            for node in ep.graph.nodes:
                if node.op == "call_function":
                    targets[str(node.target)] += 1
            info["ep_aten_ops"] = dict(sorted(targets.items()))
    except Exception as e:  # noqa: BLE001
        info["ep_info_error"] = repr(e)
    with tempfile.TemporaryDirectory() as td:
        tmp = os.path.join(td, "m.onnx")
        try:
            prog.save(tmp, external_data=False)
            info["saved_via"] = "ONNXProgram.save(external_data=False)"
        except Exception as e:  # noqa: BLE001
            info["save_error"] = repr(e)
            onnx.save(prog.model_proto, tmp)
            info["saved_via"] = "onnx.save(ONNXProgram.model_proto)"
        m = onnx.load(tmp, load_external_data=True)
        info["had_external_data_files"] = sorted(set(os.listdir(td)) - {"m.onnx"})
    info["local_functions_before_inline"] = [f"{f.domain}::{f.name}" for f in m.functions]
    if len(m.functions):
        m = onnx.inliner.inline_local_functions(m)
        info["inlined"] = True
        # drop opset imports of function domains that no node uses any more
        used = {n.domain for n in m.graph.node}
        keep = [o for o in m.opset_import if o.domain in ("", "ai.onnx") or o.domain in used]
        if len(keep) != len(m.opset_import):
            info["dropped_opset_imports"] = [o.domain for o in m.opset_import if o not in keep]
            del m.opset_import[:]
            m.opset_import.extend(keep)
    for t in m.graph.initializer:
        if onnx.external_data_helper.uses_external_data(t):
            raise RuntimeError(f"initializer {t.name} still external")
    onnx.save(m, path, save_as_external_data=False)
    return info


# --------------------------------------------------------------------------
# reference data
# --------------------------------------------------------------------------

def write_reference(name, spec, model0, sd0, batch, exported, refdir):
    import torch
    from safetensors.torch import save_file

    os.makedirs(refdir, exist_ok=True)
    out = {}
    named = {k: v.detach().cpu().numpy() for k, v in unique_params(model0).items()}
    mappings, problems_all = {}, {}
    for tag, path in exported.items():
        inits = initializer_arrays(onnx.load(path))
        mp, probs = map_by_value(named, inits)
        mappings[tag], problems_all[tag] = mp, probs
        for pr in probs:
            loud(f"{name} {tag} name mapping: {pr}")
        missing = [k for k in named if k not in mp]
        if missing:
            loud(f"{name} {tag}: {len(missing)} trainable params NOT mapped: {missing}")
    key_tag = "opset17" if "opset17" in mappings else ("opset18" if "opset18" in mappings else None)
    if key_tag is None:
        loud(f"{name}: no exported model to key reference data by; using torch names")
        keymap = {k: k for k in named}
    else:
        keymap = {k: mappings[key_tag].get(k, k) for k in named}

    # buffers (BN running stats) by name
    buffers = {k: v for k, v in model0.named_buffers() if _is_bn_buffer(k)}
    buf_maps = {}
    for tag, path in exported.items():
        inits = {i.name for i in onnx.load(path).graph.initializer}
        buf_maps[tag] = {k: (k if k in inits else None) for k in buffers}
    bkey = {k: (buf_maps.get(key_tag, {}).get(k) or k) for k in buffers}

    names_json = {
        "keyed_by": key_tag,
        "param_torch_to_onnx": keymap,
        "param_torch_to_onnx_per_exporter": mappings,
        "mapping_problems": problems_all,
        "opset18_names_differ": (
            {k: [mappings["opset17"].get(k), mappings["opset18"].get(k)]
             for k in named if mappings["opset17"].get(k) != mappings["opset18"].get(k)}
            if ("opset17" in mappings and "opset18" in mappings) else "n/a"),
        "buffer_torch_to_onnx_per_exporter": buf_maps,
        "tied_parameters": [[a, b] for a, b in _tied_names(model0)],
        "graph_inputs": {tag: [i.name for i in onnx.load(p).graph.input
                               if i.name not in {x.name for x in onnx.load(p).graph.initializer}]
                         for tag, p in exported.items()},
        "batch_keys": list(batch),
        "perturbed_constant_params": spec.get("perturbed", []),
    }
    for tag, ins in names_json["graph_inputs"].items():
        if ins != list(batch):
            loud(f"{name} {tag}: ONNX graph inputs {ins} != batch keys {list(batch)}")

    # ---- batch / params
    save_file({k: v.contiguous() for k, v in batch.items()}, os.path.join(refdir, "batch.safetensors"))
    save_file({keymap[k]: v.detach().clone().contiguous() for k, v in unique_params(model0).items()},
              os.path.join(refdir, "params.safetensors"))
    if buffers:
        save_file({bkey[k]: v.detach().clone().contiguous() for k, v in buffers.items()},
                  os.path.join(refdir, "buffers_before.safetensors"))

    is_gpt2 = name.startswith("gpt2")
    args = tuple(batch[k] for k in batch)

    # ---- float32 forward/backward (train mode) on a copy
    m32 = copy.deepcopy(model0)
    m32.load_state_dict(sd0)
    m32.train()
    loss32 = m32(*args)
    loss32.backward()
    g32 = {keymap[k]: p.grad.detach().clone().contiguous()
           for k, p in unique_params(m32).items() if p.grad is not None}
    save_file(g32, os.path.join(refdir, "grads_f32.safetensors"))
    loss_info = {"loss_f32": float(loss32.item())}
    if is_gpt2:
        m32b = copy.deepcopy(model0)
        m32b.load_state_dict(sd0)
        m32b.train()
        m32b.manual_loss = True
        with torch.no_grad():
            lm = float(m32b(*args).item())
        loss_info["loss_f32_manual_shifted_ce"] = lm
        log(f"    {name}: HF loss f32 {loss_info['loss_f32']:.8f} vs manual {lm:.8f}")
        if abs(lm - loss_info["loss_f32"]) > 1e-5:
            loud(f"{name}: manual shifted CE != HF loss ({lm} vs {loss_info['loss_f32']})")
    if buffers:
        save_file({bkey[k]: v.detach().clone().contiguous() for k, v in m32.named_buffers()
                   if k in buffers},
                  os.path.join(refdir, "buffers_after_f32.safetensors"))

    # ---- float64
    m64 = copy.deepcopy(model0)
    m64.load_state_dict(sd0)
    m64 = m64.double()
    m64.train()
    if is_gpt2:
        m64.manual_loss = True
    args64 = tuple(a.double() if a.is_floating_point() else a for a in args)
    loss64 = m64(*args64)
    loss64.backward()
    p64 = unique_params(m64)
    nograd = [k for k, p in p64.items() if p.grad is None]
    if nograd:
        loud(f"{name}: params without grad in f64: {nograd}")
    g64 = {keymap[k]: p.grad.detach().clone().contiguous() for k, p in p64.items() if p.grad is not None}
    save_file(g64, os.path.join(refdir, "grads_f64.safetensors"))
    loss_info["loss_f64"] = float(loss64.item())
    # f32 vs f64 sanity
    # f32 vs f64 grads: |g32-g64|max / max(|g64|max, 1e-3 * global |g64|max).
    # (the floor matters for grads that are ~0 in exact arithmetic, e.g. the
    # bias of a conv followed by a train-mode BatchNorm)
    gmax = max(float(v.abs().max()) for v in g64.values())
    per = {}
    for k in g64:
        a, b = g64[k], g32[k].double()
        per[k] = {"max_abs_diff": float((a - b).abs().max()), "max_abs_f64": float(a.abs().max()),
                  "rel": float((a - b).abs().max() / max(float(a.abs().max()), 1e-3 * gmax))}
    worst = max(v["rel"] for v in per.values())
    loss_info["grad_f32_vs_f64"] = per
    loss_info["max_rel_grad_diff_f32_vs_f64"] = worst
    log(f"    {name}: loss f32={loss_info['loss_f32']:.8f} f64={loss_info['loss_f64']:.12f} "
        f"max rel grad diff f32 vs f64 = {worst:.3e}")
    tiny = {k: v["max_abs_f64"] for k, v in per.items() if v["max_abs_f64"] < 1e-9 * gmax}
    if tiny:
        log(f"    {name}: grads that are ~0 in exact arithmetic: {tiny}")
        loss_info["grads_near_zero_f64"] = tiny
    if buffers:
        save_file({bkey[k]: v.detach().clone().contiguous() for k, v in m64.named_buffers()
                   if k in buffers},
                  os.path.join(refdir, "buffers_after_f64.safetensors"))

    # ---- AdamW step (float64)
    opt = torch.optim.AdamW(list(p64.values()), lr=ADAMW["lr"], betas=ADAMW["betas"],
                            eps=ADAMW["eps"], weight_decay=ADAMW["weight_decay"],
                            amsgrad=False, maximize=False, foreach=False)
    opt.step()
    save_file({keymap[k]: p.detach().clone().contiguous() for k, p in p64.items()},
              os.path.join(refdir, "adamw_step1_f64.safetensors"))
    with open(os.path.join(refdir, "adamw.json"), "w") as f:
        json.dump({"optimizer": "torch.optim.AdamW", "lr": ADAMW["lr"], "betas": list(ADAMW["betas"]),
                   "eps": ADAMW["eps"], "weight_decay": ADAMW["weight_decay"], "amsgrad": False,
                   "maximize": False, "step": 1, "dtype": "float64",
                   "start": "params.safetensors (cast to float64)", "grads": "grads_f64.safetensors",
                   "rule": "p <- p*(1-lr*wd); m=(1-b1)g; v=(1-b2)g^2; "
                           "p <- p - lr*(m/(1-b1)) / (sqrt(v/(1-b2)) + eps)"}, f, indent=1)

    out["loss"] = loss_info
    out["names"] = names_json
    return out


def _is_bn_buffer(name):
    return name.rsplit(".", 1)[-1] in ("running_mean", "running_var", "num_batches_tracked")


def _tied_names(model):
    seen, tied = {}, []
    for n, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            tied.append((seen[id(p)], n))
        else:
            seen[id(p)] = n
    return tied


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main(argv=None, build=None):
    argv = sys.argv if argv is None else argv
    if len(argv) < 2:
        print(__doc__)
        sys.exit(2)
    outdir = os.path.abspath(argv[1])
    only = set(argv[2:])
    os.makedirs(outdir, exist_ok=True)

    import torch
    import onnxscript
    import onnxruntime
    import safetensors
    import transformers

    torch.manual_seed(0)
    np.random.seed(0)
    torch.use_deterministic_algorithms(True, warn_only=True)

    env = {"torch": torch.__version__, "onnx": onnx.__version__, "onnxscript": onnxscript.__version__,
           "onnxruntime": onnxruntime.__version__, "transformers": transformers.__version__,
           "safetensors": safetensors.__version__, "numpy": np.__version__,
           "python": sys.version.split()[0], "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    try:
        import onnx_ir
        env["onnx_ir"] = onnx_ir.__version__
    except Exception:  # noqa: BLE001
        pass
    try:
        env["cuda_device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    except Exception as e:  # noqa: BLE001
        env["cuda_device"] = f"error {e}"
    REPORT["env"] = env
    log("ENV", json.dumps(env))

    specs = (build or build_models)()
    summary = []
    for name, spec in specs.items():
        if only and name not in only:
            continue
        log("=" * 78)
        log(f"MODEL {name}")
        rec = REPORT["models"].setdefault(name, {})
        try:
            model = spec["make"]()
            spec["perturbed"] = perturb_constant_params(model)
            model.train()
            sd0 = copy.deepcopy(model.state_dict())
            batch = spec["batch"]()
            rec["n_params"] = int(sum(p.numel() for p in unique_params(model).values()))
            rec["params"] = {k: list(v.shape) for k, v in unique_params(model).items()}
            rec["buffers"] = {k: list(v.shape) for k, v in model.named_buffers()}
            rec["perturbed_constant_params"] = spec["perturbed"]
            rec["tied"] = _tied_names(model)
            log(f"    params={rec['n_params']} tied={rec['tied']}")
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            REPORT["errors"].append(f"{name} build: {e!r}")
            summary.append((name, "build", "FAIL", repr(e)[:200]))
            continue

        exported = {}
        exporters = [("opset17", export_legacy), ("opset18", export_dynamo)]
        if spec.get("bn"):
            # opset18 = dynamo + custom BN translation (training_mode=1);
            # opset18_stockbn = what the stock dynamo exporter produces (inference BN)
            exporters = [("opset17", export_legacy), ("opset18", export_dynamo_bntrain),
                         ("opset18_stockbn", export_dynamo)]
        for tag, fn in exporters:
            fname = f"{name}_{tag}.onnx"
            path = os.path.join(outdir, fname)
            model.load_state_dict(sd0)  # tracing in train mode updates BN stats
            model.train()
            try:
                t0 = time.time()
                info = fn(model, batch, path)
                m = onnx.load(path)
                d = describe_model(m)
                d["exporter"] = info
                d["bytes"] = os.path.getsize(path)
                d.update(check(m))
                d["export_seconds_total"] = round(time.time() - t0, 2)
                # train-mode trace must not leak into the saved model state
                if d["bytes"] > MAX_FILE_BYTES:
                    loud(f"{fname} is {d['bytes']} bytes > 2 MB")
                REPORT["files"][fname] = d
                print_description(fname, d)
                log(f"    exporter info: {json.dumps(info, default=str)[:3000]}")
                log(f"    checker: {d['check_model']} | full: {d['check_model_full'][:300]}")
                exported[tag] = path
                summary.append((name, tag, "OK", f"{len(d['op_types'])} op types, {d['bytes']} B"))
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                REPORT["errors"].append(f"{fname}: {e!r}"[:3000])
                summary.append((name, tag, "FAIL", repr(e)[:300]))
                if os.path.exists(path):
                    os.remove(path)
        model.load_state_dict(sd0)
        model.train()

        # external-data variant
        if name == "gpt2_nodrop":
            ddir = os.path.join(outdir, "gpt2_nodrop_extdata")
            try:
                src = exported.get("opset17")
                src_note = "legacy exporter (gpt2_nodrop_opset17)"
                if src is None:
                    src = exported.get("opset18")
                    src_note = "FALLBACK: dynamo exporter (gpt2_nodrop_opset18), legacy failed"
                    loud("gpt2_nodrop_extdata made from the dynamo export (legacy failed)")
                m = onnx.load(src)
                os.makedirs(ddir, exist_ok=True)
                mpath = os.path.join(ddir, "model.onnx")
                onnx.save_model(copy.deepcopy(m), mpath, save_as_external_data=True, all_tensors_to_one_file=True,
                                location="weights.bin", size_threshold=0)
                m2 = onnx.load(mpath, load_external_data=False)
                d = describe_model(m2)
                d["source"] = src_note
                d["bytes"] = os.path.getsize(mpath)
                d["weights_bin_bytes"] = os.path.getsize(os.path.join(ddir, "weights.bin"))
                d.update(check(mpath))
                same = all(np.array_equal(numpy_helper.to_array(a), numpy_helper.to_array(b))
                           for a, b in zip(onnx.load(mpath).graph.initializer, m.graph.initializer))
                d["roundtrip_equal"] = bool(same)
                REPORT["files"]["gpt2_nodrop_extdata/model.onnx"] = d
                print_description("gpt2_nodrop_extdata/model.onnx", d)
                log(f"    weights.bin {d['weights_bin_bytes']} B, roundtrip equal: {same}, "
                    f"checker: {d['check_model']} | full: {d['check_model_full'][:300]}")
                summary.append((name, "extdata", "OK", src_note))
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                REPORT["errors"].append(f"gpt2_nodrop_extdata: {e!r}")
                summary.append((name, "extdata", "FAIL", repr(e)[:300]))

        # reference data
        if spec["ref"]:
            try:
                r = write_reference(name, spec, model, sd0, batch, exported,
                                    os.path.join(outdir, "ref", name))
                rec["ref"] = r
                summary.append((name, "ref", "OK", f"loss f64={r['loss']['loss_f64']:.6f}"))
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                REPORT["errors"].append(f"{name} ref: {e!r}")
                summary.append((name, "ref", "FAIL", repr(e)[:300]))

        # onnxruntime sanity (B=4 and, for the dynamic-batch legacy model, B=2)
        ort_res = {}
        loss_ref = rec.get("ref", {}).get("loss", {}).get("loss_f32")
        if loss_ref is None:
            try:
                with torch.no_grad():
                    m_ = copy.deepcopy(model)
                    m_.load_state_dict(sd0)
                    m_.train()
                    loss_ref = float(m_(*batch.values()).item())
            except Exception:  # noqa: BLE001
                loss_ref = None
        ort_res["torch_loss_f32_B4"] = loss_ref
        try:
            with torch.no_grad():
                m_ = copy.deepcopy(model)
                m_.load_state_dict(sd0)
                m_.train()
                ort_res["torch_loss_f32_B2"] = float(m_(*[v[:2] for v in batch.values()]).item())
        except Exception as e:  # noqa: BLE001
            ort_res["torch_loss_f32_B2"] = repr(e)
        for tag, path in exported.items():
            for bsz in ((4, 2) if tag == "opset17" else (4,)):
                key = f"{tag}_B{bsz}"
                try:
                    feeds = [v[:bsz].numpy() for v in batch.values()]
                    val, shapes = ort_run(path, feeds)
                    ref_ = ort_res["torch_loss_f32_B4" if bsz == 4 else "torch_loss_f32_B2"]
                    diff = abs(val - ref_) if isinstance(ref_, float) else None
                    ort_res[key] = {"loss": val, "abs_diff_vs_torch": diff, "output_shapes": str(shapes)}
                except Exception as e:  # noqa: BLE001
                    ort_res[key] = f"ORT error: {str(e)[:400]}"
                log(f"    ORT {key}: {ort_res[key]}")
        rec["onnxruntime"] = ort_res
        if rec.get("ref"):
            rec["ref"]["loss"]["onnxruntime"] = ort_res
            with open(os.path.join(outdir, "ref", name, "loss.json"), "w") as f:
                json.dump(rec["ref"]["loss"], f, indent=1)
            with open(os.path.join(outdir, "ref", name, "names.json"), "w") as f:
                json.dump(rec["ref"]["names"], f, indent=1)

    # size check of everything written
    big = []
    for root, _, files in os.walk(outdir):
        for fn in files:
            p = os.path.join(root, fn)
            if os.path.getsize(p) > MAX_FILE_BYTES:
                big.append((os.path.relpath(p, outdir), os.path.getsize(p)))
    if big:
        loud(f"files over 2 MB: {big}")
    REPORT["summary"] = summary
    with open(os.path.join(outdir, "report.json"), "w") as f:
        json.dump(REPORT, f, indent=1, default=str)

    log("=" * 78)
    log("SUMMARY")
    for row in summary:
        log("  %-12s %-8s %-4s %s" % row)
    for name, rec in REPORT["models"].items():
        log(f"  {name}: ORT {json.dumps(rec.get('onnxruntime', {}), default=str)[:600]}")
    for fname, d in sorted(REPORT["files"].items()):
        log(f"  {fname}: {d['op_types']}")
    log(f"  errors: {len(REPORT['errors'])}")
    for e in REPORT["errors"]:
        log("   - " + e[:500])
    log(f"  warnings: {len(REPORT['warnings'])}")
    for w in REPORT["warnings"]:
        log("   - " + w[:500])
    return 0


if __name__ == "__main__":
    sys.exit(main())
