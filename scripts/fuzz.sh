#!/usr/bin/env bash
#===- fuzz.sh - run dsc-fuzz over a corpus, for a minute or for hours -------===#
#
#   scripts/fuzz.sh [-t SECONDS] [-j JOBS | -w WORKERS] [-s SEED] [-b BUILD_DIR]
#                   [-r RUNS] [-x FUZZER] [-m MAXLEN] [CORPUS_DIR]
#
# Builds dsc-fuzz in BUILD_DIR (default build-sanitize, configured as
# `make fuzz-ci` does) if needed, replays every past finding in
# test/fuzz/regressions once, then fuzzes for SECONDS (default 3600) with
# JOBS processes (default 1) over CORPUS_DIR (default BUILD_DIR/fuzz-corpus,
# kept between runs), seeded with the fixture models and the importer's test
# models. A crash, sanitizer report, timeout or out-of-memory is written to
# BUILD_DIR/fuzz-findings/ and the script fails; copy such a file to
# test/fuzz/regressions/ once it is fixed. `make fuzz-ci` is
# `scripts/fuzz.sh -t 60 -s 1` on a fresh corpus.
#
# -w WORKERS runs that many independent fuzzers over the one corpus instead
# of -fork's jobs (-r does not apply), for a long run on many cores.
#
# -x FUZZER runs a prebuilt dsc-fuzz instead of building one (a copy made by
# scripts/fuzz-bundle.sh for a machine with cores to spare but no LLVM);
# findings and the log then go under BUILD_DIR all the same.
#
# -m MAXLEN bounds the inputs libFuzzer makes (default 1 MiB) and leaves out
# the seeds longer than that: -m 65536 fuzzes the small models only (the
# importer's generated ones, the MLP and CNN fixtures), 5-10 times as many
# inputs a second as with the 700 KB GPT-2 exports among the seeds.
#
#===------------------------------------------------------------------------===#
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=3600 jobs=1 workers=1 seed=0 build=build-sanitize runs= prebuilt= maxlen=1048576
while getopts "t:j:w:s:b:r:x:m:" opt; do
  case $opt in
  w) workers=$OPTARG ;;
  m) maxlen=$OPTARG ;;
  x) prebuilt=$OPTARG ;;
  t) seconds=$OPTARG ;;
  r) runs=$OPTARG ;;
  j) jobs=$OPTARG ;;
  s) seed=$OPTARG ;;
  b) build=$OPTARG ;;
  *) echo "usage: $0 [-t seconds] [-r runs] [-j jobs | -w workers] [-s seed] [-b build-dir] [-x dsc-fuzz] [-m max-len] [corpus-dir]" >&2
     exit 2 ;;
  esac
done
shift $((OPTIND - 1))
corpus=${1:-$build/fuzz-corpus}

if [[ -n $prebuilt ]]; then
  fuzz=$prebuilt
  mkdir -p "$build"
else
  [[ -f $build/build.ninja ]] || make --no-print-directory sanitize-configure SAN_DIR="$build"
  ninja -C "$build" dsc-fuzz >/dev/null
  fuzz=$build/bin/dsc-fuzz
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-22/bin/llvm-symbolizer}

# 1. Past findings: each must now end in a diagnostic or in success.
shopt -s nullglob
regressions=(test/fuzz/regressions/*.onnx)
if ((${#regressions[@]})); then
  echo "fuzz: replaying ${#regressions[@]} regression inputs" >&2
  "$fuzz" -rss_limit_mb=2048 "${regressions[@]}" 2>"$build/fuzz-regressions.log" || {
    tail -40 "$build/fuzz-regressions.log" >&2
    echo "fuzz: a regression input fails again (log: $build/fuzz-regressions.log)" >&2
    exit 1
  }
fi

# 2. Seeds: the fixtures (the 700 KB GPT-2 exports too: under ASan one takes
# about a second, so they are mutated rarely but their ops are covered) and
# the importer's small generated models.
# Made afresh on every run (a second or two): seeds kept from an earlier
# checkout would make a local run fuzz other inputs than CI's fresh clone.
seeds=$build/fuzz-seeds
rm -rf "$seeds" "$seeds.tmp"
mkdir -p "$seeds.tmp"
cp test/fixtures/models/*.onnx "$seeds.tmp/"
cp test/fixtures/models/gpt2_nodrop_extdata/model.onnx "$seeds.tmp/gpt2_extdata.onnx"
python3 test/import/gen_test_models.py "$seeds.tmp/import" >/dev/null
find "$seeds.tmp/import" -name '*.onnx' -exec cp {} "$seeds.tmp/" \;
rm -rf "$seeds.tmp/import"
find "$seeds.tmp" -name '*.onnx' -size +"$maxlen"c -delete
mv "$seeds.tmp" "$seeds"
mkdir -p "$corpus" "$build/fuzz-findings"

# 3. Fuzz. -timeout: one input through import and codegen takes at most a
# few seconds even for GPT-2 under ASan; a minute is a hang.
echo "fuzz: $seconds s, $jobs job(s), $workers worker(s), seed $seed, inputs up to $maxlen bytes, $(ls "$seeds" | wc -l) seeds, corpus $corpus" >&2
# -r: a fixed number of executions (-t then only bounds the time). A fixed
# seed does not make two runs fuzz the same inputs: coverage picks what is
# kept, and the compiler's coverage varies a little from run to run (hash
# tables keyed by addresses iterate in another order), so replay a finding
# from its saved input, not by rerunning the seed.
# The seeds go in as a list in name order, not as a directory: libFuzzer
# reads a directory in the file system's order (ext4's hashes differ from
# machine to machine), and that order decides what a fixed seed fuzzes.
(cd "$seeds" && LC_ALL=C ls) | sed "s|^|$seeds/|" | paste -sd, - >"$seeds.list"
common=(-max_total_time="$seconds" -rss_limit_mb=2048 -timeout=60
        -max_len="$maxlen" -print_final_stats=1
        -artifact_prefix="$build/fuzz-findings/")
log=$build/fuzz.log
set +e
if ((workers > 1)); then
  # -w: independent processes writing to one corpus directory, worker i
  # with seed SEED + i. No fork and no restart, so each runs at the
  # in-process rate, which -fork's short jobs lose to starting over; and no
  # -reload, whose rescan of a directory that grows by thousands of inputs a
  # minute slows every worker. The executions are the sum of theirs.
  pids=()
  for ((i = 0; i < workers; i++)); do
    "$fuzz" -seed=$((seed + i)) "${common[@]}" -reload=0 \
      -seed_inputs=@"$seeds.list" "$corpus" >"$build/fuzz-worker$i.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do
    wait "$p" || rc=$?
  done
  for ((i = 0; i < workers; i++)); do
    echo "=== worker $i (seed $((seed + i)))"
    cat "$build/fuzz-worker$i.log"
  done >"$log"
  total=$(grep -h '^stat::number_of_executed_units' "$build"/fuzz-worker*.log |
    awk '{s += $2} END {print s + 0}')
  echo "fuzz: $workers workers, $total executions in all, exit $rc" | tee -a "$log" >&2
else
  args=(-seed="$seed" "${common[@]}" "$corpus")
  # -fork keeps going after a finding and merges what each job learns; its
  # parent reads only corpus directories (not -seed_inputs).
  if ((jobs > 1)); then
    args=(-fork="$jobs" -ignore_crashes=0 "${args[@]}" "$seeds")
  else
    args+=(-seed_inputs=@"$seeds.list")
  fi
  [ -n "$runs" ] && args=(-runs="$runs" "${args[@]}")
  # A pipeline, so tee has written the whole log when it ends.
  { "$fuzz" "${args[@]}" 2>&1 >&3 | tee "$log" >&2; } 3>&1
  rc=${PIPESTATUS[0]}
fi
set -e
((rc == 0)) && exit 0
# A finding: its report again at the very end, where a CI log that keeps
# only the last lines still shows the faulting frames and the input.
{
  echo "fuzz: dsc-fuzz failed (exit $rc); the start of its report:"
  grep -m1 -A40 -E '^==[0-9]+==ERROR|runtime error:|Assertion .* failed|LLVM ERROR|^==[0-9]+== ERROR: libFuzzer' "$log" |
    grep -v -E 'in fuzzer::|in main |libc_start|in _start ' | head -40 || true
  for f in "$build"/fuzz-findings/*; do
    [[ $f -nt $seeds.list ]] || continue
    echo "fuzz: input $f ($(stat -c %s "$f") bytes, sha1 $(sha1sum <"$f" | cut -c1-40))"
    if (($(stat -c %s "$f") <= 12000)); then
      echo "fuzz: base64 of it (base64 -d > crash.onnx to replay):"
      base64 -w0 "$f"
      echo
    fi
  done
} >&2
exit "$rc"
