#!/usr/bin/env bash
# One device call: checks and timings of the programs compiled here, side by
# side with PyTorch on the same card. Nothing is built on the GPU machine.
#
#   here:   GPT2_124M=/tmp/gpt2_124m.onnx LLAMA_1B=/tmp/llama_1b.onnx \
#             scripts/gpu-check.sh build          # gpu-bundle.tar.xz
#           (bench/gpt2_124m.py export --vocab 50304 /tmp/gpt2_124m.onnx
#           for the peers' nanoGPT config; bench/llama_1b.py export)
#   there:  bash bench/device_run.sh PART...       # from the repo root
#
# PARTs, in the order given (each bounded by `timeout`, so a call that runs
# out of time still returns what the others measured):
#   checks       scripts/gpu-check.sh run (every kernel against the CPU, the
#                fixtures' gradients against PyTorch, ZeRO stages, NCCL)
#   exports      the training graphs of GPT-2 124M (vocab 50304) and the
#                Llama shape, weights left out, written to $OUT/exports/
#                (the GPU machine has torch; dsc compiles them here)
#   kernels      dsc-cuda-tests alone (every CUDA kernel and the graph
#                tests against the CPU), when checks is too long for a call;
#                KERNELS_FILTER=PATTERN runs only the gtests it matches
#   gpt2         GPT-2 124M bf16, 16 x 1024: dsc with its CUDA graph and
#                with --no-cuda-graph, 20 steps each; a per-kernel breakdown
#                of one step (bench/kernel_breakdown.py)
#   gpt2-base    the GPT-2 program of the commit before a change
#                (gpu-bundle-extra/gpt2_124m_bf16_base), after gpt2: its
#                ms/step and the changed program's losses against it
#   llama-base   likewise for the Llama shape (llama_1b_bf16_base), after
#                llama
#   gpt2-bgrad   the GPT-2 program with its bias gradients summed in
#                cuBLASLt's BGRAD epilogue (DSC_BIAS_GRAD_EPILOGUE=1) rather
#                than by the runtime's column sums, after gpt2
#   precision-checks
#                gpu-check.sh's mixed-precision gradient checks for the
#                fixture programs carried in gpu-bundle-extra/
#   autocast     PyTorch autocast-bf16 gradients of the HF fixtures in
#                AUTOCAST_MODELS (default hf_t5), before precision-checks,
#                which then holds those families to twice autocast's error
#   gpt2-peers   torch.compile and eager on nanoGPT's module
#                (bench/peers_bf16.py), the bf16 matmul ceiling
#   llama        the Llama-3.2-1B shape bf16, 4 x 2048: dsc with and
#                without its CUDA graph, 12 steps each, and the breakdown
#   llama-peers  PyTorch eager and torch.compile on the same module
#                (bench/llama_1b.py torch)
#   gpt2-rsel, gpt2-rfull, gpt2-rew
#                the same GPT-2 program compiled with --recompute selective,
#                full or elementwise (gpu-bundle-extra/gpt2_124m_bf16_rsel,
#                _rfull, _rew):
#                ms/step, peak, and its losses against the gpt2 part's
#                (bitwise expected)
#   llama-rsel, llama-rfull, llama-rew, llama-rauto
#                likewise for the Llama shape (llama_1b_bf16_rsel, _rfull,
#                _rew; _rauto: --recompute auto --memory-budget 24GiB)
#   gpt2-c256, llama-c256
#                the programs compiled with --classifier-chunk 256MiB (the
#                default before 1 GiB; gpt2_124m_bf16_c256, llama_1b_bf16_c256):
#                ms/step and losses against the default program's
#   gpt2-nd, llama-nd
#                the programs compiled with --nondeterministic-attention
#                (gpt2_124m_bf16_nd, llama_1b_bf16_nd; cuDNN's dQ by
#                atomics, as PyTorch's default): ms/step, and their losses
#                against the deterministic program's (close, not bitwise)
#   offload-checks
#                scripts/gpu-check.sh's offload checks alone (host AdamW
#                against the GPU's; graph and resume bitwise)
#   offload-parts
#                host AdamW, PCIe down and up, and all at once, over 512M
#                elements (bench/offload_parts.cu, built here with nvcc)
#   gpt2-off, llama-off
#                --offload-optimizer cpu (gpt2_124m_bf16_off, llama_1b_bf16_off):
#                with and without the graph (bitwise), and the losses against
#                the GPU AdamW's run of the same part (close, not bitwise:
#                the host's AdamW may round differently)
#   llama-off-r  a partial offload, --offload-ratio auto --memory-budget 22GiB
#                (llama_1b_bf16_off_r: 0.75 of the elements on the host);
#                losses against the llama part's
#   llama-off-ov, llama-off-ovr
#                --offload-overlap, the whole optimizer on the host
#                (llama_1b_bf16_ov) or --offload-ratio 0.75, what auto
#                picks for --memory-budget 22GiB (llama_1b_bf16_ovr; 21.53
#                GiB planned): losses bitwise against
#                llama-off's (ov) and close to llama's
#   llama-off-ovr_rsel, llama-off-ovr_rfull
#                --offload-overlap --offload-ratio auto --memory-budget 22GiB
#                with --recompute selective or full (llama_1b_bf16_ovr_rsel,
#                _ovr_rfull): recomputation's freed memory keeps more of the
#                optimizer on the GPU
#   llama-off-rsel
#                offload with --recompute selective (llama_1b_bf16_off_rsel)
#   llama-acc    the same global batch as 4 micro-batches of 1 x 2048
#                (--micro-batch 1 --accum-steps 4, llama_1b_bf16_acc): ms/step,
#                peak against its plan, losses close to the llama part's
#   llama-nvme   --offload-optimizer nvme (llama_1b_bf16_nvme), files under
#                /tmp/dsc-nvme: STEPSNVME steps (default 4), losses against
#                llama-off's
#   llama7b-off, llama7b-ovr, llama7b
#                the Llama-2-7B shape (bench/llama_1b.py export --shape 7b),
#                1 x 2048 tokens: with the optimizer offloaded
#                (gpu-bundle-extra/llama_7b_bf16_off), offloaded with
#                --offload-overlap and --offload-ratio auto (llama_7b_bf16_ovr)
#                and without offload (llama_7b_bf16): ms/step, tokens/s, GPU
#                and host peaks
#   llama-ds-off DeepSpeed ZeRO-2 with offload_optimizer: cpu on the Llama
#                shape (bench/llama_1b.py deepspeed-offload; .whl carried)
#   deepspeed    DeepSpeed ZeRO-2 on nanoGPT's module (bench/peers_bf16.py,
#                .whl carried: bench/install_deepspeed.sh)
# PAIR=graph runs dsc's programs with the graph only (no --no-cuda-graph
# twin: a short call). BREAKDOWN=0 leaves the per-kernel breakdowns out; VARIANT_BREAKDOWN=1
# adds one for each llama-r* variant. Programs in
# gpu-bundle-extra/ (carried, ignored by git) replace the bundle's of the
# same name. Everything lands in $OUT/results.tgz (the device tool returns few files).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
O=${OUT:-out/device-run}
W=/tmp/device-run
rm -rf "$W" && mkdir -p "$W"
B=gpu-bundle/bin
# The bundle is optional when gpu-bundle-extra/ carries what the parts run
# (the working tree and the carried files travel within 64 MiB).
[ -x "$B/dsc-cuda-tests" ] || [ ! -f gpu-bundle.tar.xz ] || tar -xJf gpu-bundle.tar.xz
mkdir -p "$B"
for f in gpu-bundle-extra/*.xz; do
  case $f in
  *.tar.xz) tar -xJf "$f" -C "$B" ;; # several programs (they share the runtime: xz finds it once)
  *) [ -f "$f" ] && xz -dc "$f" >"$B/$(basename "$f" .xz)" && chmod +x "$B/$(basename "$f" .xz)" ;;
  esac
done
LD=$(python3 -c "import glob,site;print(':'.join(glob.glob(site.getsitepackages()[0]+'/nvidia/*/lib')))")
export LD_LIBRARY_PATH=$LD:${LD_LIBRARY_PATH:-}
nvidia-smi -L >"$W/gpu.txt" 2>&1
date -u +%FT%TZ >>"$W/gpu.txt"
# Clocks, power and throttle reasons every 200 ms through the whole call
# (smi.csv; bench/smi_summary.py reads it per part): a step that is slower
# than its kernels' sum may be a card held below its boost clock.
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 200 >"$W/smi.csv" 2>/dev/null &
SMI=$!

tokens() { # FILE VOCAB DTYPE
  python3 -c "import numpy as np;np.random.default_rng(0).integers(0,$2,size=4_000_000,dtype=np.$3).tofile('$1')"
}
dsc_pair() { # NAME PROGRAM STEPS ARGS...: with and without the CUDA graph
  local name=$1 prog=$2 steps=$3
  shift 3
  for g in ${PAIR:-graph nograph}; do
    local flag=--cuda-graph
    [ $g = nograph ] && flag=--no-cuda-graph
    timeout 200 "$prog" "$@" --steps "$steps" --print-every 4 $flag \
      --log "$W/${name}_$g.jsonl" >"$W/${name}_$g.txt" 2>&1
    echo "rc=$?" >>"$W/${name}_$g.txt"
    tail -4 "$W/${name}_$g.txt"
  done
  python3 - "$W/${name}_graph.jsonl" "$W/${name}_nograph.jsonl" <<'PY'
import json, os, statistics, sys
runs = [[json.loads(l) for l in open(p)] for p in sys.argv[1:] if os.path.exists(p)]
for p, r in zip(sys.argv[1:], runs):
    t = [s["step_time_s"] for s in r[3:]]
    print(p, "median ms/step over steps 4..%d:" % len(r), round(statistics.median(t) * 1e3, 2) if t else None)
if len(runs) == 2:
    same = [a["loss"] == b["loss"] for a, b in zip(*runs)]
    print("losses bitwise equal with and without the graph:", all(same) and len(same) > 0, len(same), "steps")
PY
}

dsc_variant() { # NAME PROGRAM STEPS BASE ARGS...: one run with the graph, losses against BASE's
  local name=$1 prog=$2 steps=$3 base=$4
  shift 4
  [ -x "$prog" ] || { echo "device_run: no $prog (gpu-bundle-extra)"; return; }
  timeout 200 "$prog" "$@" --steps "$steps" --print-every 4 \
    --log "$W/${name}.jsonl" >"$W/${name}.txt" 2>&1
  echo "rc=$?" >>"$W/${name}.txt"
  tail -3 "$W/${name}.txt"
  python3 - "$W/${name}.jsonl" "$W/${base}_graph.jsonl" <<'PY'
import json, os, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1])]
t = [s["step_time_s"] for s in r[3:]]
print(sys.argv[1], "median ms/step:", round(statistics.median(t) * 1e3, 2) if t else None)
if os.path.exists(sys.argv[2]):
    b = [json.loads(l) for l in open(sys.argv[2])]
    same = [x["loss"] == y["loss"] for x, y in zip(r, b)]
    print("losses bitwise equal to", sys.argv[2], ":", all(same) and len(same) > 0, len(same), "steps")
PY
}

for part in "$@"; do
  echo "== $part ($(date -u +%T))"
  echo "$(date -u +%Y/%m/%d\ %T) $part" >>"$W/parts.txt"
  case $part in
  checks)
    OUT=$W/gc timeout ${CHECKS_TIMEOUT:-420} bash scripts/gpu-check.sh run >"$W/checks.txt" 2>&1
    echo "rc=$?" >>"$W/checks.txt"
    grep -E "FAIL|all passed|FAILED|rc=" "$W/checks.txt" | tail -20
    cp "$W/gc/summary.txt" "$W/checks_summary.txt" 2>/dev/null ;;
  exports)
    mkdir -p "$O/exports"
    timeout 240 python3 bench/gpt2_124m.py export --vocab 50304 "$O/exports/gpt2_124m.onnx" >"$W/exports.txt" 2>&1
    timeout 240 python3 bench/llama_1b.py export "$O/exports/llama_1b.onnx" >>"$W/exports.txt" 2>&1
    echo "rc=$?" >>"$W/exports.txt"
    tail -4 "$W/exports.txt"; ls -la "$O/exports" ;;
  kernels)
    timeout 200 "$B/dsc-cuda-tests" ${KERNELS_FILTER:+--gtest_filter="$KERNELS_FILTER"} >"$W/kernels.txt" 2>&1
    echo "rc=$?" >>"$W/kernels.txt"
    grep -E "^\[  (PASSED|FAILED) |rc=" "$W/kernels.txt" | tail -12 ;;
  gpt2)
    tokens "$W/tok.bin" 50257 uint16
    dsc_pair gpt2 "$B/gpt2_124m_bf16" 20 --init random --data "$W/tok.bin" | tee "$W/gpt2_summary.txt"
    [ "${BREAKDOWN:-1}" = 0 ] && continue
    timeout 120 python3 bench/kernel_breakdown.py --top ${TOP:-15} --out "$W/gpt2_kernels.json" -- \
      "$B/gpt2_124m_bf16" --init random --data "$W/tok.bin" --steps 1 --quiet >"$W/gpt2_kernels.txt" 2>&1
    head -$((15 + ${TOP:-15})) "$W/gpt2_kernels.txt" ;;
  gpt2-base)
    # The GPT-2 program of the commit before a change (gpu-bundle-extra/
    # gpt2_124m_bf16_base), in the same call: its ms/step and how close the
    # changed program's losses are to it.
    dsc_variant gpt2_base "$B/gpt2_124m_bf16_base" 20 gpt2 --init random --data "$W/tok.bin"
    python3 bench/close_losses.py "$W/gpt2_graph.jsonl" "$W/gpt2_base.jsonl" ;;
  gpt2-bgrad)
    # GPT-2 with its bias gradients summed by cuBLASLt's BGRAD epilogue
    # (DSC_BIAS_GRAD_EPILOGUE=1) instead of the runtime's column-sum
    # kernels (the default since call C): the kernels checked against the
    # CPU that way, then ms/step, losses against the gpt2 part's and a
    # breakdown. After gpt2.
    DSC_BIAS_GRAD_EPILOGUE=1 timeout 100 "$B/dsc-cuda-tests" --gtest_filter='CudaMatmul.BiasGrad*' \
      >"$W/bgrad_tests.txt" 2>&1
    echo "rc=$?" >>"$W/bgrad_tests.txt"
    grep -E "^\[  (PASSED|FAILED) |rc=" "$W/bgrad_tests.txt"
    DSC_BIAS_GRAD_EPILOGUE=1 dsc_variant gpt2_bgrad "$B/gpt2_124m_bf16" 20 gpt2 --init random --data "$W/tok.bin"
    python3 bench/close_losses.py "$W/gpt2_graph.jsonl" "$W/gpt2_bgrad.jsonl"
    [ "${BREAKDOWN:-1}" = 0 ] && continue
    DSC_BIAS_GRAD_EPILOGUE=1 timeout 120 python3 bench/kernel_breakdown.py --top 12 \
      --out "$W/gpt2_bgrad_kernels.json" -- "$B/gpt2_124m_bf16" --init random \
      --data "$W/tok.bin" --steps 1 --quiet >"$W/gpt2_bgrad_kernels.txt" 2>&1
    head -27 "$W/gpt2_bgrad_kernels.txt" ;;
  llama-base)
    # As gpt2-base, for the Llama shape (llama_1b_bf16_base), after llama.
    dsc_variant llama_base "$B/llama_1b_bf16_base" 12 llama --init random --data "$W/tokl.bin" --data-dtype int32
    python3 bench/close_losses.py "$W/llama_graph.jsonl" "$W/llama_base.jsonl" ;;
  precision-checks)
    # scripts/gpu-check.sh's mixed-precision gradient checks for programs
    # carried in gpu-bundle-extra/ (nanogpt_bf16, gpt2_fp16, hf_bert_cls_bf16,
    # ...): against the float64 references, nanoGPT and HF GPT-2 also
    # against PyTorch autocast's error; one line per check.
    ref=test/fixtures/ref
    for prog in "$B"/nanogpt_bf16 "$B"/nanogpt_fp16 "$B"/gpt2_bf16 "$B"/gpt2_fp16 "$B"/hf_*_bf16; do
      [ -x "$prog" ] || continue
      name=$(basename "$prog") m=${name%_*} p=${name##*_} r=$m extra="--units 8"
      [ $m = gpt2 ] && r=gpt2_nodrop
      r=${r%_nofnr} # a twin compiled with --no-fuse-norm-residual
      case $m in nanogpt | gpt2) extra="--units 4 --factor 2 --peer $ref/$r/grads_autocast_$p.safetensors" ;; esac
      # An HF family with autocast's gradients committed (hf_t5): 8 u, or
      # at most twice autocast's own error.
      [ "$extra" = "--units 8" ] && [ -f $ref/$r/grads_autocast_$p.safetensors ] &&
        extra="--units 8 --factor 2 --peer $ref/$r/grads_autocast_$p.safetensors"
      onnx=test/fixtures/models/${r}_opset17.onnx
      if timeout 60 "$prog" --batch $ref/$r/batch.safetensors --init "$onnx" --steps 1 --quiet \
        --dump-grads "$W/g_$name.safetensors" >"$W/pc_$name.txt" 2>&1 &&
        python3 test/e2e/compare_grads.py $ref/$r/grads_f64.safetensors "$W/g_$name.safetensors" \
          --precision $p $extra >>"$W/pc_$name.txt" 2>&1; then
        echo "PASS $name"
      else
        echo "FAIL $name"; tail -5 "$W/pc_$name.txt"
      fi
    done 2>&1 | tee "$W/precision_checks.txt" ;;
  autocast)
    # PyTorch autocast-bf16 gradients of the HF fixtures named in
    # AUTOCAST_MODELS (scripts/make_autocast_refs.py), written where
    # precision-checks looks for them and copied to $O/autocast/ (to commit).
    am=${AUTOCAST_MODELS:-hf_t5}
    timeout 240 python3 scripts/make_autocast_refs.py test/fixtures/ref \
      --models "$am" --precisions bf16 >"$W/autocast.txt" 2>&1
    echo "rc=$?" >>"$W/autocast.txt"
    tail -12 "$W/autocast.txt"
    mkdir -p "$O/autocast"
    for m in ${am//,/ }; do
      [ -f test/fixtures/ref/$m/grads_autocast_bf16.safetensors ] &&
        cp test/fixtures/ref/$m/grads_autocast_bf16.safetensors "$O/autocast/$m.safetensors"
    done
    cp test/fixtures/ref/autocast_refs.json "$O/autocast/" 2>/dev/null ;;
  gpt2-peers)
    timeout 200 python3 bench/peers_bf16.py --only eager,compile --configs nanogpt \
      --out "$W/gpt2_peers.json" >/dev/null 2>"$W/gpt2_peers.err"
    tail -8 "$W/gpt2_peers.err" ;;
  llama)
    tokens "$W/tokl.bin" 128256 int32
    dsc_pair llama "$B/llama_1b_bf16" 12 --init random --data "$W/tokl.bin" --data-dtype int32 | tee "$W/llama_summary.txt"
    [ "${BREAKDOWN:-1}" = 0 ] && continue
    timeout 150 python3 bench/kernel_breakdown.py --top ${TOP:-15} --out "$W/llama_kernels.json" -- \
      "$B/llama_1b_bf16" --init random --data "$W/tokl.bin" --data-dtype int32 --steps 1 --quiet \
      >"$W/llama_kernels.txt" 2>&1
    head -$((15 + ${TOP:-15})) "$W/llama_kernels.txt" ;;
  gpt2-rsel | gpt2-rfull | gpt2-rew | gpt2-nd | gpt2-c256)
    [ -f "$W/tok.bin" ] || tokens "$W/tok.bin" 50257 uint16
    v=${part#gpt2-}
    dsc_variant gpt2_$v "$B/gpt2_124m_bf16_$v" 20 gpt2 --init random --data "$W/tok.bin" ;;
  llama-rsel | llama-rfull | llama-rew | llama-nd | llama-c256 | llama-rauto)
    [ -f "$W/tokl.bin" ] || tokens "$W/tokl.bin" 128256 int32
    v=${part#llama-}
    dsc_variant llama_$v "$B/llama_1b_bf16_$v" 12 llama --init random --data "$W/tokl.bin" --data-dtype int32
    [ "${BREAKDOWN:-1}" = 0 ] || [ "${VARIANT_BREAKDOWN:-0}" = 0 ] && continue
    timeout 150 python3 bench/kernel_breakdown.py --top ${TOP:-15} --out "$W/llama_${v}_kernels.json" -- \
      "$B/llama_1b_bf16_$v" --init random --data "$W/tokl.bin" --data-dtype int32 --steps 1 --quiet \
      >"$W/llama_${v}_kernels.txt" 2>&1
    head -14 "$W/llama_${v}_kernels.txt" ;;
  offload-checks)
    # gpu-check.sh's offload checks, on their own (fewer programs carried).
    fx=test/fixtures/models ref=test/fixtures/ref
    bi="--init $fx/mlp_opset17.onnx --batch $ref/mlp/batch.safetensors --steps 5 --quiet"
    python3 examples/tinytext/prepare.py examples/tinytext/input.txt "$W/train.bin" >/dev/null
    cd_="--data $W/train.bin --quiet" t=$W/oc
    mkdir -p "$t"
    ( set -e
      "$B/mlp_bf16_acc4" $bi --log $t/b1.jsonl --dump-params $t/b1.safetensors
      "$B/mlp_bf16_acc4_off" $bi --log $t/bo.jsonl --dump-params $t/bo.safetensors
      echo -n "offload_adamw_host_vs_gpu_mlp_bf16: "
      python3 test/e2e/compare_runs.py $t/b1.jsonl $t/b1.safetensors $t/bo.jsonl $t/bo.safetensors --tol 1e-5
      "$B/gpt2nodrop_bf16_off" $cd_ --seed 3 --steps 6 --cuda-graph --log $t/of.jsonl --dump-params $t/of.safetensors
      "$B/gpt2nodrop_bf16_off" $cd_ --seed 3 --steps 6 --no-cuda-graph --log $t/on.jsonl --dump-params $t/on.safetensors
      echo -n "offload_graph_gpt2_bf16: "
      python3 test/e2e/compare_runs.py $t/of.jsonl $t/of.safetensors $t/on.jsonl $t/on.safetensors --tol 0
      "$B/gpt2nodrop_bf16_off" $cd_ --seed 3 --steps 3 --log $t/oa.jsonl --save-dir $t/ck3
      "$B/gpt2nodrop_bf16_off" $cd_ --steps 6 --log $t/ob.jsonl --resume $t/ck3 --dump-params $t/or.safetensors
      cat $t/oa.jsonl $t/ob.jsonl > $t/oab.jsonl
      echo -n "offload_resume_gpt2_bf16: "
      python3 test/e2e/compare_runs.py $t/of.jsonl $t/of.safetensors $t/oab.jsonl $t/or.safetensors --tol 0
      "$B/gpt2nodrop_bf16" $cd_ --seed 3 --steps 6 --log $t/og.jsonl --dump-params $t/og.safetensors
      echo -n "offload_chunks_vs_gpu_gpt2_bf16: "
      python3 test/e2e/compare_runs.py $t/og.jsonl $t/og.safetensors $t/on.jsonl $t/on.safetensors --tol 1e-5
    ) >"$W/offload_checks.txt" 2>&1
    echo "rc=$?" >>"$W/offload_checks.txt"
    grep -E "^offload_|rc=|rror" "$W/offload_checks.txt" | tail -12 ;;
  offload-parts)
    # The parts of an offloaded step on this machine (bench/offload_parts.cu):
    # host AdamW, copies down and up, and all three at once.
    timeout 120 "$B/offload_parts" 536870912 >"$W/offload_parts.txt" 2>&1
    echo "rc=$?" >>"$W/offload_parts.txt"
    cat "$W/offload_parts.txt" ;;
  gpt2-off)
    [ -f "$W/tok.bin" ] || tokens "$W/tok.bin" 50257 uint16
    dsc_pair gpt2_off "$B/gpt2_124m_bf16_off" 20 --init random --data "$W/tok.bin" | tee "$W/gpt2_off_summary.txt"
    python3 bench/close_losses.py "$W/gpt2_off_graph.jsonl" "$W/gpt2_graph.jsonl" ;;
  llama-off)
    [ -f "$W/tokl.bin" ] || tokens "$W/tokl.bin" 128256 int32
    dsc_pair llama_off "$B/llama_1b_bf16_off" 12 --init random --data "$W/tokl.bin" --data-dtype int32 | tee "$W/llama_off_summary.txt"
    python3 bench/close_losses.py "$W/llama_off_graph.jsonl" "$W/llama_graph.jsonl"
    # Where the offloaded step's time goes (phases timed with a synchronize
    # at each: no graph).
    timeout 120 "$B/llama_1b_bf16_off" --init random --data "$W/tokl.bin" --data-dtype int32 \
      --steps 5 --print-every 5 --wall-clock-breakdown >"$W/llama_off_phases.txt" 2>&1
    grep -iE "forward|backward|optimizer|phase" "$W/llama_off_phases.txt" | tail -6 ;;
  llama-off-r)
    [ -f "$W/tokl.bin" ] || tokens "$W/tokl.bin" 128256 int32
    dsc_variant llama_off_r "$B/llama_1b_bf16_off_r" 12 llama_off --init random --data "$W/tokl.bin" --data-dtype int32
    python3 bench/close_losses.py "$W/llama_off_r.jsonl" "$W/llama_graph.jsonl" ;;
  llama-off-ov | llama-off-ovr | llama-off-ovr_rsel | llama-off-ovr_rfull)
    # --offload-overlap (the host AdamW during backward): the same bits as
    # llama-off's run (run that part first), and the GPU AdamW's losses.
    # ovr_rsel, ovr_rfull: --offload-ratio auto at 22GiB with --recompute
    # selective or full (the memory recomputation frees keeps more of the
    # optimizer on the GPU).
    [ -f "$W/tokl.bin" ] || tokens "$W/tokl.bin" 128256 int32
    v=${part#llama-off-}
    dsc_variant llama_off_$v "$B/llama_1b_bf16_$v" 12 llama_off --init random --data "$W/tokl.bin" --data-dtype int32
    python3 bench/close_losses.py "$W/llama_off_$v.jsonl" "$W/llama_graph.jsonl" ;;
  llama-nvme)
    # The optimizer's masters and moments in files on this machine's disk
    # (--offload-optimizer nvme, llama_1b_bf16_nvme): reads ahead, writes
    # behind; a few steps (each moves ~15 GB each way), their losses
    # against llama-off's (the same bits), the files' traffic per step.
    [ -f "$W/tokl.bin" ] || tokens "$W/tokl.bin" 128256 int32
    mkdir -p /tmp/dsc-nvme && df -h /tmp/dsc-nvme | tail -1
    dsc_variant llama_nvme "$B/llama_1b_bf16_nvme" "${STEPSNVME:-4}" llama_off --init random \
      --data "$W/tokl.bin" --data-dtype int32 --nvme-path /tmp/dsc-nvme
    grep -E "nvme|NVMe|memory" "$W/llama_nvme.txt" | head -8
    rm -rf /tmp/dsc-nvme ;;
  llama-acc)
    [ -f "$W/tokl.bin" ] || tokens "$W/tokl.bin" 128256 int32
    dsc_variant llama_acc "$B/llama_1b_bf16_acc" 12 llama --init random --data "$W/tokl.bin" --data-dtype int32
    grep -iE "memory|arena" "$W/llama_acc.txt" | head -4
    python3 bench/close_losses.py "$W/llama_acc.jsonl" "$W/llama_graph.jsonl" ;;
  llama-off-rsel)
    [ -f "$W/tokl.bin" ] || tokens "$W/tokl.bin" 128256 int32
    dsc_variant llama_off_rsel "$B/llama_1b_bf16_off_rsel" 12 llama_off --init random --data "$W/tokl.bin" --data-dtype int32 ;;
  llama7b-off | llama7b-ovr | llama7b)
    [ -f "$W/tok7.bin" ] || tokens "$W/tok7.bin" 32000 uint16
    name=${part/-/_}
    suffix=${part#llama7b}
    prog="$B/llama_7b_bf16${suffix/-/_}"
    [ -x "$prog" ] || { echo "device_run: no $prog (gpu-bundle-extra)"; continue; }
    timeout 270 "$prog" --init random --data "$W/tok7.bin" --steps "${STEPS7B:-6}" \
      --print-every 1 --log "$W/$name.jsonl" >"$W/$name.txt" 2>&1
    echo "rc=$?" >>"$W/$name.txt"
    grep -E "memory|workspaces|rc=|error" "$W/$name.txt" | tail -8
    python3 - "$W/$name.jsonl" <<'PY'
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1])]
t = [s["step_time_s"] for s in r[2:]]
if t:
    m = statistics.median(t)
    print(sys.argv[1], "median ms/step over steps 3..%d:" % len(r), round(m * 1e3, 1),
          "tokens/s:", round(2048 / m), "losses:", [round(s["loss"], 4) for s in r])
PY
    ;;
  llama-peers)
    timeout 90 python3 bench/llama_1b.py torch >"$W/llama_torch.jsonl" 2>"$W/llama_torch.err"
    timeout 180 python3 bench/llama_1b.py torch --compile >>"$W/llama_torch.jsonl" 2>>"$W/llama_torch.err"
    cat "$W/llama_torch.jsonl" ;;
  llama-ds-off)
    # DeepSpeed ZeRO-2 offload_optimizer: cpu on the Llama shape (.whl carried).
    eval "$(bash bench/install_deepspeed.sh 2>"$W/deepspeed_install.err")"
    timeout 420 python3 bench/llama_1b.py deepspeed-offload >"$W/llama_ds_off.jsonl" \
      2>"$W/llama_ds_off.err"
    echo "rc=$?"; tail -3 "$W/llama_ds_off.err"; cat "$W/llama_ds_off.jsonl" ;;
  deepspeed)
    eval "$(bash bench/install_deepspeed.sh 2>"$W/deepspeed_install.err")"
    timeout 300 python3 bench/peers_bf16.py --only deepspeed --configs nanogpt \
      --out "$W/deepspeed.json" >/dev/null 2>"$W/deepspeed.err"
    tail -8 "$W/deepspeed.err" ;;
  *) echo "device_run: unknown part '$part'" >&2 ;;
  esac
done
rm -f "$W/tok.bin" "$W/tokl.bin" "$W/tok7.bin"
kill $SMI 2>/dev/null
python3 bench/smi_summary.py "$W/smi.csv" "$W/parts.txt" 2>&1 | tee "$W/smi_summary.txt"
mkdir -p "$O"
tar -czf "$O/results.tgz" -C "$W" --exclude="gc/tmp" . 2>/dev/null
ls -la "$O"
