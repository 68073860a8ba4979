# Thin wrapper over CMake. `make run` builds and starts the broker on
# 127.0.0.1; `make test` builds with ASan/UBSan (plus a ThreadSanitizer build of
# the concurrent code) and runs every test. Both install missing Debian packages.
JOBS ?= $(shell nproc)
MAKEFLAGS += --no-print-directory
CMAKE ?= cmake
TEST_DIR := build/test
REL_DIR := build/release
FUZZ_DIR := build/fuzz
# Seconds each fuzz target runs in `make fuzz` (make fuzz FUZZ_SECONDS=600).
FUZZ_SECONDS ?= 30
DEB_DIR := build/deb
# make install: where (PREFIX) and under which staging root (DESTDIR).
PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: all deps build test run run-cluster fuzz format clean install deb

all: build

deps:
	@scripts/deps.sh

build: deps
	@$(CMAKE) -S . -B $(REL_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@$(CMAKE) --build $(REL_DIR) -j $(JOBS)

# The release build is compiled too, so optimiser-only warnings fail the test run.
test: deps build
	@$(CMAKE) -S . -B $(TEST_DIR) -DCMAKE_BUILD_TYPE=Debug -DFX_SANITIZE=ON -DFX_TSAN=ON >/dev/null
	@$(CMAKE) --build $(TEST_DIR) -j $(JOBS)
	@cd $(TEST_DIR) && ctest -j $(JOBS) --output-on-failure -LE fuzz
	@cd $(REL_DIR) && ctest -j $(JOBS) --output-on-failure -L pkg

run: build
	@scripts/run.sh $(REL_DIR) $(ARGS)

# A local etcd and three brokers in a temporary directory (scripts/cluster.sh
# run; CLUSTER_NODES=N for another count), the commands to try, Ctrl-C stops all.
run-cluster: build
	@FELIX_BROKER=$(REL_DIR)/felix-broker scripts/cluster.sh run $(CLUSTER_NODES)

# libfelix (.so, .a, headers, felix.pc), the binaries, man pages, the systemd
# unit, the example configuration and the Python package, under
# $(DESTDIR)$(PREFIX) (packaging/install.cmake).
install: build
	@DESTDIR="$(DESTDIR)" $(CMAKE) --install $(REL_DIR) --prefix "$(PREFIX)"

# Debian packages from a /usr install tree (packaging/mkdeb.sh) into build/deb/.
deb: build
	@rm -rf $(DEB_DIR)
	@DESTDIR="$(CURDIR)/$(DEB_DIR)/root" $(CMAKE) --install $(REL_DIR) --prefix /usr --strip >/dev/null
	@packaging/mkdeb.sh $(DEB_DIR)/root $(DEB_DIR)

fuzz:
	@scripts/deps.sh --fuzz
	@$(CMAKE) -S . -B $(FUZZ_DIR) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DFX_FUZZ=ON -DFX_WERROR=OFF -DFX_FUZZ_SECONDS=$(FUZZ_SECONDS) >/dev/null
	@$(CMAKE) --build $(FUZZ_DIR) -j $(JOBS)
	@cd $(FUZZ_DIR) && ctest --output-on-failure -L fuzz

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build
