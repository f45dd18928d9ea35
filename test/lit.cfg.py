# -*- Python -*-
# lit configuration of the dsc tests; build-tree paths come from
# lit.site.cfg.py, which CMake writes into build/test.

import os
import shutil
import subprocess

import lit.formats

config.name = "dsc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.dsc_obj_root, "test")

# Inputs of tests, not tests: models, the ONNX backend runner, gtest sources.
config.excludes = [
    "CMakeLists.txt",
    "Inputs",
    "fixtures",
    "lit.cfg.py",
    "lit.site.cfg.py",
    "onnx_backend",
    "unit",
]

# Our tools first, then FileCheck, not and split-file of LLVM 22.
config.environment["PATH"] = os.pathsep.join(
    [config.dsc_tools_dir, config.llvm_tools_dir, config.environment["PATH"]]
)
# A sanitizer build (DSC_SANITIZE) is told how to report through these;
# lit passes on only what it is told to.
for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "ASAN_SYMBOLIZER_PATH"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
for tool in ("FileCheck", "not", "split-file"):
    if not os.path.exists(os.path.join(config.llvm_tools_dir, tool)):
        lit_config.fatal(f"{tool} not found in {config.llvm_tools_dir}")

# Longest names first: '%dsc' must not eat the start of '%dsc-opt'.
config.substitutions.extend(
    [
        ("%dsc-opt", os.path.join(config.dsc_tools_dir, "dsc-opt")),
        ("%dsrun", os.path.join(config.dsc_tools_dir, "dsrun")),
        ("%dsc", os.path.join(config.dsc_tools_dir, "dsc")),
        ("%python", config.python_executable),
        (
            "%gen_models",
            os.path.join(config.dsc_src_root, "test", "import", "gen_test_models.py"),
        ),
        ("%fixtures", os.path.join(config.dsc_src_root, "test", "fixtures")),
        ("%testdata", config.onnx_testdata_dir),
    ]
)

# GPU tests say `REQUIRES: gpu`; on CPU-only CI lit reports them UNSUPPORTED.
def _have_gpu():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        return (
            subprocess.run(
                [smi, "-L"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=30,
            ).returncode
            == 0
        )
    except (OSError, subprocess.SubprocessError):
        return False


# `REQUIRES: cuda-build`: dsc was built with its CUDA runtime (nvcc found),
# so --target cuda compiles; `REQUIRES: gpu` also needs a GPU to run on.
if getattr(config, "dsc_have_cuda", False):
    config.available_features.add("cuda-build")
if _have_gpu():
    config.available_features.add("gpu")
else:
    lit_config.note(
        "no GPU visible: tests labelled 'gpu' are reported UNSUPPORTED; "
        "scripts/gpu-check.sh runs the GPU checks on a machine with one"
    )
