#!/usr/bin/env bash
# Compiles the Llama-3.2-1B-shape programs that bench/device_run.sh's llama
# parts run, from an export of the shape (`bash bench/device_run.sh
# exports` on the GPU machine, or `python3 bench/llama_1b.py export OUT`
# where torch is), into gpu-bundle-extra/llama.tar.xz (one file: the
# programs share the runtime, so xz finds it once). Run here, from the repo
# root, after `make build`:
#
#   bash bench/build_llama_programs.sh /path/to/llama_1b.onnx
#
# Then carry gpu-bundle-extra/llama.tar.xz (and .whl for llama-ds-off):
#   PAIR=graph BREAKDOWN=0 bash bench/device_run.sh llama llama-off \
#     llama-off-ov llama-nvme offload-parts llama-ds-off
set -euo pipefail
cd "$(dirname "$0")/.."
L=${1:?usage: bench/build_llama_programs.sh LLAMA_1B.onnx}
X=gpu-bundle-extra
P=$X/progs
rm -rf "$P" && mkdir -p "$P"
c="build/bin/dsc compile --target cuda --micro-batch 4 --precision bf16"
$c "$L" -o $P/llama_1b_bf16 &
$c --offload-optimizer cpu "$L" -o $P/llama_1b_bf16_off &
wait
$c --offload-optimizer cpu --offload-overlap "$L" -o $P/llama_1b_bf16_ov &
$c --offload-optimizer nvme "$L" -o $P/llama_1b_bf16_nvme &
wait
# The same global batch as 4 micro-batches of 1 (dsc-accumulate-in-call).
$c --micro-batch 1 --accum-steps 4 "$L" -o $P/llama_1b_bf16_acc
# The offloaded step's parts (host AdamW, copies down and up, all at once).
nvcc -O2 -std=c++17 -arch=sm_90a -I runtime/include -I runtime \
  bench/offload_parts.cu build/runtime/libDscRuntime.a -o $P/offload_parts
strip $P/* 2>/dev/null || true
rm -f $X/llama.tar.xz
tar -cf - -C $P . | xz -T2 --lzma2=preset=6,dict=256MiB >$X/llama.tar.xz
rm -rf "$P"
du -sh $X/llama.tar.xz
