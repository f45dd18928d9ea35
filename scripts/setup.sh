#!/usr/bin/env bash
#===- setup.sh - install what building and testing dsc needs ----------------===#
#
# Idempotent; meant for a fresh Debian 12 (bookworm) machine, run as root.
# Installs only what is missing: Debian packages (checked with dpkg-query, so
# `apt-get update` runs only when something is missing) and Python modules for
# the `python3` on PATH (checked by importing them). Silent when everything is
# already there; says what it installs otherwise.
#
# LLVM/MLIR 22 come from Debian (bookworm-security), not from apt.llvm.org;
# so do clang 22 and its ASan/UBSan/libFuzzer runtimes (libclang-rt-22-dev),
# which build the sanitizer and fuzzer targets (`make test-sanitize`).
#
#===------------------------------------------------------------------------===#
set -euo pipefail

APT_PACKAGES=(
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata
  libgtest-dev ninja-build cmake g++ python3 python3-pip
  clang-22 libclang-rt-22-dev
)
# Python modules the tests and fixture generators import, as MODULE or
# MODULE=PIP_PACKAGE where the package is named otherwise. tensorboard and
# mlflow are the real readers of the metrics sinks (test/tools/
# read_metrics.py); mlflow-skinny alone gives a working file-store
# MlflowClient (a full `mlflow` install satisfies the import too).
PY_MODULES=(onnx numpy onnxruntime safetensors tensorboard mlflow=mlflow-skinny)

say() { echo "setup: $*" >&2; }
die() { say "error: $*"; exit 1; }

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
  if [[ $(id -u) -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    die "need root to run '$*' (run this script as root)"
  fi
}

#--- 1. Debian packages -------------------------------------------------------#

missing_apt=()
for pkg in "${APT_PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
  [[ $status == ii* ]] || missing_apt+=("$pkg")
done

if ((${#missing_apt[@]})); then
  command -v apt-get >/dev/null 2>&1 ||
    die "missing packages ${missing_apt[*]}, and this is not a Debian system"
  say "installing Debian packages: ${missing_apt[*]}"
  as_root apt-get update -qq
  no_candidate=()
  for pkg in "${missing_apt[@]}"; do
    candidate=$(apt-cache policy "$pkg" 2>/dev/null |
      awk '/Candidate:/ { print $2 }')
    [[ -n $candidate && $candidate != "(none)" ]] || no_candidate+=("$pkg")
  done
  if ((${#no_candidate[@]})); then
    say "error: no installation candidate for: ${no_candidate[*]}"
    say "these come from Debian 12 (bookworm) and bookworm-security;" \
      "check /etc/apt/sources.list(.d) has both, e.g." \
      "'deb http://deb.debian.org/debian-security bookworm-security main'"
    exit 1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq "${missing_apt[@]}" >/dev/null
fi

#--- 2. Python modules for the python3 on PATH --------------------------------#

command -v python3 >/dev/null 2>&1 || die "no python3 on PATH"

missing_py=()   # pip packages to install
missing_mods=() # the modules they must provide
py_imports=()
for entry in "${PY_MODULES[@]}"; do py_imports+=("${entry%%=*}"); done
# One interpreter start when all is well; one per module only to name the
# missing ones.
all_imports=$(IFS=,; echo "${py_imports[*]}")
if ! python3 -c "import $all_imports" >/dev/null 2>&1; then
  for entry in "${PY_MODULES[@]}"; do
    mod=${entry%%=*}
    if ! python3 -c "import $mod" >/dev/null 2>&1; then
      missing_py+=("${entry#*=}")
      missing_mods+=("$mod")
    fi
  done
fi

# Pip packages that install no module of their name, checked by their
# distribution: the cuDNN frontend's C++ headers (runtime/cuda's attention;
# CMake finds its include/ through importlib.metadata).
PIP_DISTS=(nvidia-cudnn-frontend)
for dist in "${PIP_DISTS[@]}"; do
  python3 -c "import importlib.metadata as m; m.distribution('$dist')" \
    >/dev/null 2>&1 || missing_py+=("$dist")
done

if ((${#missing_py[@]})); then
  python=$(python3 -c 'import sys; print(sys.executable)')
  say "installing Python modules for $python: ${missing_py[*]}"
  python3 -m pip --version >/dev/null 2>&1 ||
    die "$python has no pip; install python3-pip or run '$python -m ensurepip'"
  pip_args=(install --quiet --disable-pip-version-check)
  # PEP 668: a distribution's Python refuses pip installs unless told to.
  if python3 - <<'EOF'
import os, sys, sysconfig
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
in_venv = sys.prefix != getattr(sys, "base_prefix", sys.prefix)
sys.exit(0 if os.path.exists(marker) and not in_venv else 1)
EOF
  then
    pip_args+=(--break-system-packages)
  fi
  # Install where the interpreter lives: a root-owned system Python needs
  # root, a user's pyenv or venv does not.
  if [[ -w $(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))') ]]; then
    PIP_ROOT_USER_ACTION=ignore python3 -m pip "${pip_args[@]}" "${missing_py[@]}"
  else
    as_root env PIP_ROOT_USER_ACTION=ignore "$python" -m pip "${pip_args[@]}" \
      "${missing_py[@]}"
  fi
  for mod in "${missing_mods[@]}"; do
    python3 -c "import $mod" >/dev/null 2>&1 ||
      die "installed $mod but 'python3 -c \"import $mod\"' still fails"
  done
fi
