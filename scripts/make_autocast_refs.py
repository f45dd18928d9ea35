#!/usr/bin/env python3
"""PyTorch autocast-bf16 (and autocast-fp16) gradients of the committed
fixtures, made on a GPU: the reference dsc's --precision bf16 / fp16
programs are held against (scripts/gpu-check.sh, docs/numerics.md).

For each of the MLP, CNN, nanoGPT and HF GPT-2 fixtures: the module that
scripts/export_torch_models.py builds, loaded with the fixture's own
parameters (test/fixtures/ref/<name>/params.safetensors, keyed by ONNX
names through names.json) and buffers, runs the fixture batch once in train
mode on the GPU under torch.autocast (fp32 weights, as autocast is meant to
be used), and its gradients are written to
test/fixtures/ref/<name>/grads_autocast_<bf16|fp16>.safetensors.

    NCCL_NVLS_ENABLE=0 python3 scripts/make_autocast_refs.py [OUTDIR]

Needs torch with CUDA, onnx, safetensors, transformers (the device machine
has them). Not run in CI. OUTDIR defaults to test/fixtures/ref."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

FIXTURES = {"mlp": "mlp", "cnn": "cnn", "nanogpt": "nanogpt",
            "gpt2_nodrop": "gpt2_nodrop"}


def main():
    import torch
    from safetensors.torch import load_file, save_file

    import export_torch_models as etm

    root = os.path.join(HERE, "..", "test", "fixtures", "ref")
    outroot = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else root
    if not torch.cuda.is_available():
        sys.exit("make_autocast_refs: no CUDA device (autocast references are "
                 "made on the GPU)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    specs = etm.build_models()
    report = {"device": torch.cuda.get_device_name(0),
              "torch": torch.__version__, "models": {}}
    for name, ref in FIXTURES.items():
        spec = specs[name]
        refdir = os.path.join(root, ref)
        names = json.load(open(os.path.join(refdir, "names.json")))
        to_onnx = names["param_torch_to_onnx"]
        model = spec["make"]()
        params = load_file(os.path.join(refdir, "params.safetensors"))
        with torch.no_grad():
            for tname, p in model.named_parameters():
                p.copy_(params[to_onnx[tname]])
            bpath = os.path.join(refdir, "buffers_before.safetensors")
            if os.path.exists(bpath):
                bufs = load_file(bpath)
                bmap = names.get("buffer_torch_to_onnx_per_exporter",
                                 {}).get("opset17", {})
                for bname, b in model.named_buffers():
                    key = bmap.get(bname) or bname
                    if key in bufs:
                        b.copy_(bufs[key])
        batch = load_file(os.path.join(refdir, "batch.safetensors"))
        keys = names["batch_keys"]
        args = tuple(batch[k].cuda() for k in keys)
        model = model.cuda().train()
        report["models"][name] = {}
        for tag, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
            model.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=dtype):
                loss = model(*args)
            # The fp16 reference: a static scale 2^10 keeps these small
            # gradients off fp16's subnormals; unscaled as GradScaler does.
            scale = 1024.0 if dtype == torch.float16 else 1.0
            (loss.float() * scale).backward()
            grads = {to_onnx[k]: (p.grad.float() / scale).detach().cpu()
                     .contiguous()
                     for k, p in model.named_parameters() if p.grad is not None}
            os.makedirs(os.path.join(outroot, ref), exist_ok=True)
            save_file(grads, os.path.join(outroot, ref,
                                          f"grads_autocast_{tag}.safetensors"))
            report["models"][name][tag] = {"loss": float(loss.item()),
                                           "tensors": len(grads)}
            print(f"{name} {tag}: loss {loss.item():.6f}, {len(grads)} gradients")
    json.dump(report, open(os.path.join(outroot, "autocast_refs.json"), "w"),
              indent=1)


if __name__ == "__main__":
    main()
