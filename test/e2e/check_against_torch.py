#!/usr/bin/env python3
"""Compares what a compiled dsc program dumped with the PyTorch references in
test/fixtures/ref/<model>/ (made by scripts/export_torch_models.py).

  check_against_torch.py --ref DIR --exporter opset17|opset18
      --grads G.safetensors [--params P.safetensors]
      [--grad-tol 1e-4] [--param-tol 1e-5] [--buffers]
  check_against_torch.py --ref DIR --write-init OUT.safetensors

--write-init writes the reference's starting point (its parameters, and the
buffers before the step where the reference has them) for the program's
--init: torch's exporter runs the model once, so the running statistics it
stores in the ONNX file are already one step ahead of the reference.
--buffers also compares the buffers after the step (batch-norm statistics).

Per parameter: relative error ||ours - ref|| / ||ref|| of the gradient
(against float64 torch) and, with --params, of the parameter after one AdamW
step. A parameter whose reference gradient is zero up to float64 rounding
(a conv bias followed by BatchNorm: mathematically zero) is compared with
absolute bounds instead: its float32 gradient must stay at rounding level
(1e-5 of the largest reference gradient element) and, since AdamW normalises
that noise, its step may differ from the reference by at most lr. Exits 1 on
any violation."""
import argparse
import json
import math
import os
import sys

import numpy as np
from safetensors.numpy import load_file


def pairs(v):
    return dict(v) if isinstance(v, list) else v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True)
    ap.add_argument("--exporter", choices=["opset17", "opset18"])
    ap.add_argument("--grads")
    ap.add_argument("--write-init")
    ap.add_argument("--buffers", action="store_true")
    ap.add_argument("--params")
    ap.add_argument("--grad-tol", type=float, default=1e-4)
    ap.add_argument("--param-tol", type=float, default=1e-5)
    a = ap.parse_args()
    if a.write_init:
        from safetensors.numpy import save_file
        init = dict(load_file(os.path.join(a.ref, "params.safetensors")))
        before = os.path.join(a.ref, "buffers_before.safetensors")
        if os.path.exists(before):
            init.update(load_file(before))
        save_file(init, a.write_init)
        return
    if not a.exporter or not a.grads:
        ap.error("--exporter and --grads are required")

    names = json.load(open(os.path.join(a.ref, "names.json")))
    per = pairs(names["param_torch_to_onnx_per_exporter"])
    keyed = pairs(per[names["keyed_by"]])  # torch -> ref key
    ours_of = pairs(per[a.exporter])  # torch -> our onnx name
    ref_g = load_file(os.path.join(a.ref, "grads_f64.safetensors"))
    ref_p = load_file(os.path.join(a.ref, "adamw_step1_f64.safetensors"))
    hyper = json.load(open(os.path.join(a.ref, "adamw.json")))
    g = load_file(a.grads)
    p = load_file(a.params) if a.params else None

    scale = max(np.abs(v).max() for v in ref_g.values())
    failures = 0
    worst_g = worst_p = 0.0
    print(f"{'parameter':48} {'grad rel':>10} {'step rel':>10}")
    for torch_name, ref_key in keyed.items():
        name = ours_of[torch_name]
        rg = ref_g[ref_key].astype(np.float64)
        if name not in g:
            print(f"{name:48} missing from {a.grads}")
            failures += 1
            continue
        og = g[name].astype(np.float64)
        if og.shape != rg.shape:
            print(f"{name:48} shape {og.shape} vs reference {rg.shape}")
            failures += 1
            continue
        ref_norm = np.linalg.norm(rg)
        zero_ref = ref_norm <= 1e-12 * scale
        if zero_ref:
            err_g = np.abs(og).max()
            ok_g = err_g <= 1e-5 * scale
            gtxt = f"abs {err_g:.1e}"
        else:
            err_g = np.linalg.norm(og - rg) / ref_norm
            ok_g = err_g <= a.grad_tol
            worst_g = max(worst_g, err_g)
            gtxt = f"{err_g:.2e}"
        ptxt = ""
        ok_p = True
        if p is not None:
            rp = ref_p[ref_key].astype(np.float64)
            op = p[name].astype(np.float64)
            if zero_ref:
                err_p = np.abs(op - rp).max()
                ok_p = err_p <= hyper["lr"] * (1 + 1e-6)
                ptxt = f"abs {err_p:.1e}"
            else:
                err_p = np.linalg.norm(op - rp) / np.linalg.norm(rp)
                ok_p = err_p <= a.param_tol
                worst_p = max(worst_p, err_p)
                ptxt = f"{err_p:.2e}"
        flag = "" if ok_g and ok_p else "  <-- FAIL"
        failures += (not ok_g) + (not ok_p)
        print(f"{name:48} {gtxt:>10} {ptxt:>10}{flag}")
    if a.buffers:
        ref_b = load_file(os.path.join(a.ref, "buffers_after_f64.safetensors"))
        for key, rb in ref_b.items():
            if not key.endswith(("running_mean", "running_var")):
                continue
            ob = p[key].astype(np.float64)
            err = np.linalg.norm(ob - rb) / np.linalg.norm(rb)
            ok = err <= a.param_tol
            failures += not ok
            print(f"{key:48} {'':>10} {err:10.2e}{'' if ok else '  <-- FAIL'}")
    print(f"worst gradient rel error {worst_g:.2e} (bound {a.grad_tol:g}); "
          f"worst parameter rel error {worst_p:.2e} (bound {a.param_tol:g})")
    if failures:
        print(f"FAILED: {failures} check(s)")
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
