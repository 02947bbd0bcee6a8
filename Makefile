# netkit-cni. Every target installs what it needs first (scripts/deps.sh is idempotent).
SHELL := /bin/bash
.DEFAULT_GOAL := build

BIN := dist/netkit-cni
SRC := $(shell find src -name '*.ts') scripts/build.mjs package-lock.json

.PHONY: deps build test test-unit test-integration typecheck lint demo clean

deps:
	@scripts/deps.sh

$(BIN): $(SRC) | deps
	node scripts/build.mjs

build: deps $(BIN)

typecheck: deps
	npx tsc --noEmit

lint: deps
	npx biome check src test scripts vitest.config.ts

test-unit: deps
	npx vitest run --project unit

test-integration: build
	npx vitest run --project integration

# The whole suite: static checks, then unit, then real-namespace integration tests.
test: typecheck lint build
	npx vitest run --project unit --project integration

demo: build
	@scripts/demo.sh

clean:
	rm -rf dist
