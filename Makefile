# netkit-cni. Every target installs what it needs first (scripts/deps.sh is idempotent).
SHELL := /bin/bash
.DEFAULT_GOAL := build

BIN := dist/netkit-cni
SRC := $(shell find src bpf -name '*.ts' -o -name '*.c' -o -name '*.h') scripts/build.mjs scripts/build-bpf.sh package-lock.json

.PHONY: deps build bpf test test-unit test-bpf test-integration test-vm typecheck lint demo demo-vm clean

deps:
	@scripts/deps.sh

$(BIN): $(SRC) | deps
	node scripts/build.mjs

build: deps $(BIN)

# The eBPF objects alone (clang -target bpf, -Wall -Werror); build embeds them too.
bpf: deps
	scripts/build-bpf.sh

typecheck: deps
	npx tsc --noEmit

lint: deps
	npx biome check src test scripts vitest.config.ts

test-unit: deps
	npx vitest run --project unit

test-bpf: deps
	npx vitest run --project bpf

test-integration: build
	npx vitest run --project integration

# The netkit suite: inside a User-Mode Linux 6.12 guest (test/vm; the first run builds
# its kernel, ~5-10 min, then it is cached), the integration tests again with netkit
# pods, plus the netkit-only tests.
test-vm: build
	test/vm/run.sh --timeout 1800 --env NETKIT_CNI_TEST_DATAPATH=netkit -- \
	  npx vitest run --project integration --project netkit

# The whole suite: static checks, unit, eBPF programs against this kernel, the built
# executable in real namespaces, then the same with netkit in the VM.
test: typecheck lint build
	npx vitest run --project unit --project bpf --project integration
	$(MAKE) --no-print-directory test-vm

demo: build
	@scripts/demo.sh

# The demo on a kernel with netkit: inside the UML guest.
demo-vm: build
	@test/vm/run.sh --timeout 600 -- scripts/demo.sh

clean:
	rm -rf dist
