#!/usr/bin/env bash
# What `make demo` runs: compile the bundled nanoGPT-style model (exported by
# torch.onnx, test/fixtures/models) with a DeepSpeed config
# (examples/tinytext/ds_config.json) into a CPU training program sharded with
# ZeRO stage 3 over 4 in-process ranks, and train it for about a minute on the
# bundled text, character by character: half the steps with checkpoints,
# then resumed from the latest; the checkpoint listed, verified and
# consolidated (safetensors, and the trained ONNX model, whose loss
# onnxruntime computes); metrics in TensorBoard, CSV and MLflow files.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/demo
mkdir -p "$out"
model=test/fixtures/models/nanogpt_opset17.onnx
steps=${DEMO_STEPS:-1500}

echo "== the model, as dsc imports it"
build/bin/dsc import --summary --micro-batch 32 "$model" | sed -n '1,5p'

echo
echo "== the data: examples/tinytext/input.txt as character ids"
python3 examples/tinytext/prepare.py examples/tinytext/input.txt "$out/train.bin"

echo
echo "== memory per rank of each ZeRO stage, before any run"
build/bin/dsc estimate --micro-batch 8 --world-size 4 "$model"

echo
echo "== dsc compile --config: a DeepSpeed config (ZeRO-3, AdamW, warm-up +"
echo "   cosine, clipping, TensorBoard and CSV monitors) for 4 ranks"
build/bin/dsc compile --target cpu --config examples/tinytext/ds_config.json \
  --world-size 4 --no-decay 'bias|ln_' "$model" -o "$out/train_gpt"
ls -l "$out/train_gpt" | awk '{print $5 " bytes: " $9}'
"$out/train_gpt" --version | sed -n '2,12p'

half=$((steps / 2))
rm -rf "$out/ckpt" "$out/runs" "$out/log.jsonl" "$out/log2.jsonl"
echo
echo "== training steps 1-$half on the CPU (4 ranks as threads), a checkpoint"
echo "   every 250 steps (SIGTERM or Ctrl-C would save and stop as well)"
"$out/train_gpt" --data "$out/train.bin" --steps "$half" \
  --save-dir "$out/ckpt" --save-every 250 --keep-last 2 \
  --mlflow "$out/runs/mlruns" --log "$out/log.jsonl"

echo
echo "== resumed from the latest checkpoint to step $steps"
"$out/train_gpt" --data "$out/train.bin" --steps "$steps" --resume "$out/ckpt" \
  --save-dir "$out/ckpt" --save-every 250 --keep-last 2 \
  --log "$out/log2.jsonl"
cat "$out/log2.jsonl" >> "$out/log.jsonl"

echo
echo "== the checkpoint: list, verify, consolidate"
build/bin/dsc checkpoint list "$out/ckpt"
build/bin/dsc checkpoint verify "$out/ckpt"
build/bin/dsc checkpoint consolidate "$out/ckpt" --to "$out/trained.safetensors"
build/bin/dsc checkpoint consolidate "$out/ckpt" --to-onnx "$out/trained.onnx"
python3 test/e2e/ort_loss.py "$out/trained.onnx" --tokens "$out/train.bin" \
  --rows 16 | sed 's/^/onnxruntime, the trained ONNX model on 16 windows of the text: /'

echo
echo "== metrics: TensorBoard $out/runs/tinytext, CSV $out/runs/tinytext/*.csv,"
echo "   MLflow $out/runs/mlruns (MLFLOW_ALLOW_FILE_STORE=true mlflow ui"
echo "   --backend-store-uri $out/runs/mlruns)"
ls "$out/runs/tinytext" | head -5

python3 - "$out/log.jsonl" <<'PY'
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1])]
head = sum(losses[:10]) / 10
tail = sum(losses[-50:]) / 50
print(f"\nloss: {head:.3f} over the first 10 steps -> {tail:.3f} over the "
      f"last 50 (uniform guess over 65 characters: 4.174)")
if not tail < head - 1.0:
    sys.exit("error: the loss did not fall; something is wrong")
PY
