#!/usr/bin/env bash
# A second build of the native llama.cpp peer with every x86 extension this
# CPU has except AMX, and prints its bin folder. Needed on machines whose CPU
# reports AMX but where llama.cpp's AMX path does not run: on the Xeon of this
# project's AVX-512 machines its llama-bench / llama-server die with SIGSEGV in
# ggml_backend_amx_mul_mat at the first batch of more than one token (decode
# alone works), so the plain native build cannot measure prefill there.
#
#   bash bench/peer-noamx.sh        (after ../shared/tools/llama-peer.sh; ~10 minutes on 2 cores)
#   PEER=$(bash bench/peer-noamx.sh) PEER_NOTE="AMX off: its AMX path crashes on this CPU" bash bench/run.sh
#
#   bash bench/peer-noamx.sh avx2   a build with AVX2, FMA, F16C and BMI2 only (no AVX-512, no AVX-VNNI):
#                                   llama.cpp as on this project's AVX2-only machines, to run side by side
#                                   with PINHOLE_ISA=avx2-novnni on a CPU that has more (build-avx2)
#
# Same source tree as llama-peer.sh, a build folder of its own (build-noamx or build-avx2);
# GGML_NATIVE is off because -march=native would turn AMX back on, and each
# extension the CPU reports is switched on by name instead. Never run in CI.
set -euo pipefail
SRC=$(dirname "$(PEER_ONLY_EXISTING=1 bash "$(dirname "$0")/../../shared/tools/llama-peer.sh")")/..
SRC=$(cd "$SRC" && pwd)
MODE=${1:-noamx}
[[ $MODE == noamx || $MODE == avx2 ]] || { echo "usage: peer-noamx.sh [avx2]" >&2; exit 2; }
BIN=$SRC/build-$MODE/bin
TARGETS="llama-bench llama-mtmd-cli llama-server"
have_all() { for t in $TARGETS; do [[ -x $BIN/$t ]] || return 1; done; }
if have_all; then echo "$BIN"; exit 0; fi

flags=$(grep -m1 '^flags' /proc/cpuinfo)
on() { [[ " $flags " == *" $1 "* ]] && echo ON || echo OFF; }
# In avx2 mode every extension above AVX2's level is off, whatever the CPU has.
above() { [[ $MODE == avx2 ]] && echo OFF || on "$1"; }
cmake -S "$SRC" -B "$SRC/build-$MODE" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
  -DGGML_AVX="$(on avx)" -DGGML_AVX2="$(on avx2)" -DGGML_FMA="$(on fma)" -DGGML_F16C="$(on f16c)" \
  -DGGML_BMI2="$(on bmi2)" -DGGML_AVX_VNNI="$(above avx_vnni)" -DGGML_AVX512="$(above avx512f)" \
  -DGGML_AVX512_VBMI="$(above avx512vbmi)" -DGGML_AVX512_VNNI="$(above avx512_vnni)" \
  -DGGML_AVX512_BF16="$(above avx512_bf16)" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$SRC/build-$MODE" -j"$(nproc)" --target $TARGETS >&2
have_all || { echo "peer-noamx: the build did not make every program" >&2; exit 1; }
echo "$BIN"
