# Thin wrapper over the CMake presets. `make test` and `make demo` install missing Debian
# packages first (cmake/install_deps.sh), so both work on a fresh machine.
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: deps deps-bench test test-dev test-asan test-tsan test-package test-conan demo bench format clean

deps:
	@cmake/install_deps.sh

deps-bench:
	@cmake/install_deps.sh --bench

## make test: the whole Catch2 suite (dev build), then under ASan+UBSan, then TSan on the
## concurrent tests, then the three ways of consuming the package and `conan create`.
test: deps test-dev test-asan test-tsan test-package test-conan
	@echo "weft: make test passed"

test-dev:
	cmake --preset dev
	cmake --build --preset dev -j $(JOBS)
	ctest --preset dev -j $(JOBS) $(CTEST_ARGS)

test-asan:
	cmake --preset asan-ubsan
	cmake --build --preset asan-ubsan -j $(JOBS)
	ctest --preset asan-ubsan -j $(JOBS) $(CTEST_ARGS)

test-tsan:
	cmake --preset tsan
	cmake --build --preset tsan -j $(JOBS)
	ctest --preset tsan -j $(JOBS) $(CTEST_ARGS)

test-package:
	tests/package/run.sh

test-conan:
	tests/package/conan.sh

## make demo: builds and runs the worked examples.
demo: deps
	cmake --preset dev -DWEFT_BUILD_TESTS=OFF -B build/demo
	cmake --build build/demo -j $(JOBS)
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
