# dsc: the everyday entry points. `make test` is what CI runs (.ci/run).
#
#   make setup    install missing system packages and Python modules
#   make build    configure (once) and build everything; JOBS=N for ninja -jN
#   make test     lit tests and gtest units (ninja check-dsc)
#   make demo     compile the bundled GPT (ZeRO-3, 4 in-process ranks), train a minute
#   make format   clang-format every tracked C++ file
#   make clean    remove the build directory

BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= 2
CLANG_FORMAT ?= $(shell command -v clang-format-22 || command -v clang-format)

# Targets run in the order given even under `make -j`: ninja parallelizes.
.NOTPARALLEL:
.PHONY: all setup build test demo format clean

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

demo: setup build
	bash scripts/demo.sh

format:
	@test -n "$(CLANG_FORMAT)" || { echo "format: clang-format not found" >&2; exit 1; }
	git ls-files -z '*.c' '*.cc' '*.cpp' '*.h' '*.hpp' '*.cu' '*.cuh' | \
	  xargs -0 -r $(CLANG_FORMAT) -i

clean:
	rm -rf $(BUILD_DIR)
