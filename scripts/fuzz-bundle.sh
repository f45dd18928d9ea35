#!/usr/bin/env bash
#===- fuzz-bundle.sh - a long fuzz run on a machine without LLVM -----------===#
#
#   scripts/fuzz-bundle.sh pack [BUNDLE]            here: build dsc-fuzz for
#                                                   throughput and pack it
#   scripts/fuzz-bundle.sh run BUNDLE SECONDS WORKERS [SEED]
#                                                   there, from the repo root
#
# `pack` configures build-fuzzfast: clang 22, -O2, assertions on, UBSan
# (every undefined behaviour aborts) and libFuzzer's coverage, but no ASan,
# which costs several times the throughput; MLIR and LLVM linked from their
# static archives (DSC_STATIC_LLVM), so the binary needs no LLVM where it
# runs. The bundle (default fuzz-bundle.tar.xz) holds the stripped binary and
# the shared libraries it needs beyond glibc. CI's fuzzing and
# `scripts/fuzz.sh` keep ASan; this is for a run of millions of executions
# on a machine with many cores (docs/reliability.md records one).
#
# `run` unpacks the bundle and calls scripts/fuzz.sh -x with it: the
# regressions, the seeds, then SECONDS of fuzzing by WORKERS processes
# (fuzz.sh -w), over a fresh corpus or, with CORPUS_IN=corpus.tar.xz, over
# the corpus an earlier run left (a campaign longer than one call of a lent
# machine). The log, the
# corpus (corpus.tar.xz) and any finding are copied to $OUT when it is set.
# FUZZ_MAX_LEN=N passes -m N to fuzz.sh (inputs and seeds up to N bytes).
#
#===------------------------------------------------------------------------===#
set -euo pipefail
cd "$(dirname "$0")/.."

cmd=${1:-}
case $cmd in
pack)
  bundle=${2:-fuzz-bundle.tar.xz}
  build=build-fuzzfast
  if [[ ! -f $build/build.ninja ]]; then
    cmake -G Ninja -B "$build" -S . -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
      -DCMAKE_C_FLAGS_RELEASE="-O2 -gline-tables-only" \
      -DCMAKE_CXX_FLAGS_RELEASE="-O2 -gline-tables-only" \
      -DDSC_SANITIZE=ON -DDSC_SANITIZERS=undefined -DDSC_FUZZ=ON \
      -DDSC_CUDA=OFF -DDSC_STATIC_LLVM=ON
  fi
  ninja -C "$build" ${NINJA_JOBS:+-j"$NINJA_JOBS"} dsc-fuzz
  stage=$build/fuzz-bundle
  rm -rf "$stage" && mkdir -p "$stage/lib"
  strip --strip-debug -o "$stage/dsc-fuzz" "$build/bin/dsc-fuzz"
  # Everything it loads but glibc and the dynamic loader.
  ldd "$build/bin/dsc-fuzz" | awk '$3 ~ /^\// {print $3}' |
    grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  tar -C "$stage" -cf - . | xz -T1 -6 >"$bundle"
  ls -la "$bundle" "$stage/dsc-fuzz" "$stage/lib"
  ;;
run)
  (($# >= 4)) || { echo "usage: $0 run BUNDLE SECONDS WORKERS [SEED]" >&2; exit 2; }
  bundle=$2 seconds=$3 workers=$4 seed=${5:-1}
  dir=$(mktemp -d /tmp/dsc-fuzz-bundle.XXXXXX)
  xz -dc "$bundle" | tar -C "$dir" -xf -
  export LD_LIBRARY_PATH=$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export DSC_FUZZ_WEIGHTS=$PWD/test/fixtures/models/gpt2_nodrop_extdata/weights.bin
  work=$dir/run
  mkdir -p "$work/corpus"
  if [[ -n ${CORPUS_IN:-} ]]; then
    xz -dc "$CORPUS_IN" | tar -C "$work/corpus" -xf -
    echo "fuzz-bundle: resuming over $(ls "$work/corpus" | wc -l) inputs of $CORPUS_IN" >&2
  fi
  set +e
  bash scripts/fuzz.sh -x "$dir/dsc-fuzz" -b "$work" -t "$seconds" -w "$workers" \
    -s "$seed" ${FUZZ_MAX_LEN:+-m "$FUZZ_MAX_LEN"} "$work/corpus"
  rc=$?
  set -e
  if [[ -n ${OUT:-} ]]; then
    mkdir -p "$OUT"
    tail -c 200000 "$work/fuzz.log" >"$OUT/fuzz-tail.log" 2>/dev/null || true
    xz -T0 -c "$work/fuzz.log" >"$OUT/fuzz.log.xz" 2>/dev/null || true
    tar -C "$work/corpus" -cf - . | xz -T0 -6 >"$OUT/corpus.tar.xz"
    # Every finding, in one file (the device tool returns only a few).
    if [[ -n $(ls "$work/fuzz-findings" 2>/dev/null) ]]; then
      tar -C "$work" -cf - fuzz-findings | xz -T0 >"$OUT/findings.tar.xz"
    fi
  fi
  exit $rc
  ;;
*)
  echo "usage: $0 pack [BUNDLE] | run BUNDLE SECONDS WORKERS [SEED]" >&2
  exit 2
  ;;
esac
