#!/usr/bin/env bash
# Wall time of `dsc compile` of GPT-2 124M (bench/gpt2_124m.py export: the
# graph without its weights) for --target cuda, bf16, micro-batch 16: the
# default pipeline and the variants that undo one compile-time measure each.
# Median of 3 runs per row. Run here (the compiling machine), idle:
#   bench/compile_time.sh /tmp/gpt2_124m.onnx | tee bench/results/<date>-compile-time.txt
set -euo pipefail
onnx=${1:?usage: compile_time.sh GPT2_124M.onnx}
dsc=${DSC:-$(cd "$(dirname "$0")/.." && pwd)/build/bin/dsc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# dsc compile of $(basename "$onnx") for --target cuda --precision bf16 --micro-batch 16"
echo "# $(date -u +%F) on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
row() { # label flags...
  local label=$1; shift
  local times=()
  for i in 1 2 3; do
    local t0 t1
    t0=$(date +%s.%N)
    "$dsc" compile --target cuda --precision bf16 --micro-batch 16 "$@" "$onnx" -o "$tmp/p" >/dev/null
    t1=$(date +%s.%N)
    times+=("$(echo "$t1 - $t0" | bc)")
  done
  local med
  med=$(printf '%s\n' "${times[@]}" | sort -g | sed -n 2p)
  "$dsc" compile --target cuda --precision bf16 --micro-batch 16 "$@" --emit cpp "$onnx" -o "$tmp/p.cu" >/dev/null
  printf '%-52s %7.1f s   (%s)   source %s KiB, %s kernels\n' "$label" "$med" "${times[*]}" \
    "$(( $(stat -c %s "$tmp/p.cu") / 1024 ))" "$(grep -c __global__ "$tmp/p.cu")"
}
row "default (fused attention, host -O0)"
row "host code at -O2 (--host-opt 2)" --host-opt 2
row "attention as exported (--no-fuse-attention)" --no-fuse-attention
row "--no-fuse-attention --host-opt 2" --no-fuse-attention --host-opt 2
