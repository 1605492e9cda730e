#!/usr/bin/env bash
# Device check: run on a lent GPU machine, from the repository root of a checkout whose
# `npm install` finished (or whose build/ and node_modules/ were carried over).
#
#   scripts/device-check.sh [--quick] [--skip-build] [--no-server]
#
# 1. builds llamux with the GPU backend (LLAMUX_GPU, default cuda) and the raw C++ loop, and
#    checks that libggml-<gpu>.so sits beside llamux.node (what a package ships);
# 2. builds llama-server from the same llama.cpp source with the same backend (skipped with
#    --no-server);
# 3. runs scripts/device-check.ts: llamux doctor, gpuLayers 'auto' (must offload every layer of
#    the 250 M bench model), generation, decode vs the raw loop at 1 and 8 sequences, and
#    throughput vs llama-server at 8 streams.
# Logs and a summary go to $OUT (default .cache/device-check); the exit status is 0 only when
# every check passed. The build takes ~3.5 min on 16 cores (ccache makes a rerun fast): give
# the whole script a 10-minute limit and rerun with --skip-build.
set -euo pipefail
cd "$(dirname "$0")/.."

GPU="${LLAMUX_GPU:-cuda}"
OUT="${OUT:-.cache/device-check}"
QUICK=""
BUILD=1
SERVER=1
for a in "$@"; do
  case "$a" in
    --quick) QUICK="--quick" ;;
    --skip-build) BUILD=0 ;;
    --no-server) SERVER=0 ;;
    *) echo "unknown option $a" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
log() { echo "[device-check $(date -u +%H:%M:%S)] $*"; }
JOBS="$(nproc 2>/dev/null || echo 4)"

log "machine: $(uname -srm), $JOBS CPUs"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv | tee "$OUT/gpu.txt"
fi
if [ "$GPU" = cuda ] && ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break; done
fi

if [ "$BUILD" = 1 ]; then
  log "building llamux with LLAMUX_GPU=$GPU (and the raw loop)"
  start=$(date +%s)
  LLAMUX_GPU="$GPU" LLAMUX_BUILD_BENCH=1 CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" node scripts/build-native.mjs >"$OUT/build.log" 2>&1 \
    || { tail -40 "$OUT/build.log"; log "FAIL: build"; exit 1; }
  log "built in $(( $(date +%s) - start )) s"
fi
lib="build/Release/libggml-$GPU.so"
[ -f "$lib" ] || { log "FAIL: $lib missing (the $GPU backend must ship beside llamux.node)"; exit 1; }
log "ok: $lib ($(du -h "$lib" | cut -f1)) beside $(ls build/Release/*.node | head -1)"

SERVER_BIN=""
if [ "$SERVER" = 1 ]; then
  src=.cache/llama-server-src
  bld=".cache/llama-server-$GPU"
  if [ ! -x "$bld/bin/llama-server" ]; then
    log "building llama-server ($GPU) from the same llama.cpp source"
    if [ ! -f "$src/CMakeLists.txt" ]; then
      mkdir -p "$src"
      git --git-dir=.cache/llama.cpp.git archive HEAD | tar -x -C "$src"
    fi
    flag=""
    case "$GPU" in cuda) flag=-DGGML_CUDA=ON ;; vulkan) flag=-DGGML_VULKAN=ON ;; metal) flag=-DGGML_METAL=ON ;; esac
    launcher=""
    command -v ccache >/dev/null && launcher="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"
    # shellcheck disable=SC2086
    cmake -S "$src" -B "$bld" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
      -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON $flag $launcher >"$OUT/llama-server-build.log" 2>&1 \
      && ninja -C "$bld" llama-server >>"$OUT/llama-server-build.log" 2>&1 \
      || { tail -20 "$OUT/llama-server-build.log"; log "llama-server did not build: comparison skipped"; }
  fi
  [ -x "$bld/bin/llama-server" ] && SERVER_BIN="$bld/bin/llama-server"
fi

log "running the checks"
args=($QUICK)
[ -n "$SERVER_BIN" ] && args+=(--llama-server "$SERVER_BIN")
set +e
node --import tsx scripts/device-check.ts "${args[@]}" 2>&1 | tee "$OUT/check.log"
rc=${PIPESTATUS[0]}
set -e
tail -1 "$OUT/check.log" >"$OUT/summary.json" || true
log "done (exit $rc); logs in $OUT"
exit "$rc"
