# inferq: `make setup` fetches onnxruntime, `make test` runs every test,
# `make run` starts the main job on the embedded defaults.

SHELL := /bin/bash
.DEFAULT_GOAL := build

GO      ?= go
BIN     ?= bin/inferq
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# go-nvml's headers mark NVML calls deprecated; keep cgo's warnings quiet.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

# onnxruntime's CPU shared library comes from the npm package onnxruntime-node.
ORT_NPM_VERSION := 1.30.0
ORT_NPM_PATH    := package/bin/napi-v6/linux/x64/libonnxruntime.so.1
ORT_SHA256      := ffb75a925ba05e47b235bb66e3e3911714a80b328a9c9425539feb204aa32a23
ORT_LIB         := lib/libonnxruntime.so.1

MODELS_DIR ?= data/models

.PHONY: setup build test lint run examples clean

## setup: fetch onnxruntime's shared library into lib/ (skipped when present and matching)
setup:
	@set -euo pipefail; \
	if [ -f "$(ORT_LIB)" ] && echo "$(ORT_SHA256)  $(ORT_LIB)" | sha256sum -c --status; then \
		echo "setup: $(ORT_LIB) is present and matches its sha256"; exit 0; \
	fi; \
	if [ -f "$(ORT_LIB)" ]; then echo "setup: $(ORT_LIB) does not match sha256 $(ORT_SHA256); fetching it again"; fi; \
	if [ "$$(uname -s)/$$(uname -m)" != "Linux/x86_64" ]; then \
		echo "setup: onnxruntime-node ships the library used here for Linux x86_64 only (this is $$(uname -s)/$$(uname -m)); set INFERQ_ORT_LIB or --ort-lib to an onnxruntime $(ORT_NPM_VERSION) library" >&2; exit 1; \
	fi; \
	command -v npm >/dev/null || { echo "setup: npm not found; install Node.js and npm (apt-get install npm) so setup can fetch onnxruntime-node@$(ORT_NPM_VERSION)" >&2; exit 1; }; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	echo "setup: fetching onnxruntime-node@$(ORT_NPM_VERSION) from the npm registry (about 110 MB, no install scripts)"; \
	if ! (cd "$$tmp" && npm pack --ignore-scripts --silent "onnxruntime-node@$(ORT_NPM_VERSION)" >/dev/null); then \
		echo "setup: 'npm pack onnxruntime-node@$(ORT_NPM_VERSION)' failed: is the npm registry reachable (npm config get registry)?" >&2; exit 1; \
	fi; \
	if ! tar -xzf "$$tmp/onnxruntime-node-$(ORT_NPM_VERSION).tgz" -C "$$tmp" "$(ORT_NPM_PATH)"; then \
		echo "setup: the package has no $(ORT_NPM_PATH)" >&2; exit 1; \
	fi; \
	got=$$(sha256sum "$$tmp/$(ORT_NPM_PATH)" | cut -d' ' -f1); \
	if [ "$$got" != "$(ORT_SHA256)" ]; then \
		echo "setup: sha256 of $(ORT_NPM_PATH) is $$got, want $(ORT_SHA256); refusing to install it" >&2; exit 1; \
	fi; \
	mkdir -p lib; \
	install -m 0644 "$$tmp/$(ORT_NPM_PATH)" "$(ORT_LIB).tmp" && mv "$(ORT_LIB).tmp" "$(ORT_LIB)"; \
	echo "setup: installed $(ORT_LIB) (onnxruntime $(ORT_NPM_VERSION), CPU)"

## build: build bin/inferq
build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/inferq

## test: fetch onnxruntime when needed, then run every test with the race detector
test: setup
	$(GO) test -race -timeout 12m ./...

## lint: gofmt and go vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## examples: write the example models (mlp, multitype) into $(MODELS_DIR)
examples: build
	$(BIN) models example $(MODELS_DIR)

## run: the main job on the embedded defaults
run: setup examples
	@echo "run: example models in $(MODELS_DIR); starting the embedded broker on 127.0.0.1:50000 (Ctrl-C stops it)"
	$(BIN) broker --listen 127.0.0.1:50000

clean:
	rm -rf bin $(MODELS_DIR)
