#!/usr/bin/env bash
# What `make demo` runs: compile the bundled nanoGPT-style model (exported by
# torch.onnx, test/fixtures/models) into a CPU training program sharded with
# ZeRO stage 3 over 4 in-process ranks, and train it for about a minute on the
# bundled text, character by character.
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
echo "== dsc compile: autodiff, AdamW, warm-up + cosine, clipping, ZeRO-3 x 4"
build/bin/dsc compile --target cpu --micro-batch 8 --stage 3 --world-size 4 \
  --lr 3e-3 \
  --schedule warmup_cosine --warmup-steps 100 --total-steps "$steps" \
  --clip 1.0 --no-decay 'bias|ln_' "$model" -o "$out/train_gpt"
ls -l "$out/train_gpt" | awk '{print $5 " bytes: " $9}'

echo
echo "== training for $steps steps on the CPU (4 ranks as threads)"
"$out/train_gpt" --data "$out/train.bin" --steps "$steps" --print-every 100 \
  --log "$out/log.jsonl" --dump-params "$out/trained.safetensors"

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
