# inferq: `make setup` fetches onnxruntime, `make test` runs every test,
# `make chaos` runs the chaos harness in full, `make run` starts the main job
# on the embedded defaults.

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

# onnxruntime 1.29.0 for CUDA 13 (the version onnxruntime_go v1.35.0's headers
# match) comes from two npm packages of onnxruntime-unity: the core library
# and the shared-provider bridge from com.github.asus4.onnxruntime, the CUDA
# execution provider from com.github.asus4.onnxruntime.linux-x64-gpu. Each
# line: package, path in its tarball, sha256 (computed here with sha256sum).
ORT_GPU_NPM_VERSION := 0.4.9
ORT_GPU_DIR         := lib/gpu
ORT_GPU_FILES := \
	com.github.asus4.onnxruntime:package/Plugins/Linux/x64/libonnxruntime.so:5715f06d8992ca8eeeddcce43df3a7d38f97d537052126f558e912cb312460ca \
	com.github.asus4.onnxruntime:package/Plugins/Linux/x64/libonnxruntime_providers_shared.so:086ec1d5388f64153d9c63470d126693db9a182c8ce236d3a1119068471b8a0d \
	com.github.asus4.onnxruntime.linux-x64-gpu:package/Plugins/Linux/x64/libonnxruntime_providers_cuda.so:56cf3254b118ad837ccc4ed8f6d1b23504bbf7ef91b34cbc0b289cb7f10b3037

MODELS_DIR ?= data/models

.PHONY: setup setup-gpu build test test-real chaos nocgo lint run examples clean

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

## setup-gpu: fetch onnxruntime's CUDA 13 build into lib/gpu/ (use it with --ort-lib lib/gpu; needs CUDA 13 + cuDNN 9 on the host)
setup-gpu:
	@set -euo pipefail; \
	missing=""; \
	for f in $(ORT_GPU_FILES); do \
		IFS=: read -r pkg path sum <<<"$$f"; dst="$(ORT_GPU_DIR)/$$(basename "$$path")"; \
		if [ -f "$$dst" ] && echo "$$sum  $$dst" | sha256sum -c --status; then continue; fi; \
		if [ -f "$$dst" ]; then echo "setup-gpu: $$dst does not match sha256 $$sum; fetching it again"; fi; \
		missing="$$missing $$f"; \
	done; \
	if [ -z "$$missing" ]; then echo "setup-gpu: $(ORT_GPU_DIR) holds the three onnxruntime GPU libraries and they match their sha256"; exit 0; fi; \
	if [ "$$(uname -s)/$$(uname -m)" != "Linux/x86_64" ]; then \
		echo "setup-gpu: these packages ship the CUDA build for Linux x86_64 only (this is $$(uname -s)/$$(uname -m))" >&2; exit 1; \
	fi; \
	command -v npm >/dev/null || { echo "setup-gpu: npm not found; install Node.js and npm (apt-get install npm)" >&2; exit 1; }; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	mkdir -p "$(ORT_GPU_DIR)"; \
	for f in $$missing; do \
		IFS=: read -r pkg path sum <<<"$$f"; dst="$(ORT_GPU_DIR)/$$(basename "$$path")"; tgz="$$tmp/$$pkg-$(ORT_GPU_NPM_VERSION).tgz"; \
		if [ ! -f "$$tgz" ]; then \
			echo "setup-gpu: fetching $$pkg@$(ORT_GPU_NPM_VERSION) from the npm registry (150-180 MB, no install scripts)"; \
			if ! (cd "$$tmp" && npm pack --ignore-scripts --silent "$$pkg@$(ORT_GPU_NPM_VERSION)" >/dev/null); then \
				echo "setup-gpu: 'npm pack $$pkg@$(ORT_GPU_NPM_VERSION)' failed: is the npm registry reachable (npm config get registry)?" >&2; exit 1; \
			fi; \
		fi; \
		if ! tar -xzf "$$tgz" -C "$$tmp" "$$path"; then echo "setup-gpu: $$pkg has no $$path" >&2; exit 1; fi; \
		got=$$(sha256sum "$$tmp/$$path" | cut -d' ' -f1); \
		if [ "$$got" != "$$sum" ]; then \
			echo "setup-gpu: sha256 of $$path in $$pkg is $$got, want $$sum; refusing to install it" >&2; exit 1; \
		fi; \
		install -m 0755 "$$tmp/$$path" "$$dst.tmp" && mv "$$dst.tmp" "$$dst"; \
		rm -f "$$tmp/$$path"; \
		echo "setup-gpu: installed $$dst"; \
	done; \
	echo "setup-gpu: onnxruntime 1.29.0 (CUDA 13) is in $(ORT_GPU_DIR): run with --ort-lib $(ORT_GPU_DIR); it needs CUDA 13 and cuDNN 9 libraries on the host"

## build: build bin/inferq
build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/inferq

# Tests that take the broker away under a live queue stream poll or send hit a data
# race inside kubemq-go v1.9.0 (see skipSDKRace): they skip under -race and
# run here once more without it.
SDK_RACE_TESTS := TestBrokerLossMidLoad|TestPollerRecoversFromBrokerRestart|TestSettleErrors|TestBrokerRestartMidWait|TestInferRidesThroughBrokerRestart|TestEnqueueRidesThroughBrokerRestart|TestSendNamesAnUnansweredSend

# configs/typecheck is a module of its own (k8s.io/api and friends stay out
# of inferq's go.mod): it decodes every manifest under configs/ strictly into
# its typed object. It runs first, as it fails fast. No -race: it starts no
# goroutines, and a race build of the Kubernetes types only costs time.
TYPECHECK := configs/typecheck

## test: fetch onnxruntime when needed, then run every test: the manifests' strict decoding, then inferq's with the race detector
test: setup nocgo
	$(GO) -C $(TYPECHECK) test -timeout 5m ./...
	$(GO) test -race -timeout 12m ./...
	$(GO) test -count=1 -timeout 5m -run '^($(SDK_RACE_TESTS))$$' ./consumer/ ./mq/ ./client/ ./cmd/inferq/
	@if [ -x ../shared/kubemq/start.sh ]; then echo "test: the real-broker leg is not part of make test: make test-real runs it on ../shared/kubemq"; \
	else echo "test: the real-broker leg was skipped: there is no ../shared/kubemq here (make test-real runs it where there is)"; fi

## test-real: the real-broker leg: start ../shared/kubemq's KubeMQ, run every test that takes KUBEMQ_ADDRESS against it, stop it (skipped where ../shared/kubemq is absent)
test-real: setup
	GO=$(GO) scripts/test-real.sh

## chaos: the chaos harness in full (issue 11: 20k tasks, a 100k hostile flood, 30 s outages; the short form runs in `make test`); KUBEMQ_ADDRESS=host:port runs it against a real KubeMQ
chaos: setup
	$(GO) test ./chaos -count=1 -v -timeout 60m -args -chaos.full

## nocgo: the producer side (client, task, tensor) builds without cgo, so Go producers need no C compiler; so do the batcher, admission, the queue loop and the front ends (batch, admit, consumer, oip): only runtime links onnxruntime
nocgo:
	CGO_ENABLED=0 $(GO) build ./client/... ./task/... ./tensor/... ./batch/... ./consumer/... ./admit/... ./oip/...

## lint: gofmt and go vet
lint: nocgo
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) -C $(TYPECHECK) vet ./...

## examples: write the example models (mlp, multitype) into $(MODELS_DIR)
examples: build
	$(BIN) models example $(MODELS_DIR)

## run: the main job on the embedded defaults (embedded broker, example models, CPU)
run: setup examples
	@echo "run: serving mlp and multitype from $(MODELS_DIR) with the embedded broker on 127.0.0.1:50000."
	@echo "run: in another shell:  $(BIN) infer mlp --random      (or: curl -s localhost:8080/v1/models)"
	$(BIN) serve --config configs/embedded.yaml --embedded-broker 127.0.0.1:50000

clean:
	rm -rf bin $(MODELS_DIR)
