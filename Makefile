# Thin wrapper over CMake; `make build` leaves the binary at build/sluice.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CONFIG     ?= config/sluice.example.yaml

FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 600

# Each build ends with a line saying how many compilations came from ccache (docs/building.md).
CACHE_BEGIN = @scripts/ccache-stats.sh begin
CACHE_END   = @scripts/ccache-stats.sh end

.PHONY: build run test unit-test asan-test integration-test fuzz-smoke fuzz bench bench-limits bench-routing bench-records bench-cluster clean

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	$(CACHE_BEGIN) $(BUILD)
	cmake --build $(BUILD) -j $(JOBS)
	$(CACHE_END) $(BUILD)

run: build
	$(BUILD)/sluice serve --config $(CONFIG)

unit-test:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_REQUIRE_TESTS=ON >/dev/null
	$(CACHE_BEGIN) $(BUILD)
	cmake --build $(BUILD) -j $(JOBS)
	$(CACHE_END) $(BUILD)
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --no-tests=error

# The integration suites the sanitizer build repeats: all but the browser's (the console's
# files are static; the admin paths it drives are in admin_live and key_store) and the
# fleet's (its instances run the code paths the other suites drive, five at a time: the
# slower sanitizer build would mostly measure the machine) and the manifests' (k8s).
ASAN_SUITES ?= $(notdir $(filter-out tests/integration/console.test.mjs tests/integration/fleet.test.mjs tests/integration/k8s.test.mjs,$(wildcard tests/integration/*.test.mjs)))

# Unit tests, then the integration suite against the gateway and simulator, all built
# with ASan and UBSan (a sanitizer report ends the process, which fails the tests).
asan-test:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON -DSLUICE_REQUIRE_TESTS=ON >/dev/null
	$(CACHE_BEGIN) $(ASAN_BUILD)
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target unit_tests sluice kafka-mock
	$(CACHE_END) $(ASAN_BUILD)
	ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) --no-tests=error
	cd tests/integration && SLUICE_BIN=$(abspath $(ASAN_BUILD))/sluice ASAN_OPTIONS=detect_leaks=0 \
		node --test --test-concurrency=1 $(ASAN_SUITES)

integration-test: build
	cd tests/integration && node --test --test-concurrency=1 *.test.mjs

# libFuzzer targets (clang; docs/fuzzing.md): each runs 20 s on a temp copy of the seed
# corpus, two at once; any crash, leak, timeout or sanitizer report fails.
fuzz-smoke:
	FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=20 scripts/fuzz.sh smoke

# The long run: FUZZ_SECONDS per target; the grown corpus stays in $(FUZZ_BUILD)/corpus.
fuzz:
	FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh long

# The whole suite: unit tests, integration tests against real processes, sanitizer run,
# then the fuzz targets' smoke run.
test: unit-test integration-test asan-test fuzz-smoke

bench: build
	bench/run.sh

bench-limits: build
	bench/limits.sh

bench-routing: build
	bench/routing.sh

bench-cluster: build
	bench/cluster.sh

# Needs the test tools too (build/kafka-mock): configured like unit-test.
bench-records:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_REQUIRE_TESTS=ON >/dev/null
	$(CACHE_BEGIN) $(BUILD)
	cmake --build $(BUILD) -j $(JOBS) --target sluice kafka-mock
	$(CACHE_END) $(BUILD)
	bench/records.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
