# Thin wrapper over scripts/bootstrap, CMake and CTest: the two commands of
# the README (make run, make test) and a few conveniences.
#   make run     set up the run set of packages, build the library and the
#                programs the main job runs (no tests, no benchmarks, no CUDA
#                unless RUN_CUDA=AUTO|ON), run it (pxctl run examples/quickstart.yaml)
#   make test    set up, build and run the whole test suite, then again in
#                the sanitizer build (AddressSanitizer + UBSan), then fuzz
#                every libFuzzer harness for FUZZ_SECONDS each (clang build)
#   make bench   set up with the benchmark peers (PyTorch, Open MPI), run benchmarks
#   make install PREFIX=/usr/local
BUILD_DIR ?= build
ASAN_DIR ?= build-asan
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 30
JOBS ?= 2
PREFIX ?= /usr/local
CMAKE_ARGS ?=
# The CUDA backend: PX_CUDA for the full build (make build/test/install/bench),
# RUN_CUDA for make run (the main job trains on CPU workers: off unless asked).
PX_CUDA ?= AUTO
RUN_CUDA ?= OFF
# What make run builds: the programs of the main job and the library (pxtrain
# writes the compact model at the end of pxctl run).
RUN_TARGETS = pxctl pxcoordd pxagent pxworker pxtrain
# CI (CI=true) treats compiler warnings as errors.
ifeq ($(CI),true)
WERROR ?= ON
else
WERROR ?= OFF
endif

.PHONY: all setup setup-run build build-run run test test-asan test-fuzz bench install clean

all: build

setup:
	scripts/bootstrap test

setup-run:
	scripts/bootstrap run

# The tests and benchmarks are configured in (and out, for make run)
# explicitly: the build directory's cache keeps whatever the last command set.
build: setup
	cmake -S . -B $(BUILD_DIR) -DPX_WERROR=$(WERROR) -DPX_WITH_CUDA=$(PX_CUDA) \
	  -DPX_BUILD_TESTS=ON -DPX_BUILD_BENCH=ON $(CMAKE_ARGS)
	cmake --build $(BUILD_DIR) -j$(JOBS)

build-run: setup-run
	cmake -S . -B $(BUILD_DIR) -DPX_WERROR=$(WERROR) -DPX_WITH_CUDA=$(RUN_CUDA) \
	  -DPX_BUILD_TESTS=OFF -DPX_BUILD_BENCH=OFF $(CMAKE_ARGS)
	cmake --build $(BUILD_DIR) -j$(JOBS) --target $(RUN_TARGETS)

run: build-run
	$(BUILD_DIR)/cli/pxctl run examples/quickstart.yaml

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS)
	$(MAKE) --no-print-directory test-asan
	$(MAKE) --no-print-directory test-fuzz

# The sanitizer build leaves CUDA out: the CUDA runtime and ASan do not mix,
# and no GPU code runs on machines without a GPU anyway.
test-asan: setup
	cmake -S . -B $(ASAN_DIR) -DPX_SANITIZE=ON -DPX_WITH_CUDA=OFF -DPX_BUILD_BENCH=OFF \
	  -DPX_WERROR=$(WERROR) $(CMAKE_ARGS)
	cmake --build $(ASAN_DIR) -j$(JOBS)
	cd $(ASAN_DIR) && ctest --output-on-failure -j$(JOBS)

# libFuzzer (clang) over the job-spec parser, the safetensors, IDX and CIFAR
# readers and the coordinator's request decoding; a crash fails the run.
test-fuzz: setup
	cmake -S . -B $(FUZZ_DIR) -DCMAKE_C_COMPILER=clang -DPX_FUZZ=ON -DPX_WITH_CUDA=OFF \
	  -DPX_BUILD_BENCH=OFF -DPX_BUILD_TESTS=OFF $(CMAKE_ARGS)
	cmake --build $(FUZZ_DIR) -j$(JOBS) --target px_fuzzers
	tests/fuzz/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS)

bench:
	scripts/bootstrap bench
	cmake -S . -B $(BUILD_DIR) -DPX_WERROR=$(WERROR) -DPX_WITH_CUDA=$(PX_CUDA) \
	  -DPX_BUILD_TESTS=ON -DPX_BUILD_BENCH=ON $(CMAKE_ARGS)
	cmake --build $(BUILD_DIR) -j$(JOBS)
	$(BUILD_DIR)/bench/px_bench_prune
	bench/train/run.sh $(BUILD_DIR)

install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(FUZZ_DIR)
