#!/usr/bin/env bash
# Installs DeepSpeed on the GPU machine without network, from the wheels and
# the sdist carried in .whl/ (repo root), into /tmp/site, for
# bench/peers_bf16.py. Run from the repo root there, with .whl carried:
#
#   eval "$(bash bench/install_deepspeed.sh)"     # logs on stderr; stdout is
#                                                 # the export lines
#
# Only what the machine lacks is installed: each wheel is installed only if
# `python3 -c 'import X'` fails there (or X is too old), so the image's own
# torch, numpy, packaging, typing_extensions... are not shadowed by other
# versions. DeepSpeed itself is built from its sdist with DS_BUILD_OPS=0 (no
# ops precompiled; FusedAdam builds itself at first use, a JIT build through
# torch.utils.cpp_extension, which needs nvcc and ninja: both are on the
# image).
#
# What .whl holds (prepared on the dev machine with `pip download`, see
# bench/README.md), and whether the image has it. The image ('cuda', KINDS.md
# "Python packages already there", read 2026-11-17) lists: einops, msgpack,
# ninja, numpy, packaging, psutil, py-cpuinfo, tqdm, typing-extensions,
# setuptools, wheel, nvidia-ml-py, torch 2.11.0; it does NOT list hjson,
# pydantic, pydantic-core, annotated-types or typing-inspection.
#   deepspeed-0.19.8.tar.gz             sdist, built here (needs torch, setuptools)
#   hjson-3.1.0                         missing on the image
#   pydantic-2.12.5 + pydantic_core-2.41.5 (cp312 manylinux2014)
#   annotated_types-0.8.0, typing_inspection-0.4.5
#                                       missing on the image (pydantic's needs)
#   typing_extensions-4.16.0            only if the image's is older than 4.15
#                                       (typing_inspection 0.4.5 needs >=4.15,
#                                       pydantic 2.12.5 >=4.14.1)
#   ninja, py_cpuinfo, msgpack, einops, psutil, tqdm
#                                       on the image; carried only as a
#                                       fallback, installed only if missing
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
whl=${WHL:-$root/.whl}
site=${SITE:-/tmp/site}
py=${PYTHON:-python3}
log() { echo "install_deepspeed: $*" >&2; }

[ -d "$whl" ] || { log "no $whl (carry .whl)"; exit 1; }
mkdir -p "$site"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$site/bin:$PATH"

# One wheel file for a distribution name (as saved: - or _).
wheel() {
  local f
  f=$(ls "$whl"/$1-[0-9]*.whl 2>/dev/null | head -1 || true)
  [ -n "$f" ] || { log "no wheel for $1 in $whl"; exit 1; }
  echo "$f"
}
# has MODULE [MIN_VERSION [DIST]]: the module imports (and its distribution's
# version is at least MIN_VERSION).
has() {
  "$py" - "$@" <<'PY' 2>/dev/null
import importlib, importlib.metadata as md, re, sys
mod = sys.argv[1]
importlib.import_module(mod)
if len(sys.argv) > 2:
    dist = sys.argv[3] if len(sys.argv) > 3 else mod
    v = lambda s: tuple(int(x) for x in re.findall(r"\d+", s)[:3])
    sys.exit(0 if v(md.version(dist)) >= v(sys.argv[2]) else 1)
PY
}

todo=()
need() { # MODULE MIN DIST WHEEL...
  local mod=$1 min=$2 dist=$3; shift 3
  if [ -n "$min" ] && has "$mod" "$min" "$dist"; then
    log "have $dist >= $min"
  elif [ -z "$min" ] && has "$mod"; then
    log "have $dist"
  elif [ $# -eq 0 ]; then
    log "MISSING $dist${min:+ >= $min} and no wheel carried for it: DeepSpeed may not import"
  else
    log "installing $dist from .whl"
    for w in "$@"; do todo+=("$(wheel "$w")"); done
  fi
}

need hjson "" hjson hjson
if ! has pydantic 2.0 pydantic; then
  need typing_extensions 4.15.0 typing_extensions typing_extensions
fi
need pydantic 2.0 pydantic pydantic pydantic_core annotated_types typing_inspection
need msgpack "" msgpack msgpack
need cpuinfo "" py-cpuinfo py_cpuinfo
need einops "" einops einops
need psutil "" psutil psutil
need tqdm "" tqdm tqdm
need packaging 20.0 packaging   # no wheel carried: the image has it
need numpy "" numpy             # likewise
need torch 2.0 torch            # likewise
# ninja: torch's JIT builds run the `ninja` binary from PATH.
ninja_path=""
if command -v ninja >/dev/null 2>&1; then
  log "have ninja binary $(command -v ninja) ($(ninja --version))"
elif d=$("$py" -c 'import ninja, os; print(ninja.BIN_DIR)' 2>/dev/null) && [ -x "$d/ninja" ]; then
  ninja_path=$d
  log "ninja binary from the ninja package: $d"
else
  log "installing ninja from .whl"
  todo+=("$(wheel ninja)")
fi

if [ ${#todo[@]} -gt 0 ]; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$site" "${todo[@]}" >&2
fi
if [ -z "$ninja_path" ] && ! command -v ninja >/dev/null 2>&1; then
  if d=$("$py" -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null) && [ -x "$d/ninja" ]; then
    ninja_path=$d
  fi
fi
[ -n "$ninja_path" ] && export PATH="$ninja_path:$PATH"

sdist=$(ls "$whl"/deepspeed-*.tar.gz | head -1)
log "building $(basename "$sdist") (DS_BUILD_OPS=0, no build isolation)"
DS_BUILD_OPS=0 "$py" -m pip install -q --no-index --no-deps --no-build-isolation \
  --no-cache-dir --upgrade --target "$site" "$sdist" >&2

"$py" - >&2 <<'PY'
import deepspeed, pydantic, hjson
from deepspeed.ops.op_builder import FusedAdamBuilder
print("deepspeed", deepspeed.__version__, "from", deepspeed.__file__)
print("pydantic", pydantic.VERSION)
print("fused_adam compatible (JIT):", FusedAdamBuilder().is_compatible())
PY

echo "export PYTHONPATH=$site\${PYTHONPATH:+:\$PYTHONPATH}"
echo "export PATH=$site/bin${ninja_path:+:$ninja_path}:\$PATH"
echo "export TORCH_CUDA_ARCH_LIST=9.0"
