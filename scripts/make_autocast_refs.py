#!/usr/bin/env python3
"""PyTorch autocast-bf16 (and autocast-fp16) gradients of the committed
fixtures, made on a GPU: the reference dsc's --precision bf16 / fp16
programs are held against (scripts/gpu-check.sh, docs/numerics.md).

For each selected fixture: the module that scripts/export_torch_models.py
(mlp, cnn, nanogpt, gpt2_nodrop) or scripts/export_hf_models.py (hf_*)
builds, loaded with the fixture's own parameters
(test/fixtures/ref/<name>/params.safetensors, keyed by ONNX names through
names.json's param_torch_to_onnx; tied parameters are one torch parameter
and one ONNX initializer) and buffers, runs the fixture batch
(batch.safetensors, in names.json's batch_keys order, through the same
wrapper and loss as the float64 reference of export_torch_models.py's
write_reference) once in train mode on the GPU under torch.autocast (fp32
weights, as autocast is meant to be used), and its gradients are written to
OUTDIR/<name>/grads_autocast_<bf16|fp16>.safetensors. Per model it prints
the loss (next to the fixture's float64 loss) and the relative error of the
gradients against grads_f64.safetensors in units of u, as
test/e2e/compare_grads.py measures it; OUTDIR/autocast_refs.json gets the
same numbers (merged into what is there).

    NCCL_NVLS_ENABLE=0 python3 scripts/make_autocast_refs.py [OUTDIR]
        [--models mlp,cnn,nanogpt,gpt2_nodrop,hf_t5,...|all-hf]
        [--precisions bf16,fp16] [--cpu-dry-run]

With no --models: the four original fixtures; with no --precisions: both.
--cpu-dry-run runs the same build / load / forward / backward on the CPU in
float32 without autocast and writes nothing: its loss should be the
fixture's loss_f32 (loss.json) and its error against float64 about 1e-6.

Needs torch (with CUDA unless --cpu-dry-run), safetensors, numpy and, for
the HF fixtures and gpt2_nodrop, transformers (the device machine has them).
Not run in CI. OUTDIR defaults to test/fixtures/ref."""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "test", "e2e"))

ROOT = os.path.normpath(os.path.join(HERE, "..", "test", "fixtures", "ref"))
# fixture name -> its directory under test/fixtures/ref
FIXTURES = {"mlp": "mlp", "cnn": "cnn", "nanogpt": "nanogpt",
            "gpt2_nodrop": "gpt2_nodrop"}
PRECISIONS = ("bf16", "fp16")
NEEDED = ("names.json", "params.safetensors", "batch.safetensors")


def die(msg):
    sys.exit(f"make_autocast_refs: {msg}")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", nargs="?", default=ROOT,
                    help="where <name>/grads_autocast_<p>.safetensors go "
                         "(default test/fixtures/ref)")
    ap.add_argument("--models", default=",".join(FIXTURES),
                    help="comma-separated fixture names (mlp, cnn, nanogpt, "
                         "gpt2_nodrop, hf_*), or all-hf for every HF fixture "
                         "with a float64 reference; default the four originals")
    ap.add_argument("--precisions", default=",".join(PRECISIONS),
                    help="comma-separated, of bf16, fp16 (default both)")
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="float32 on the CPU without autocast; writes nothing")
    a = ap.parse_args(argv)
    names = [m.strip() for m in a.models.split(",") if m.strip()]
    if names == ["all-hf"]:
        names = sorted(d for d in os.listdir(ROOT) if d.startswith("hf_")
                       and os.path.exists(os.path.join(ROOT, d, "grads_f64.safetensors")))
    for m in names:
        if m not in FIXTURES and not m.startswith("hf_"):
            die(f"unknown fixture {m!r}: the original four are {', '.join(FIXTURES)}; "
                f"HF fixtures are named hf_* (scripts/export_hf_models.py)")
    if not names:
        die("--models names no fixture")
    a.models = list(dict.fromkeys(names))
    a.precisions = [p.strip() for p in a.precisions.split(",") if p.strip()]
    for p in a.precisions:
        if p not in PRECISIONS:
            die(f"unknown precision {p!r} (bf16, fp16)")
    if not a.precisions:
        die("--precisions names none")
    a.outdir = os.path.abspath(a.outdir)
    return a


def check_fixture(name):
    """the fixture's directory, or a clear exit when it or a file is missing."""
    refdir = os.path.join(ROOT, FIXTURES.get(name, name))
    if not os.path.isdir(refdir):
        die(f"fixture directory {refdir} is missing (no committed reference "
            f"for {name!r}; HF fixtures are made by scripts/export_hf_models.py)")
    missing = [f for f in NEEDED if not os.path.exists(os.path.join(refdir, f))]
    if missing:
        die(f"fixture {refdir} lacks {', '.join(missing)}")
    if not os.path.exists(os.path.join(refdir, "grads_f64.safetensors")):
        print(f"make_autocast_refs: warning: {refdir} has no grads_f64.safetensors; "
              f"no error against float64 is printed for {name}", flush=True)
    names = json.load(open(os.path.join(refdir, "names.json")))
    for key in ("param_torch_to_onnx", "batch_keys"):
        if key not in names:
            die(f"{refdir}/names.json has no {key!r}")
    return refdir


def active_dropouts(model):
    """nn.Dropout modules and config dropout values that are not 0 (the
    reference ran in train mode with the same ones: with any, the gradients
    are random and no reference compares)."""
    import torch.nn as nn
    found = [f"{n}: p={m.p}" for n, m in model.named_modules()
             if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0]
    for n, m in model.named_modules():
        cfg = getattr(m, "config", None)
        if cfg is None or not hasattr(cfg, "to_dict"):
            continue
        for k, v in cfg.to_dict().items():
            if k.startswith("summary_"):
                continue  # GPT-2's double-heads summary layer, not built here
            if ("dropout" in k or "pdrop" in k) and isinstance(v, (int, float)) \
                    and not isinstance(v, bool) and v > 0:
                found.append(f"{n or 'model'}.config.{k}={v}")
        break  # the outermost config is enough
    return found


def load_model(name, spec, refdir, etm):
    """spec's module with the fixture's parameters and buffers, and the
    torch-name -> ONNX-name map."""
    import torch
    from safetensors.torch import load_file

    names = json.load(open(os.path.join(refdir, "names.json")))
    to_onnx = names["param_torch_to_onnx"]
    model = spec["make"]()
    # named_parameters() gives each tied parameter once, under its first
    # name: that is the name names.json maps (write_reference keys its
    # gradients the same way), and its gradient holds every use's.
    tied = [list(t) for t in etm._tied_names(model)]
    want = [list(t) for t in names.get("tied_parameters", tied)]
    if sorted(tied) != sorted(want):
        die(f"{name}: the model's tied parameters {tied} are not the fixture's "
            f"{want} (another transformers version?)")
    params = load_file(os.path.join(refdir, "params.safetensors"))
    used = set()
    with torch.no_grad():
        for tname, p in model.named_parameters():
            if tname not in to_onnx:
                die(f"{name}: torch parameter {tname} is not in names.json's "
                    f"param_torch_to_onnx")
            key = to_onnx[tname]
            if key not in params:
                die(f"{name}: {key} (torch {tname}) is not in params.safetensors")
            if tuple(params[key].shape) != tuple(p.shape):
                die(f"{name}: {key} has shape {tuple(params[key].shape)}, "
                    f"the model's {tname} {tuple(p.shape)}")
            p.copy_(params[key])
            used.add(key)
        unused = sorted(set(params) - used)
        if unused:
            print(f"make_autocast_refs: warning: {name}: params.safetensors holds "
                  f"tensors no parameter took: {unused}", flush=True)
        bpath = os.path.join(refdir, "buffers_before.safetensors")
        if os.path.exists(bpath):
            bufs = load_file(bpath)
            bmap = names.get("buffer_torch_to_onnx_per_exporter",
                             {}).get("opset17", {})
            for bname, b in model.named_buffers():
                key = bmap.get(bname) or bname
                if key in bufs:
                    b.copy_(bufs[key])
    return model, to_onnx, names


def write_atomically(path, write):
    """write(tmp) to a temporary file beside path, then renamed over it."""
    tmp = path + ".tmp"
    write(tmp)
    os.replace(tmp, path)


def step_gradients(model, args, dtype, to_onnx):
    """One forward and backward on the batch: in float32 (dtype None) or
    under torch.autocast(dtype); the loss and the gradients by ONNX name."""
    import torch
    model.zero_grad(set_to_none=True)
    if dtype is None:
        loss = model(*args)
        scale = 1.0
    else:
        with torch.autocast(args[0].device.type, dtype=dtype):
            loss = model(*args)
        # The fp16 reference: a static scale 2^10 keeps these small
        # gradients off fp16's subnormals; unscaled as GradScaler does.
        scale = 1024.0 if dtype == torch.float16 else 1.0
    (loss.float() * scale).backward()
    grads = {to_onnx[k]: (p.grad.float() / scale).detach().cpu().contiguous()
             for k, p in model.named_parameters() if p.grad is not None}
    return loss.item(), grads


def score(grads, g64, tag, compare_grads):
    """The gradients against float64 as compare_grads.py measures them: the
    text for the model's line and the fields for autocast_refs.json."""
    if set(grads) != set(g64):
        differ = sorted(set(grads) ^ set(g64))
        return f"; gradient names differ from grads_f64: {differ}", {"names_differ": differ}
    u = compare_grads.UNIT_ROUNDOFF["bf16" if tag == "f32" else tag]
    try:  # error() exits on inf / nan: say so and go on
        err, (worst, worst_name) = compare_grads.error(
            g64, {k: v.numpy() for k, v in grads.items()})
    except SystemExit as e:
        err, worst, worst_name = float("nan"), float("nan"), str(e)
    ulabel = "u of bf16" if tag == "f32" else "u"
    said = (f"; against float64 {err:.3e} = {err / u:.4g} {ulabel}; "
            f"worst tensor {worst_name} {worst:.3e}")
    return said, {"err_vs_f64": float(err), "units": float(err / u),
                  "worst_tensor": worst_name, "worst_rel": float(worst)}


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    refdirs = {m: check_fixture(m) for m in a.models}

    try:
        import torch
        from safetensors.torch import load_file, save_file
        from safetensors.numpy import load_file as load_np
    except ImportError as e:
        die(f"needs torch and safetensors ({e})")
    import compare_grads  # test/e2e: the error and the unit roundoffs
    import export_torch_models as etm

    if a.cpu_dry_run:
        device = "cpu"
    else:
        if not torch.cuda.is_available():
            die("no CUDA device (autocast references are made on the GPU; "
                "--cpu-dry-run checks the rest on the CPU)")
        device = "cuda"
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    specs = {}
    if any(m in FIXTURES for m in a.models):
        specs.update(etm.build_models())
    if any(m.startswith("hf_") for m in a.models):
        try:
            import export_hf_models as ehm
            specs.update(ehm.build_hf_models())
        except ImportError as e:
            die(f"HF fixtures need transformers ({e})")
    for m in a.models:
        if m not in specs:
            die(f"{m!r} is not a model that scripts/export_torch_models.py or "
                f"scripts/export_hf_models.py builds")

    dev_name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    versions = {"device": dev_name, "torch": torch.__version__}
    if "transformers" in sys.modules:
        versions["transformers"] = sys.modules["transformers"].__version__
    print(f"make_autocast_refs: {json.dumps(versions)}; models {a.models}; "
          + ("CPU dry run: float32, no autocast, writes nothing" if a.cpu_dry_run
             else f"precisions {a.precisions}"),
          flush=True)

    results, summary = {}, []
    for name in a.models:
        refdir = refdirs[name]
        model, to_onnx, names = load_model(name, specs[name], refdir, etm)
        drops = active_dropouts(model)
        if drops:
            print(f"make_autocast_refs: warning: {name} has active dropout "
                  f"(random gradients; the reference had the same): {drops}", flush=True)
        batch = load_file(os.path.join(refdir, "batch.safetensors"))
        args = tuple(batch[k].to(device) for k in names["batch_keys"])
        lpath = os.path.join(refdir, "loss.json")
        lref = json.load(open(lpath)) if os.path.exists(lpath) else {}
        gpath = os.path.join(refdir, "grads_f64.safetensors")
        g64 = load_np(gpath) if os.path.exists(gpath) else None
        model = model.to(device).train()
        results[name] = {}
        runs = [("f32", None)] if a.cpu_dry_run else \
            [(p, {"bf16": torch.bfloat16, "fp16": torch.float16}[p]) for p in a.precisions]
        for tag, dtype in runs:
            loss, grads = step_gradients(model, args, dtype, to_onnx)
            entry = {"loss": float(loss), "tensors": len(grads), **versions}
            if "loss_f64" in lref:
                entry["loss_f64"] = lref["loss_f64"]
            line = (f"{name} {tag}: loss {loss:.6f} (fixture f64 "
                    f"{lref.get('loss_f64', float('nan')):.6f}, f32 "
                    f"{lref.get('loss_f32', float('nan')):.6f}), {len(grads)} gradients")
            if g64 is not None:
                said, scored = score(grads, g64, tag, compare_grads)
                line += said
                entry.update(scored)
                if "units" in scored:
                    summary.append((name, tag, scored["units"]))
            print(line, flush=True)
            results[name][tag] = entry
            if not a.cpu_dry_run:
                out = os.path.join(a.outdir, FIXTURES.get(name, name))
                os.makedirs(out, exist_ok=True)
                path = os.path.join(out, f"grads_autocast_{tag}.safetensors")
                write_atomically(path, lambda tmp: save_file(grads, tmp))
        del model
    if summary:
        print("summary: error against float64 in units of u (the dry run's "
              "f32 in bf16's u), as test/e2e/compare_grads.py counts them"
              + ("" if a.cpu_dry_run else "; dsc's fixed HF bound is 8 u") + ":")
        for name, tag, units in summary:
            print(f"  {name:18s} {tag}: {units:8.4g} u")
    if a.cpu_dry_run:
        return
    rpath = os.path.join(a.outdir, "autocast_refs.json")
    report = json.load(open(rpath)) if os.path.exists(rpath) else {"models": {}}
    report.update(device=dev_name, torch=torch.__version__)
    for name, tags in results.items():
        report.setdefault("models", {}).setdefault(name, {}).update(tags)
    def dump(tmp):
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1)
    write_atomically(rpath, dump)


if __name__ == "__main__":
    main()
