# dsc: the everyday entry points. `make test` is what CI runs (.ci/run).
#
#   make setup    install missing system packages and Python modules
#   make build    configure (once) and build everything; JOBS=N for ninja -jN
#   make test     lit tests and gtest units (ninja check-dsc), then
#                 test-sanitize and fuzz-ci
#   make test-sanitize  gtest units and a lit subset under ASan and UBSan
#   make fuzz-ci  the fuzz regressions, then dsc-fuzz for FUZZ_RUNS inputs, seed 1
#   make demo     compile the bundled GPT (ZeRO-3, 4 in-process ranks), train a minute
#   make format   clang-format every tracked C++ file
#   make clean    remove the build directory

BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= 2
# The sanitizer and fuzzer build (docs/reliability.md): our code only, with
# clang 22 (libFuzzer), -O1, assertions on.
SAN_DIR ?= build-sanitize
# CI fuzzes a fixed number of executions (seed 1, one job, about a minute
# and a half here; not the same inputs on every run: scripts/fuzz.sh says
# why); FUZZ_TIME bounds the wall time.
FUZZ_RUNS ?= 5000
FUZZ_TIME ?= 300
CLANG_FORMAT ?= $(shell command -v clang-format-22 || command -v clang-format)

# Targets run in the order given even under `make -j`: ninja parallelizes.
.NOTPARALLEL:
.PHONY: all setup build test test-sanitize fuzz-ci sanitize-configure demo \
        format clean

all: build

# Not a stamp: setup.sh checks cheaply (dpkg-query, imports) every time.
setup:
	@bash scripts/setup.sh

$(BUILD_DIR)/build.ninja:
	cmake -G Ninja -B $(BUILD_DIR) -S . -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: $(BUILD_DIR)/build.ninja
	ninja -C $(BUILD_DIR) -j$(JOBS)

test: setup build
	ninja -C $(BUILD_DIR) -j$(JOBS) check-dsc
	$(MAKE) --no-print-directory test-sanitize fuzz-ci

$(SAN_DIR)/build.ninja:
	cmake -G Ninja -B $(SAN_DIR) -S . -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
	  -DCMAKE_C_FLAGS_DEBUG="-O1 -gline-tables-only" \
	  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" \
	  -DDSC_SANITIZE=ON -DDSC_FUZZ=ON -DDSC_CUDA=OFF

sanitize-configure: $(SAN_DIR)/build.ninja

# Leaks are not checked: LLVM's command-line and pass registries are
# allocated once and never freed, by design.
SAN_ENV = ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-22/bin/llvm-symbolizer

test-sanitize: setup $(SAN_DIR)/build.ninja
	$(SAN_ENV) ninja -C $(SAN_DIR) -j$(JOBS) check-dsc-sanitize

# A fresh corpus each time, so what CI finds depends only on the commit.
fuzz-ci: setup $(SAN_DIR)/build.ninja
	ninja -C $(SAN_DIR) -j$(JOBS) dsc-fuzz
	rm -rf $(SAN_DIR)/fuzz-corpus-ci
	bash scripts/fuzz.sh -r $(FUZZ_RUNS) -t $(FUZZ_TIME) -j 1 -s 1 -b $(SAN_DIR) \
	  $(SAN_DIR)/fuzz-corpus-ci

demo: setup build
	bash scripts/demo.sh

format:
	@test -n "$(CLANG_FORMAT)" || { echo "format: clang-format not found" >&2; exit 1; }
	git ls-files -z '*.c' '*.cc' '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh' | \
	  xargs -0 -r $(CLANG_FORMAT) -i

clean:
	rm -rf $(BUILD_DIR) $(SAN_DIR)
