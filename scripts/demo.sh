#!/usr/bin/env bash
# The demo `make demo` runs: import a PyTorch-exported GPT and summarize it.
# (Placeholder: the importer's owner will grow this into the full demo.)
set -euo pipefail
cd "$(dirname "$0")/.."
build/bin/dsc import --summary test/fixtures/models/nanogpt_opset17.onnx \
  --micro-batch 4
