# netkit-cni. Every target installs what it needs first (scripts/deps.sh is idempotent).
SHELL := /bin/bash
.DEFAULT_GOAL := build

BIN := dist/netkit-cni
SRC := $(shell find src bpf -name '*.ts' -o -name '*.c' -o -name '*.h') scripts/build.mjs scripts/build-bpf.sh package-lock.json

.PHONY: deps build bpf test test-unit test-bpf test-integration typecheck lint demo clean

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

# The whole suite: static checks, unit, eBPF programs against this kernel, then the
# built executable in real namespaces.
test: typecheck lint build
	npx vitest run --project unit --project bpf --project integration

demo: build
	@scripts/demo.sh

clean:
	rm -rf dist
