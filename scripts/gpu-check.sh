#!/usr/bin/env bash
# gpu-check.sh: inferq on a machine with an NVIDIA GPU, in one go.
#
#   scripts/gpu-check.sh          run the check (on the GPU machine)
#   scripts/gpu-check.sh pack     prepare, on a machine with the network, what
#                                 a GPU machine without one needs: bin/ (test
#                                 binaries) and lib/gpu-parts/ (the GPU
#                                 libraries, xz-compressed, in parts of at most
#                                 60 MiB, so each fits a 64 MiB transfer)
#
# The check: the GPU libraries (lib/gpu, from `make setup-gpu` or joined from
# lib/gpu-parts and sha256-checked), the CUDA 13 / cuDNN 9 libraries they
# need, `inferq devices` (with and without a config), the GPU unit tests,
# then resnet18 (random weights) through the runtime on cuda:0 and on the CPU
# at batch 1, 8 and 32, in images/s. The table comes last; everything is
# also written under $OUT (default /tmp/gpu-check). Exit status: 0 when the
# CUDA session ran, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
PART_SIZE=60m
GPU_LIBS="libonnxruntime.so libonnxruntime_providers_shared.so libonnxruntime_providers_cuda.so"

step() { printf '\n== %s\n' "$*"; }

# sha256 pins, read from the Makefile so they live in one place.
pin() { grep -o "$1:[0-9a-f]\{64\}" Makefile | head -1 | cut -d: -f2; }

if [ "${1:-}" = pack ]; then
	set -e
	make setup-gpu
	mkdir -p bin lib/gpu-parts
	rm -f lib/gpu-parts/*
	export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
	go build -o bin/inferq ./cmd/inferq
	go test -c -o bin/runtime.test ./runtime/
	go test -c -o bin/gpu.test ./gpu/
	for f in $GPU_LIBS; do
		xz -T0 -6 -c "lib/gpu/$f" | split -b "$PART_SIZE" -d - "lib/gpu-parts/$f.xz.part-"
	done
	ls -l bin lib/gpu-parts
	echo "pack: carry bin/ and lib/gpu-parts/ to the GPU machine, at most 64 MiB per transfer:"
	echo "  one transfer per part of libonnxruntime_providers_cuda.so (each <= 60 MiB), bin/ and the small parts in another;"
	echo "  then run scripts/gpu-check.sh there. Parts already there are kept; the script joins and checks them."
	exit 0
fi

status=0
step "machine"
uname -a
nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.free --format=csv 2>&1 || echo "nvidia-smi: not available"
command -v go >/dev/null && go version || echo "go: not installed (the prebuilt bin/*.test and bin/inferq are used)"

step "onnxruntime GPU libraries (lib/gpu)"
mkdir -p lib/gpu
for f in $GPU_LIBS; do
	sum=$(pin "$f")
	if [ -f "lib/gpu/$f" ] && echo "$sum  lib/gpu/$f" | sha256sum -c --status; then
		echo "ok      lib/gpu/$f"
		continue
	fi
	if ls "lib/gpu-parts/$f.xz.part-"* >/dev/null 2>&1; then
		cat "lib/gpu-parts/$f.xz.part-"* | xz -dc >"lib/gpu/$f.tmp" && mv "lib/gpu/$f.tmp" "lib/gpu/$f"
		echo "joined  lib/gpu/$f from $(ls "lib/gpu-parts/$f.xz.part-"* | wc -l) part(s)"
	elif command -v npm >/dev/null; then
		make setup-gpu || true
	fi
	if ! echo "$sum  lib/gpu/$f" | sha256sum -c --status 2>/dev/null; then
		echo "MISSING lib/gpu/$f (sha256 $sum): run 'make setup-gpu', or 'scripts/gpu-check.sh pack' elsewhere and bring lib/gpu-parts/" >&2
		status=1
	fi
done
[ $status = 0 ] || { echo "gpu-check: the onnxruntime GPU libraries are missing; stopping" >&2; exit 1; }

step "CUDA 13 / cuDNN 9 libraries the CUDA provider needs"
missing=$(ldd lib/gpu/libonnxruntime_providers_cuda.so | awk '/not found/ {print $1}')
for l in libcudnn.so.9; do
	ldconfig -p 2>/dev/null | grep -q "$l" || find / -name "$l*" -path '*lib*' -print -quit 2>/dev/null | grep -q . || missing="$missing $l"
done
if [ -n "$(echo $missing)" ]; then
	echo "not found by the loader: $(echo $missing)"
	echo "(install CUDA 13 and cuDNN 9, or point LD_LIBRARY_PATH at them; the CUDA rows below will show the provider's error)"
else
	echo "all found"
fi

step "build"
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
if command -v go >/dev/null; then
	go build -o bin/inferq ./cmd/inferq && go test -c -o bin/runtime.test ./runtime/ && go test -c -o bin/gpu.test ./gpu/ || status=1
fi
ls -l bin/inferq bin/runtime.test bin/gpu.test || { echo "gpu-check: no binaries" >&2; exit 1; }

step "inferq devices"
bin/inferq devices 2>&1 | tee "$OUT/devices.txt"
step "inferq devices --config configs/multi-gpu.yaml"
bin/inferq devices --config configs/multi-gpu.yaml 2>&1 | tee -a "$OUT/devices.txt"

step "unit tests against the real NVML and CUDA provider"
bin/gpu.test -test.v -test.run 'Discover|Sampler' 2>&1 | tail -5
(cd runtime && INFERQ_ORT_LIB="$PWD/../lib/gpu" ../bin/runtime.test -test.run 'CUDAUnavailable|SignalHandlersKept|CUDAOptions|Place|Visible' -test.v 2>&1 | grep -E '^(--- |ok|PASS|FAIL)|session_test' | tee "$OUT/unit.txt")

step "resnet18 on cuda:0 and on the CPU (batch 1, 8, 32)"
(cd runtime && INFERQ_GPU_CHECK=1 INFERQ_GPU_CHECK_OUT="$OUT/table.txt" INFERQ_ORT_LIB="$PWD/../lib/gpu" \
	timeout 480 ../bin/runtime.test -test.run '^TestGPUCheck$' -test.v -test.timeout 9m 2>&1 | tee "$OUT/check.txt") || status=1

step "table"
cat "$OUT/table.txt" 2>/dev/null || { echo "no table: see $OUT/check.txt"; status=1; }
exit $status
