# Thin wrapper over scripts/bootstrap, CMake and CTest: the two commands of
# the README (make run, make test) and a few conveniences.
#   make run     set up the run set of packages, build the library and the
#                programs the main job runs (no tests, no benchmarks, no CUDA
#                unless RUN_CUDA=AUTO|ON), run it (pxctl run examples/quickstart.yaml)
#   make test    set up, build and run the whole test suite (the sanitizer
#                build compiles beside it at idle priority), then the
#                sanitizer build (AddressSanitizer + UBSan; the fuzz build
#                compiles beside it) runs every test
#                but the slow integration ones (ctest label `slow`,
#                docs/testing.md), then fuzz every libFuzzer harness for
#                FUZZ_SECONDS each (clang build); each phase's wall time is
#                printed as it ends and in a table at the end
#   make bench   set up with the benchmark peers (PyTorch, Open MPI), run benchmarks
#   make install PREFIX=/usr/local
BUILD_DIR ?= build
ASAN_DIR ?= build-asan
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 30
JOBS ?= 2
PREFIX ?= /usr/local
CMAKE_ARGS ?=
# What the sanitizer pass leaves out (ctest -LE): the slow integration tests
# and the zoo (torchvision networks: onnx_import runs the importer under it),
# whose code the others run under the sanitizers (tests/CMakeLists.txt).
ASAN_CTEST_ARGS ?= -LE 'slow|zoo'
# Each phase's time goes to this file (scripts/phase); make test prints it.
export PX_PHASE_LOG ?= $(abspath $(BUILD_DIR))/phases.tsv
PHASE = scripts/phase
# CMake's generator is its default (Unix Makefiles) unless CMAKE_GENERATOR
# says otherwise in the environment (CMAKE_GENERATOR=Ninja make test: then
# the build phase also says how long nvcc ran, from .ninja_log).
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

.PHONY: all setup setup-run build build-run run test test-normal test-asan test-fuzz bench install clean \
        ctest-normal asan-build ctest-asan fuzz-build fuzz-run

all: build

setup:
	$(PHASE) setup scripts/bootstrap test

setup-run:
	scripts/bootstrap run

# The tests and benchmarks are configured in (and out, for make run)
# explicitly: the build directory's cache keeps whatever the last command set.
build: setup
	$(PHASE) configure cmake -S . -B $(BUILD_DIR) \
	  -DPX_WERROR=$(WERROR) -DPX_WITH_CUDA=$(PX_CUDA) \
	  -DPX_BUILD_TESTS=ON -DPX_BUILD_BENCH=ON $(CMAKE_ARGS)
	$(PHASE) build cmake --build $(BUILD_DIR) -j$(JOBS)
	@$(PHASE) --nvcc $(BUILD_DIR)

build-run: setup-run
	cmake -S . -B $(BUILD_DIR) -DPX_WERROR=$(WERROR) -DPX_WITH_CUDA=$(RUN_CUDA) \
	  -DPX_BUILD_TESTS=OFF -DPX_BUILD_BENCH=OFF $(CMAKE_ARGS)
	cmake --build $(BUILD_DIR) -j$(JOBS) --target $(RUN_TARGETS)

run: build-run
	$(BUILD_DIR)/cli/pxctl run examples/quickstart.yaml

# The phases one after the other, stopping at the first failure; the table
# of their times is printed either way.
# make test: the normal build; then its tests while the sanitizer build
# compiles beside them at idle priority (SCHED_IDLE, else nice 19: it takes
# only the CPU the tests leave, while a test waits on its daemons or its
# ranks on each other); then the sanitizer tests while the fuzz build
# compiles beside them the same way; then the fuzzing. The side builds run
# one after the other in one background job ($(SIDE_LOG) has their output,
# printed if they fail); what is left of each when its tests end is the
# phase asan-build-rest or fuzz-build-rest.
SIDE_LOG = $(abspath $(BUILD_DIR))/side-builds.log
SIDE_DONE = $(abspath $(BUILD_DIR))/side-asan.done
test:
	@rm -f $(PX_PHASE_LOG) $(SIDE_DONE)
	@$(MAKE) --no-print-directory build || { $(PHASE) --summary $(PX_PHASE_LOG); exit 1; }; \
	  idle="chrt --idle 0"; $$idle true 2>/dev/null || idle="nice -n 19"; \
	  { PX_PHASE_BESIDE=1 $$idle $(MAKE) --no-print-directory asan-build && touch $(SIDE_DONE) && \
	    PX_PHASE_BESIDE=1 $$idle $(MAKE) --no-print-directory fuzz-build; } >$(SIDE_LOG) 2>&1 & \
	  side=$$!; $(MAKE) --no-print-directory ctest-normal; rc=$$?; \
	  t0=$$(date +%s); while [ ! -e $(SIDE_DONE) ] && kill -0 $$side 2>/dev/null; do sleep 1; done; \
	  [ -e $(SIDE_DONE) ]; $(PHASE) --record asan-build-rest $$(($$(date +%s) - t0)) $$? || \
	    { rc=1; tail -n 60 $(SIDE_LOG); }; \
	  [ $$rc -eq 0 ] && $(MAKE) --no-print-directory ctest-asan; rc=$$?; \
	  t0=$$(date +%s); wait $$side; src=$$?; \
	  [ $$rc -eq 0 ] && { $(PHASE) --record fuzz-build-rest $$(($$(date +%s) - t0)) $$src || \
	    { rc=1; tail -n 60 $(SIDE_LOG); }; }; \
	  [ $$rc -eq 0 ] && $(MAKE) --no-print-directory fuzz-run; rc=$$?; \
	  $(PHASE) --summary $(PX_PHASE_LOG); exit $$rc

# ctest starts the longest tests first (their COST in tests/CMakeLists.txt,
# then the times it measured in this build directory) so that -j2 ends
# with no long test alone.
test-normal: build ctest-normal
ctest-normal:
	cd $(BUILD_DIR) && $(CURDIR)/$(PHASE) ctest ctest --output-on-failure -j$(JOBS)

# The sanitizer build leaves CUDA out: the CUDA runtime and ASan do not mix,
# and no GPU code runs on machines without a GPU anyway.
test-asan: setup asan-build ctest-asan
asan-build:
	$(PHASE) asan-configure cmake -S . -B $(ASAN_DIR) \
	  -DPX_SANITIZE=ON -DPX_WITH_CUDA=OFF -DPX_BUILD_BENCH=OFF \
	  -DPX_WERROR=$(WERROR) $(CMAKE_ARGS)
	$(PHASE) asan-build cmake --build $(ASAN_DIR) -j$(JOBS)
ctest-asan:
	cd $(ASAN_DIR) && $(CURDIR)/$(PHASE) asan-ctest ctest --output-on-failure -j$(JOBS) $(ASAN_CTEST_ARGS)

# libFuzzer (clang) over the job-spec parser, the safetensors, IDX and CIFAR
# readers and the coordinator's request decoding; a crash fails the run.
# The harnesses run JOBS at a time, each for FUZZ_SECONDS.
test-fuzz: setup fuzz-build fuzz-run
fuzz-build:
	$(PHASE) fuzz-configure cmake -S . -B $(FUZZ_DIR) \
	  -DCMAKE_C_COMPILER=clang -DPX_FUZZ=ON -DPX_WITH_CUDA=OFF \
	  -DPX_BUILD_BENCH=OFF -DPX_BUILD_TESTS=OFF $(CMAKE_ARGS)
	$(PHASE) fuzz-build cmake --build $(FUZZ_DIR) -j$(JOBS) --target px_fuzzers
fuzz-run:
	$(PHASE) fuzz tests/fuzz/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(JOBS)

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
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(FUZZ_DIR) $(PX_PHASE_LOG)
