# Thin wrapper over CMake; `make build` leaves the binary at build/sluice.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CONFIG     ?= config/sluice.example.yaml

.PHONY: build run test unit-test asan-test integration-test bench clean

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/sluice serve --config $(CONFIG)

unit-test:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_REQUIRE_TESTS=ON >/dev/null
	cmake --build $(BUILD) -j $(JOBS)
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --no-tests=error

asan-test:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON -DSLUICE_REQUIRE_TESTS=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target unit_tests
	ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) --no-tests=error

integration-test: build
	cd tests/integration && node --test --test-concurrency=1 *.test.mjs

# The whole suite: unit tests, integration tests against real processes, sanitizer run.
test: unit-test integration-test asan-test

bench: build
	bench/run.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
