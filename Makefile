# Thin wrapper over the CMake presets. `make test` and `make demo` install missing Debian
# packages first (cmake/install_deps.sh), so both work on a fresh machine.
JOBS ?= $(shell nproc)
CTEST_ARGS ?=
ISA_LEVELS ?= v2 v3 v4
SOAK_REPEAT ?= 50

.PHONY: deps deps-demo deps-bench print-test-stages test test-gcc test-dev test-asan test-tsan test-isa test-package test-conan \
        soak demo bench format clean

deps:
	@cmake/install_deps.sh

deps-demo:
	@cmake/install_deps.sh --demo

deps-bench:
	@cmake/install_deps.sh --bench

## make test: the whole suite compiled by g++ with -Werror (tests, fuzz replays and the docs' code
## checked with -fsyntax-only; header self-containment, strict-warning headers, include-cost budget,
## CUDA tests), then built and run under ASan+UBSan with clang (plus the fuzzers), TSan on the
## concurrent tests, the instruction-set dependent code for x86-64-v2/v3/v4, the ways of consuming
## the package (README commands, standalone examples, vcpkg port lint) and `conan create`.
## Every stage prints its time; .ci/run prints the table. `make test-dev` builds and runs the whole
## suite in the g++ debug build developers use (not a stage of `make test`).
TEST_STAGES = test-gcc test-asan test-tsan test-isa test-package test-conan

test: deps $(TEST_STAGES)
	@echo "weft: make test passed"

# .ci/run times each stage of `make test` separately, in this order.
print-test-stages:
	@echo deps $(TEST_STAGES)

# Catch2's runner, compiled once for the stages that link tests (asan, tsan, isa) instead of once in each.
CATCH_MAIN = build/catch-main/catch_main.o
CATCH_MAIN_ARG = -DWEFT_CATCH_MAIN_OBJECT=$(CURDIR)/$(CATCH_MAIN)

$(CATCH_MAIN): tests/catch_main.cpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++20 -O0 -c $< -o $@

test-gcc:
	cmake --preset gcc-check
	cmake --build --preset gcc-check -j $(JOBS)
	ctest --preset gcc-check -j $(JOBS) $(CTEST_ARGS)

test-dev:
	cmake --preset dev
	cmake --build --preset dev -j $(JOBS)
	ctest --preset dev -j $(JOBS) $(CTEST_ARGS)

test-asan: $(CATCH_MAIN)
	cmake --preset asan-ubsan $(CATCH_MAIN_ARG)
	cmake --build --preset asan-ubsan -j $(JOBS)
	ctest --preset asan-ubsan -j $(JOBS) $(CTEST_ARGS)

test-tsan: $(CATCH_MAIN)
	cmake --preset tsan $(CATCH_MAIN_ARG)
	cmake --build --preset tsan -j $(JOBS)
	ctest --preset tsan -j $(JOBS) $(CTEST_ARGS)

## make test-isa: quant, coding and the Eigen users compiled (Release, warnings as errors) for each
## x86-64 level whatever this CPU is; their tests run for the levels this CPU can run.
test-isa: $(addprefix test-isa-,$(ISA_LEVELS))

test-isa-%: $(CATCH_MAIN)
	cmake --preset isa-$* $(CATCH_MAIN_ARG)
	cmake --build --preset isa-$* -j $(JOBS)
	@if cmake/host_isa.sh x86-64-$*; then ctest --preset isa-$* -j $(JOBS) $(CTEST_ARGS); \
	 else echo "isa-$*: compiled only"; fi

test-package:
	tests/package/run.sh

test-conan:
	tests/package/conan.sh

## make soak: every test labelled `concurrent` $(SOAK_REPEAT) times in the dev build, then the tests
## labelled `soak` (long churn runs). Not part of `make test`.
soak:
	cmake --preset dev
	cmake --build --preset dev -j $(JOBS)
	ctest --preset dev -L concurrent --repeat until-fail:$(SOAK_REPEAT) -j $(JOBS) $(CTEST_ARGS)
	ctest --test-dir build/dev -L soak -j $(JOBS) --output-on-failure $(CTEST_ARGS)

## make demo: an optimised (Release) build of the worked examples, then runs them; every demo that
## draws a plot draws it (python3-matplotlib); ends with the list of PNG/CSV files written.
demo: deps-demo
	cmake --preset demo
	cmake --build --preset demo -j $(JOBS)
	@examples/run_demos.sh build/demo/examples/bin

## make bench: release build of the benchmarks and their peers; CSV and PNG under build/release/bench-results.
bench: deps-bench
	cmake --preset release
	cmake --build --preset release -j $(JOBS)
	@bench/run_all.sh build/release

format:
	find include tests examples bench -name '*.hpp' -o -name '*.cpp' -o -name '*.cuh' -o -name '*.cu' | xargs clang-format -i

clean:
	rm -rf build
