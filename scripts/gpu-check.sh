#!/usr/bin/env bash
# The GPU checks of dsc, in two halves, because the machine that compiles
# (MLIR, nvcc) need not be the one with the GPU:
#
#   scripts/gpu-check.sh build [BUNDLE]   here: compile the check programs for
#                                         --target cuda into BUNDLE (default
#                                         gpu-bundle/), with dsc-cuda-tests
#                                         and dsrun
#   scripts/gpu-check.sh run [BUNDLE]     on the GPU machine, from the repo
#                                         root: run every check, print a
#                                         table, exit 1 if one failed
#   scripts/gpu-check.sh bench [BUNDLE]   on the GPU machine: GPT-2 124M,
#                                         20 steps, side by side with PyTorch
#
# `run` checks: every CUDA kernel against its CPU reference; the MLP, CNN,
# nanoGPT and HF GPT-2 fixtures' fp32 gradients (TF32 off) against PyTorch's
# float64 references within 1e-5 and the first AdamW step within 1e-5; ZeRO
# stages 0-3 with 4 in-process ranks on the one GPU against the single-rank
# run (MLP float32 within 1e-6, nanoGPT float64 within 1e-10, as on the
# CPU); a run under NCCL through `dsrun -n 1`; where 2 or 4 GPUs are visible,
# stage 3 and hybrid sharding with one process per GPU under NCCL (losses
# against the single-rank runs; SKIP otherwise); and the error of a world
# size that differs from the compiled one. Results go to $OUT (or
# out/gpu-check).
set -uo pipefail

mode=${1:-}
bundle=${2:-gpu-bundle}
root=$(cd "$(dirname "$0")/.." && pwd)
fixtures=test/fixtures
export NCCL_NVLS_ENABLE=0 # NVLink multicast stays off on shared machines
# The families whose GPU paths differ: multi-query through the matmul's own
# broadcast (Falcon), a run-time int cumsum (RoBERTa), Tile (GPT-J), unfused
# soft-capped and ALiBi attention (Gemma 2, BLOOM), per-head q/k norms
# (Qwen 3), partial rotary (Phi), folded learned positions (OPT).
families="hf_llama hf_mistral hf_qwen2 hf_gpt2_sdpa hf_bert_cls hf_vit nanogpt_sdpa
  hf_phi hf_gemma2 hf_qwen3 hf_falcon hf_gptj hf_bloom hf_opt hf_roberta_mlm"

build() {
  local dsc=${DSC:-$root/build/bin/dsc}
  [ -x "$dsc" ] || { echo "gpu-check: $dsc not built (make build)" >&2; exit 1; }
  rm -rf "$bundle" && mkdir -p "$bundle/bin"
  cp "$root/build/bin/dsc-cuda-tests" "$root/build/bin/dsrun" \
    "$root/build/bin/dsc-attention-bench" "$bundle/bin/"
  local c="$dsc compile --target cuda"
  set -e
  # Single rank, float32, as test/e2e/torch_*.test on the CPU.
  $c --micro-batch 4 $fixtures/models/mlp_opset17.onnx -o "$bundle/bin/mlp"
  $c --micro-batch 4 $fixtures/models/cnn_opset17.onnx -o "$bundle/bin/cnn"
  $c --micro-batch 4 $fixtures/models/nanogpt_opset17.onnx -o "$bundle/bin/nanogpt"
  $c --micro-batch 4 $fixtures/models/gpt2_nodrop_opset17.onnx -o "$bundle/bin/gpt2"
  # ZeRO stages over 4 in-process ranks (test/e2e/zero_stages.test).
  for s in 0 1 2 3; do
    $c --micro-batch 1 --stage $s --world-size 4 $fixtures/models/mlp_opset17.onnx \
      -o "$bundle/bin/mlp_s${s}_n4"
  done
  # World size 2 under NCCL (run only where two GPUs are visible).
  $c --micro-batch 2 --stage 3 --world-size 2 $fixtures/models/mlp_opset17.onnx \
    -o "$bundle/bin/mlp_s3_n2"
  # Mixed precision (docs/numerics.md): every fixture family in bf16 and
  # fp16, and a bf16 stage-3 program on 4 in-process ranks with its
  # single-rank twin (4 micro-batches of 1 accumulated).
  for m in mlp cnn nanogpt gpt2; do
    local onnx=$fixtures/models/${m}_opset17.onnx
    [ $m = gpt2 ] && onnx=$fixtures/models/gpt2_nodrop_opset17.onnx
    for p in bf16 fp16; do
      $c --micro-batch 4 --precision $p "$onnx" -o "$bundle/bin/${m}_$p"
    done
  done
  $c --micro-batch 1 --accum-steps 4 --precision bf16 $fixtures/models/mlp_opset17.onnx \
    -o "$bundle/bin/mlp_bf16_acc4"
  $c --micro-batch 1 --stage 3 --world-size 4 --precision bf16 $fixtures/models/mlp_opset17.onnx \
    -o "$bundle/bin/mlp_bf16_s3_n4"
  # ZeRO-2 in bf16: the fp32 masters sharded (shard-masters), the 16-bit
  # copy gathered once a step; and with the optimizer offloaded.
  $c --micro-batch 1 --stage 2 --world-size 4 --precision bf16 $fixtures/models/mlp_opset17.onnx \
    -o "$bundle/bin/mlp_bf16_s2_n4"
  $c --micro-batch 1 --stage 2 --world-size 4 --precision bf16 --offload-optimizer cpu \
    $fixtures/models/mlp_opset17.onnx -o "$bundle/bin/mlp_bf16_s2_n4_off"
  # Offload (dsc-offload): the mlp's accumulated step with AdamW on the
  # host, and GPT-2 without dropout (so the step is captured as a graph;
  # its AdamW in chunks on two streams) for the graph and checkpoints.
  $c --micro-batch 1 --accum-steps 4 --precision bf16 --offload-optimizer cpu \
    $fixtures/models/mlp_opset17.onnx -o "$bundle/bin/mlp_bf16_acc4_off"
  $c --micro-batch 2 --precision bf16 --offload-optimizer cpu --offload-chunk-elements 100000 \
    $fixtures/models/gpt2_nodrop_opset17.onnx -o "$bundle/bin/gpt2nodrop_bf16_off"
  # The NVMe tier: the same step with masters and moments in files under
  # the check's directory, chunks read ahead of their AdamW.
  $c --micro-batch 2 --precision bf16 --offload-optimizer nvme --offload-chunk-elements 100000 \
    $fixtures/models/gpt2_nodrop_opset17.onnx -o "$bundle/bin/gpt2nodrop_bf16_nvme"
  # The same without offload: the chunks' gradients stream through a reused
  # host frame (--offload-copy-ahead, default 2) and must give its numbers.
  $c --micro-batch 2 --precision bf16 $fixtures/models/gpt2_nodrop_opset17.onnx \
    -o "$bundle/bin/gpt2nodrop_bf16"
  # ZeRO-3 with the parameter shards on the host too (--offload-param).
  $c --micro-batch 1 --stage 3 --world-size 4 --precision bf16 --offload-optimizer cpu \
    --offload-param cpu $fixtures/models/mlp_opset17.onnx -o "$bundle/bin/mlp_bf16_s3_n4_offp"
  $c --f64 --micro-batch 4 $fixtures/models/nanogpt_opset17.onnx -o "$bundle/bin/nanogpt64"
  $c --f64 --micro-batch 1 --stage 3 --world-size 4 \
    $fixtures/models/nanogpt_opset17.onnx -o "$bundle/bin/nanogpt64_s3_n4"
  $c --f64 --micro-batch 1 --sharding HYBRID_SHARD --hybrid-group 2 --world-size 4 \
    $fixtures/models/nanogpt_opset17.onnx -o "$bundle/bin/nanogpt64_hybrid"
  # Checkpoints on the GPU: HF GPT-2 with dropout, bf16, stage 2 on 2
  # in-process ranks (stop/resume bit for bit), and the float64 nanoGPT
  # saved at 4 ranks stage 3, resumed at 1 rank (within 1e-10).
  $c --micro-batch 2 --stage 2 --world-size 2 --precision bf16 \
    $fixtures/models/gpt2_opset17.onnx -o "$bundle/bin/gpt2drop_bf16_s2_n2"
  # Accumulation inside the call (dsc-accumulate-in-call: each call's result
  # written over the running sum, the tied classifier's GEMMs onto it)
  # against the sums in the step, and ZeRO-2's once-a-step gather against
  # stage 3 --keep-gathered (2 in-process ranks, 2 micro-batches).
  for v in "" --no-accumulate-in-call; do
    $c --micro-batch 1 --accum-steps 4 --precision bf16 $v \
      $fixtures/models/gpt2_nodrop_opset17.onnx -o "$bundle/bin/gpt2nodrop_bf16_acc4${v:+_n}"
  done
  $c --micro-batch 1 --accum-steps 2 --stage 2 --world-size 2 --precision bf16 \
    $fixtures/models/mlp_opset17.onnx -o "$bundle/bin/mlp_bf16_s2_n2_acc2"
  $c --micro-batch 1 --accum-steps 2 --stage 3 --keep-gathered --world-size 2 --precision bf16 \
    $fixtures/models/mlp_opset17.onnx -o "$bundle/bin/mlp_bf16_k3_n2_acc2"
  # The HF families (dsc.attention: the own kernel in fp32, cuDNN in bf16).
  for m in $families; do
    $c --micro-batch 4 $fixtures/models/${m}_opset17.onnx -o "$bundle/bin/$m"
    $c --micro-batch 4 --precision bf16 $fixtures/models/${m}_opset17.onnx \
      -o "$bundle/bin/${m}_bf16"
  done
  # GPT-2 124M from shapes alone (bench/gpt2_124m.py export), micro-batch 16.
  if [ -f "$bundle/../gpt2_124m.onnx" ] || [ -n "${GPT2_124M:-}" ]; then
    local g=${GPT2_124M:-$bundle/../gpt2_124m.onnx}
    $c --micro-batch 16 --lr 6e-4 --weight-decay 0.1 "$g" -o "$bundle/bin/gpt2_124m"
    $c --micro-batch 16 --lr 6e-4 --weight-decay 0.1 --precision bf16 "$g" \
      -o "$bundle/bin/gpt2_124m_bf16"
    $c --micro-batch 16 --lr 6e-4 --weight-decay 0.1 --precision bf16 \
      --no-fuse-attention "$g" -o "$bundle/bin/gpt2_124m_bf16_unfused"
    $c --micro-batch 16 --lr 6e-4 --weight-decay 0.1 --precision bf16 \
      --offload-optimizer cpu "$g" -o "$bundle/bin/gpt2_124m_bf16_off"
  fi
  # The Llama-3.2-1B shape (bench/llama_1b.py export), 4 x 2048 tokens.
  if [ -n "${LLAMA_1B:-}" ]; then
    $c --micro-batch 4 --precision bf16 "$LLAMA_1B" -o "$bundle/bin/llama_1b_bf16"
    $c --micro-batch 4 --precision bf16 --offload-optimizer cpu "$LLAMA_1B" \
      -o "$bundle/bin/llama_1b_bf16_off"
  fi
  set +e
  strip "$bundle"/bin/* 2>/dev/null
  # One compressed file travels to the GPU machine, with the checkout, in
  # 64 MiB. The programs share most of their bytes (the runtime they link):
  # a dictionary that spans the whole tar finds them all (~800 MB of
  # programs: 21 MB, where xz -9's 64 MiB window gave 36 MB; one thread,
  # ~8 minutes, ~11 GB of memory).
  tar -cf - -C "$(dirname "$bundle")" "$(basename "$bundle")" |
    xz -T1 --lzma2=preset=6,dict=1GiB >"$bundle.tar.xz"
  du -sh "$bundle" "$bundle.tar.xz"
}

need_gpu() {
  nvidia-smi -L >/dev/null 2>&1 || {
    echo "gpu-check: no GPU visible here (nvidia-smi -L fails); '$mode' is the half that runs on the GPU machine" >&2
    exit 1
  }
}

unpack() {
  if [ ! -d "$bundle" ] && [ -f "$bundle.tar.xz" ]; then
    tar -xJf "$bundle.tar.xz" -C "$(dirname "$bundle")"
  fi
  [ -d "$bundle/bin" ] || { echo "gpu-check: no $bundle (run 'scripts/gpu-check.sh build' first)" >&2; exit 1; }
}

# Finds cuBLASLt, cuDNN and NCCL when they are not on the system path (the
# NVIDIA wheels of a PyTorch install).
libraries() {
  local missing
  missing=$(ldd "$bundle/bin/mlp" 2>/dev/null | grep "not found" || true)
  [ -z "$missing" ] && return
  local dirs
  dirs=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
seen = []
for r in roots:
    for d in glob.glob(os.path.join(r, "nvidia", "*", "lib")):
        if d not in seen:
            seen.append(d)
print(":".join(seen))
PY
)
  export LD_LIBRARY_PATH="${dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

out=${OUT:-$root/out/gpu-check}
results=()
failed=0
record() { # name status detail
  results+=("$(printf '%-44s %-6s %s' "$1" "$2" "$3")")
  [ "$2" = PASS ] || [ "$2" = SKIP ] || failed=1
}
check() { # name command... : PASS when it exits 0; detail = its last line
  local name=$1; shift
  local log="$out/$name.log"
  "$@" >"$log" 2>&1
  local rc=$?
  local last
  last=$(grep -v '^$' "$log" | tail -1 | cut -c1-90)
  if [ $rc -eq 0 ]; then record "$name" PASS "$last"; else record "$name" FAIL "rc=$rc: $last"; fi
}

# dsc-accumulate-in-call and ZeRO-2's once-a-step gather on this GPU: the
# sums in the call within rounding of the sums in the step (the tied
# classifier's gradient is summed in another order), and the gather once a
# step bit for bit stage 3 --keep-gathered's gather in each call.
accumulation_checks() { # BIN TMP DATA-ARGS MLP-ARGS
  local b=$1 t=$2 cd=$3 bi=$4
  check accumulate_in_call_gpt2_bf16 bash -c "'$b/gpt2nodrop_bf16_acc4' $cd --seed 3 --steps 5 \
    --log $t/ac.jsonl --dump-params $t/ac.safetensors && '$b/gpt2nodrop_bf16_acc4_n' $cd --seed 3 \
    --steps 5 --log $t/an.jsonl --dump-params $t/an.safetensors && python3 test/e2e/compare_runs.py \
    $t/an.jsonl $t/an.safetensors $t/ac.jsonl $t/ac.safetensors --tol 1e-5"
  check zero_stage2_gather_once_mlp_bf16 bash -c "'$b/mlp_bf16_k3_n2_acc2' $bi --log $t/k3.jsonl \
    --dump-params $t/k3.safetensors && '$b/mlp_bf16_s2_n2_acc2' $bi --log $t/s2a.jsonl \
    --dump-params $t/s2a.safetensors && python3 test/e2e/compare_runs.py $t/k3.jsonl \
    $t/k3.safetensors $t/s2a.jsonl $t/s2a.safetensors --tol 0"
}

run() {
  need_gpu
  mkdir -p "$out"
  unpack
  libraries
  local b=$bundle/bin ref=$fixtures/ref t=$out/tmp
  mkdir -p "$t"
  nvidia-smi -L > "$out/gpu.txt" 2>&1
  check kernels "$b/dsc-cuda-tests" --gtest_brief=1
  # Gradients and one AdamW step against PyTorch's float64 references.
  python3 test/e2e/check_against_torch.py --ref $ref/cnn --write-init "$t/cnn_init.safetensors" >/dev/null
  for m in mlp cnn nanogpt gpt2; do
    local r=$m extra="" init=""
    [ $m = gpt2 ] && r=gpt2_nodrop
    [ $m = cnn ] && { extra=--buffers; init="--init $t/cnn_init.safetensors"; }
    [ $m != cnn ] && init="--init $fixtures/models/${r}_opset17.onnx"
    check "grads_vs_torch_$m" bash -c "'$b/$m' --batch $ref/$r/batch.safetensors $init --steps 1 --quiet \
      --dump-grads $t/g_$m.safetensors --dump-params $t/p_$m.safetensors && \
      python3 test/e2e/check_against_torch.py --ref $ref/$r --exporter opset17 $extra \
      --grads $t/g_$m.safetensors --params $t/p_$m.safetensors --grad-tol 1e-5 --param-tol 1e-5"
  done
  # The HF families through dsc.attention: fp32 (dsc's own attention
  # kernel) within 1e-4 of PyTorch's float64 gradients and AdamW step, as
  # on the CPU; bf16 (cuDNN's fused attention) within 8 u of them.
  for m in $families; do
    # The first AdamW step is sign-like where a gradient is near eps: Gemma
    # 2's up-projection moves by 1.01e-4 on the H200 (5.8e-5 on the CPU)
    # with its gradient within 5e-7.
    local ptol=1e-4
    [ $m = hf_gemma2 ] && ptol=2e-4
    check "grads_vs_torch_$m" bash -c "'$b/$m' --batch $ref/$m/batch.safetensors \
      --init $fixtures/models/${m}_opset17.onnx --steps 1 --quiet \
      --dump-grads $t/g_$m.safetensors --dump-params $t/p_$m.safetensors && \
      python3 test/e2e/check_against_torch.py --ref $ref/$m --exporter opset17 \
      --grads $t/g_$m.safetensors --params $t/p_$m.safetensors --grad-tol 1e-4 --param-tol $ptol"
    # Within 8 u of float64, or (a family with PyTorch autocast's gradients
    # committed: hf_t5, whose ReLU kinks cost autocast itself about 15 u)
    # at most twice autocast's error.
    local peer=""
    [ -f $ref/$m/grads_autocast_bf16.safetensors ] &&
      peer="--factor 2 --peer $ref/$m/grads_autocast_bf16.safetensors"
    check "grads_bf16_vs_f64_$m" bash -c "'$b/${m}_bf16' --batch $ref/$m/batch.safetensors \
      --init $fixtures/models/${m}_opset17.onnx --steps 1 --quiet \
      --dump-grads $t/g_${m}_bf16.safetensors && python3 test/e2e/compare_grads.py \
      $ref/$m/grads_f64.safetensors $t/g_${m}_bf16.safetensors --precision bf16 --units 8 $peer"
  done
  # Mixed precision: dsc's bf16 / fp16 gradients as accurate as PyTorch
  # autocast's on this GPU (scripts/make_autocast_refs.py; both against the
  # float64 references), and a bf16 stage-3 step on 4 ranks as one rank's.
  for m in mlp cnn nanogpt gpt2; do
    local r=$m init=""
    [ $m = gpt2 ] && r=gpt2_nodrop
    [ $m = cnn ] && init="--init $t/cnn_init.safetensors"
    [ $m != cnn ] && init="--init $fixtures/models/${r}_opset17.onnx"
    for p in bf16 fp16; do
      check "grads_${p}_vs_autocast_$m" bash -c "'$b/${m}_$p' --batch $ref/$r/batch.safetensors \
        $init --steps 1 --quiet --dump-grads $t/g_${m}_$p.safetensors && \
        python3 test/e2e/compare_grads.py $ref/$r/grads_f64.safetensors $t/g_${m}_$p.safetensors \
        --precision $p --units 4 --factor 2 --peer $ref/$r/grads_autocast_$p.safetensors"
    done
  done
  local bi="--init $fixtures/models/mlp_opset17.onnx --batch $ref/mlp/batch.safetensors --steps 5 --quiet"
  "$b/mlp_bf16_acc4" $bi --log "$t/b1.jsonl" --dump-params "$t/b1.safetensors" >"$out/b1.log" 2>&1
  check zero_stage3_4ranks_mlp_bf16 bash -c "'$b/mlp_bf16_s3_n4' $bi --log $t/b3.jsonl \
    --dump-params $t/b3.safetensors && python3 test/e2e/compare_runs.py $t/b1.jsonl \
    $t/b1.safetensors $t/b3.jsonl $t/b3.safetensors --tol 1e-6"
  # ZeRO-2 with sharded masters against one rank, and offloaded against
  # itself on the GPU (the host's AdamW, within rounding).
  check zero_stage2_masters_4ranks_mlp_bf16 bash -c "'$b/mlp_bf16_s2_n4' $bi --log $t/b2.jsonl \
    --dump-params $t/b2.safetensors && python3 test/e2e/compare_runs.py $t/b1.jsonl \
    $t/b1.safetensors $t/b2.jsonl $t/b2.safetensors --tol 1e-6"
  check offload_zero_stage2_4ranks_mlp_bf16 bash -c "'$b/mlp_bf16_s2_n4_off' $bi \
    --log $t/b2o.jsonl --dump-params $t/b2o.safetensors && python3 test/e2e/compare_runs.py \
    $t/b2.jsonl $t/b2.safetensors $t/b2o.jsonl $t/b2o.safetensors --tol 1e-5"
  # The host's AdamW (offload) against the GPU's, within rounding.
  check offload_adamw_host_vs_gpu_mlp_bf16 bash -c "'$b/mlp_bf16_acc4_off' $bi \
    --log $t/bo.jsonl --dump-params $t/bo.safetensors && python3 test/e2e/compare_runs.py \
    $t/b1.jsonl $t/b1.safetensors $t/bo.jsonl $t/bo.safetensors --tol 1e-5"
  # ZeRO-3 on 4 ranks with optimizer and parameters offloaded: the shards
  # copied up where they are gathered, against the plain ZeRO-3 run.
  check offload_param_s3_4ranks_mlp_bf16 bash -c "'$b/mlp_bf16_s3_n4_offp' $bi \
    --log $t/bp.jsonl --dump-params $t/bp.safetensors && python3 test/e2e/compare_runs.py \
    $t/b3.jsonl $t/b3.safetensors $t/bp.jsonl $t/bp.safetensors --tol 1e-5"
  # ZeRO stages with 4 in-process ranks on this GPU against one rank.
  local mi="--init $fixtures/models/mlp_opset17.onnx --batch $ref/mlp/batch.safetensors --steps 5 --quiet"
  "$b/mlp" $mi --log "$t/mlp1.jsonl" --dump-params "$t/mlp1.safetensors" >"$out/mlp1.log" 2>&1
  for s in 0 1 2 3; do
    check "zero_stage${s}_4ranks_mlp_f32" bash -c "'$b/mlp_s${s}_n4' $mi --log $t/r$s.jsonl \
      --dump-params $t/r$s.safetensors && python3 test/e2e/compare_runs.py $t/mlp1.jsonl \
      $t/mlp1.safetensors $t/r$s.jsonl $t/r$s.safetensors --tol 1e-6"
  done
  local ni="--init $fixtures/models/nanogpt_opset17.onnx --batch $ref/nanogpt/batch.safetensors --steps 5 --quiet"
  "$b/nanogpt64" $ni --log "$t/g1.jsonl" --dump-params "$t/g1.safetensors" >"$out/g1.log" 2>&1
  for v in s3_n4 hybrid; do
    check "zero_${v}_nanogpt_f64" bash -c "'$b/nanogpt64_$v' $ni --log $t/g$v.jsonl \
      --dump-params $t/g$v.safetensors && python3 test/e2e/compare_runs.py $t/g1.jsonl \
      $t/g1.safetensors $t/g$v.jsonl $t/g$v.safetensors --tol 1e-10"
  done
  # Checkpoints: stop at step 3, resume to 6, against the uninterrupted 6.
  python3 examples/tinytext/prepare.py examples/tinytext/input.txt "$t/train.bin" >/dev/null
  local cd="--data $t/train.bin --quiet"
  accumulation_checks "$b" "$t" "$cd" "$bi"
  check checkpoint_resume_gpt2_dropout_bf16_s2 bash -c "rm -rf $t/ck1 && \
    '$b/gpt2drop_bf16_s2_n2' $cd --seed 3 --steps 6 --log $t/cf.jsonl --dump-params $t/cf.safetensors && \
    '$b/gpt2drop_bf16_s2_n2' $cd --seed 3 --steps 3 --log $t/ca.jsonl --save-dir $t/ck1 && \
    '$b/gpt2drop_bf16_s2_n2' $cd --steps 6 --log $t/cb.jsonl --resume $t/ck1 --dump-params $t/cr.safetensors && \
    cat $t/ca.jsonl $t/cb.jsonl > $t/cab.jsonl && \
    python3 test/e2e/compare_runs.py $t/cf.jsonl $t/cf.safetensors $t/cab.jsonl $t/cr.safetensors --tol 0"
  # Offload: the step replayed as one CUDA graph (host tasks and copies
  # included) is the step run op by op, and a checkpoint resumes bitwise.
  check offload_graph_and_resume_gpt2_bf16 bash -c "rm -rf $t/ck3 && \
    '$b/gpt2nodrop_bf16_off' $cd --seed 3 --steps 6 --cuda-graph --log $t/of.jsonl --dump-params $t/of.safetensors && \
    '$b/gpt2nodrop_bf16_off' $cd --seed 3 --steps 6 --no-cuda-graph --log $t/on.jsonl --dump-params $t/on.safetensors && \
    python3 test/e2e/compare_runs.py $t/of.jsonl $t/of.safetensors $t/on.jsonl $t/on.safetensors --tol 0 && \
    '$b/gpt2nodrop_bf16_off' $cd --seed 3 --steps 3 --log $t/oa.jsonl --save-dir $t/ck3 && \
    '$b/gpt2nodrop_bf16_off' $cd --steps 6 --log $t/ob.jsonl --resume $t/ck3 --dump-params $t/or.safetensors && \
    cat $t/oa.jsonl $t/ob.jsonl > $t/oab.jsonl && \
    python3 test/e2e/compare_runs.py $t/of.jsonl $t/of.safetensors $t/oab.jsonl $t/or.safetensors --tol 0"
  # Offload in chunks through the reused host frame against the GPU AdamW.
  check offload_chunks_vs_gpu_gpt2_bf16 bash -c "'$b/gpt2nodrop_bf16' $cd --seed 3 --steps 6 \
    --log $t/og.jsonl --dump-params $t/og.safetensors && python3 test/e2e/compare_runs.py \
    $t/og.jsonl $t/og.safetensors $t/on.jsonl $t/on.safetensors --tol 1e-5"
  # NVMe: the pinned offload's bits, op by op and as a graph (the host tasks
  # reading and writing the files replayed), and the directory empty after.
  check offload_nvme_vs_pinned_gpt2_bf16 bash -c "rm -rf $t/nv && mkdir -p $t/nv && \
    '$b/gpt2nodrop_bf16_nvme' $cd --seed 3 --steps 6 --nvme-path $t/nv --no-cuda-graph \
      --log $t/nn.jsonl --dump-params $t/nn.safetensors && \
    python3 test/e2e/compare_runs.py $t/on.jsonl $t/on.safetensors $t/nn.jsonl $t/nn.safetensors --tol 0 && \
    '$b/gpt2nodrop_bf16_nvme' $cd --seed 3 --steps 6 --nvme-path $t/nv --cuda-graph \
      --log $t/ng.jsonl --dump-params $t/ng.safetensors && \
    python3 test/e2e/compare_runs.py $t/on.jsonl $t/on.safetensors $t/ng.jsonl $t/ng.safetensors --tol 0 && \
    test -z \"\$(ls -A $t/nv)\""
  check checkpoint_reshard_nanogpt_f64_s3n4_to_1 bash -c "rm -rf $t/ck2 && \
    '$b/nanogpt64_s3_n4' $cd --seed 5 --steps 6 --log $t/nf.jsonl --dump-params $t/nf.safetensors && \
    '$b/nanogpt64_s3_n4' $cd --seed 5 --steps 3 --log $t/na.jsonl --save-dir $t/ck2 && \
    '$b/nanogpt64' $cd --steps 6 --log $t/nb.jsonl --resume $t/ck2 --dump-params $t/nr.safetensors && \
    cat $t/na.jsonl $t/nb.jsonl > $t/nab.jsonl && \
    python3 test/e2e/compare_runs.py $t/nf.jsonl $t/nf.safetensors $t/nab.jsonl $t/nr.safetensors --tol 1e-10"
  # What a compiled program says of itself and of this machine (the
  # environment probe on a real driver: GPUs, libraries).
  check version_and_env bash -c "'$b/mlp' --version > $out/version.txt && cat $out/version.txt && \
    grep -q 'count: *[1-9]' $out/version.txt && ! grep -q 'CUDA driver: *not found' $out/version.txt"
  # NCCL, one process per GPU, launched by dsrun; the same losses as without.
  check nccl_dsrun_n1_mlp bash -c "'$b/dsrun' -n 1 '$b/mlp' $mi --log $t/nccl.jsonl \
    --dump-params $t/nccl.safetensors && python3 test/e2e/compare_runs.py $t/mlp1.jsonl \
    $t/mlp1.safetensors $t/nccl.jsonl $t/nccl.safetensors --tol 0"
  # Several GPUs: the same sharded programs, one process per GPU under NCCL
  # (hybrid groups through ncclCommSplit), against the single-rank runs.
  local gpus
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  # (Dumps are per process there, so the losses are compared.)
  if [ "${gpus:-0}" -ge 2 ]; then
    check nccl_dsrun_n2_mlp_stage3 bash -c "'$b/dsrun' -n 2 '$b/mlp_s3_n2' $mi \
      --log $t/n2.jsonl && python3 scripts/compare_losses.py $t/mlp1.jsonl $t/n2.jsonl 1e-6"
  else
    record nccl_dsrun_n2_mlp_stage3 SKIP "needs 2 GPUs, ${gpus:-0} visible"
  fi
  if [ "${gpus:-0}" -ge 4 ]; then
    check nccl_dsrun_n4_mlp_stage3 bash -c "'$b/dsrun' -n 4 '$b/mlp_s3_n4' $mi \
      --log $t/n4.jsonl && python3 scripts/compare_losses.py $t/mlp1.jsonl $t/n4.jsonl 1e-6"
    check nccl_dsrun_n4_nanogpt_hybrid_f64 bash -c "'$b/dsrun' -n 4 '$b/nanogpt64_hybrid' \
      $ni --log $t/h4.jsonl && python3 scripts/compare_losses.py $t/g1.jsonl $t/h4.jsonl 1e-10"
  else
    record nccl_dsrun_n4_stage3_and_hybrid SKIP "needs 4 GPUs, ${gpus:-0} visible"
  fi
  # A world size other than the compiled one: a clear error, exit 1.
  check nccl_world_size_mismatch bash -c "'$b/dsrun' -n 1 '$b/mlp_s3_n4' $mi >$t/mismatch.log 2>&1; \
    rc=\$?; cat $t/mismatch.log; [ \$rc -ne 0 ] && grep -q 'compiled for 4 ranks' $t/mismatch.log"
  echo
  echo "== dsc GPU checks on $(head -1 "$out/gpu.txt") ($(date -u +%F))"
  printf '%s\n' "${results[@]}" | tee "$out/summary.txt"
  [ $failed -eq 0 ] && echo "all passed" || echo "FAILED (logs in $out)"
  return $failed
}

bench() {
  need_gpu
  mkdir -p "$out"
  unpack
  libraries
  local b=$bundle/bin
  [ -x "$b/gpt2_124m" ] || { echo "gpu-check: no $b/gpt2_124m (build with bench/gpt2_124m.py export first)" >&2; return 1; }
  python3 - "$out/tokens.bin" <<'PY'
import sys, numpy as np
np.random.default_rng(0).integers(0, 50257, size=8_000_000, dtype=np.uint16).tofile(sys.argv[1])
PY
  local common="--init random --data $out/tokens.bin --steps ${BENCH_STEPS:-20} --print-every 5"
  : >"$out/torch.jsonl"
  echo "== dsc, bf16 (dsc-mixed-precision)"
  timeout 240 "$b/gpt2_124m_bf16" $common --log "$out/dsc_bf16.jsonl" 2>&1 | tee "$out/dsc_bf16.log"
  echo "== dsc, bf16, attention as exported (--no-fuse-attention)"
  timeout 240 "$b/gpt2_124m_bf16_unfused" $common --log "$out/dsc_bf16_unfused.jsonl" 2>&1 | tee "$out/dsc_bf16_unfused.log"
  echo "== attention alone: dsc (cuDNN, own kernel) and PyTorch SDPA"
  timeout 120 "$b/dsc-attention-bench" 2>&1 | tee "$out/attention_dsc.txt"
  timeout 120 python3 bench/attention_torch.py 2>&1 | tee "$out/attention_torch.jsonl"
  echo "== dsc, fp32 with TF32 GEMMs"
  DSC_ALLOW_TF32=1 timeout 240 "$b/gpt2_124m" $common --log "$out/dsc_tf32.jsonl" 2>&1 | tee "$out/dsc_tf32.log"
  if [ -z "${BENCH_QUICK:-}" ]; then
    echo "== dsc, fp32 (TF32 off)"
    timeout 240 "$b/gpt2_124m" $common --log "$out/dsc_fp32.jsonl" 2>&1 | tee "$out/dsc_fp32.log"
    echo "== PyTorch on the same card"
    for flags in "" "--tf32" "--bf16 --sdpa"; do
      timeout 240 python3 bench/gpt2_124m.py torch --micro-batch 16 --steps 20 $flags | tee -a "$out/torch.jsonl"
    done
  fi
  python3 - "$out" <<'PY'
import json, sys, statistics, torch, time
out = sys.argv[1]
# The bf16 matmul ceiling of this card, measured now.
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(3): a @ b
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(10): a @ b
torch.cuda.synchronize(); ceiling = 2 * 8192**3 * 10 / (time.perf_counter() - t) / 1e12
flops = 6 * 124439808 * 16 * 1024 + 12 * 12 * 1024 * 1024 * 768 * 16  # 6N per token + attention
rows = []
for name in ("dsc_bf16", "dsc_bf16_unfused", "dsc_tf32", "dsc_fp32"):
    try:
        steps = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    except OSError:
        continue
    if len(steps) < 6:
        continue
    t = statistics.median(s["step_time_s"] for s in steps[5:])
    row = dict(impl="dsc " + name[4:], median_step_s=t, tokens_per_s=16 * 1024 / t)
    import re
    m = re.search(r"gpu memory: peak ([0-9.]+) (GiB|MiB)", open(f"{out}/{name}.log").read())
    if m:
        row["peak_gib"] = float(m.group(1)) / (1 if m.group(2) == "GiB" else 1024)
    rows.append(row)
for l in open(f"{out}/torch.jsonl"):
    r = json.loads(l)
    rows.append(dict(impl=f"pytorch {r['precision']} {r['attention']}", median_step_s=r["median_step_s"],
                     tokens_per_s=r["tokens_per_s"], peak_gib=r["peak_bytes"] / 2**30))
print(f"\nbf16 matmul ceiling measured: {ceiling:.0f} TFLOP/s")
print(f"{'implementation':40} {'ms/step':>9} {'tok/s':>9} {'MFU':>6} {'peak GiB':>9}")
for r in rows:
    mfu = flops / r["median_step_s"] / 1e12 / ceiling
    print(f"{r['impl']:40} {r['median_step_s']*1e3:9.1f} {r['tokens_per_s']:9.0f} {mfu:6.1%} "
          f"{r.get('peak_gib', float('nan')):9.2f}")
json.dump(dict(ceiling_tflops=ceiling, rows=rows), open(f"{out}/bench.json", "w"), indent=1)
PY
}

case "$mode" in
build) build ;;
run) run ;;
bench) bench ;;
*) sed -n '2,22p' "$0"; exit 2 ;;
esac
