#!/usr/bin/env bash
# Multi-turn picture chat benchmark (state reuse): time to first token of
# each turn of a chat that re-sends one 1024x768 picture on 4 turns, and of
# two interleaved conversations with different pictures (A1 B1 A2 B2), for
# pinhole serve and the native llama-server (the same requests; its own
# prefix reuse and slots apply), optionally also llama.cpp through
# @fugood/llama.node (engine "llama": no AVX, hours). Not part of CI.
#
#   bash bench/chat.sh [PINHOLE_BINARY]          (default: build/pinhole)
#
# SIZE [1024x768], THREADS [2], ENGINES ["pinhole llama-server"], SEQUENCES
# ["resend interleaved"], PEER [llama-peer.sh's bin folder; see also
# bench/peer-noamx.sh], JSONL [a file that collects the per-turn results;
# default a temporary one]. Prints a table (bench/chat_table.mjs over JSONL);
# with RECORD=1 writes it between the chat markers of bench/RESULTS.md.
# ARCH [qwen3vl; qwen35: the synthetic Qwen3.5 2B pair synth35-2b-q4_k_m, its
# table between the chat35 markers], ISA [none: PINHOLE_ISA for pinhole, e.g.
# avx2-novnni; the table between markers with the suffix -ISA].
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PINHOLE=${1:-build/pinhole}
SIZE=${SIZE:-1024x768}
THREADS=${THREADS:-2}
ENGINES=${ENGINES:-"pinhole llama-server"}
SEQUENCES=${SEQUENCES:-"resend interleaved"}
ARCH=${ARCH:-qwen3vl}
case "$ARCH" in
qwen3vl) MODEL=bench/models/synth-2b-q4_k_m; MARK=chat ;;
qwen35) MODEL=bench/models/synth35-2b-q4_k_m; MARK=chat35 ;;
*) echo "chat.sh: ARCH is qwen3vl or qwen35, not '$ARCH'" >&2; exit 1 ;;
esac
if [ -n "${ISA:-}" ]; then export PINHOLE_ISA=$ISA; MARK=$MARK-$ISA; fi
[ -f "$MODEL.gguf" ] || { echo "chat.sh: run ARCH=$ARCH bench/run.sh first (it synthesizes $MODEL.gguf)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/pinhole-chat.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
w=${SIZE%x*}; h=${SIZE#*x}
node bench/make_picture.mjs "$w" "$h" "$TMP/a.png" 0
node bench/make_picture.mjs "$w" "$h" "$TMP/b.png" 1
JSONL=${JSONL:-$TMP/results.jsonl}
touch "$JSONL"
for seq in $SEQUENCES; do
    if [[ " $ENGINES " == *" pinhole "* ]]; then
        # a fresh server per sequence: nothing cached from the other one
        "$PINHOLE" serve -m "$MODEL.gguf" --mmproj "$MODEL-mmproj.gguf" --port 0 -t "$THREADS" -c 8192 --any-model \
            2>"$TMP/serve.log" &
        pid=$!
        for _ in $(seq 600); do grep -q 'listening on' "$TMP/serve.log" && break; sleep 0.2; done
        url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$TMP/serve.log")
        [ -n "$url" ] || { cat "$TMP/serve.log" >&2; exit 1; }
        node bench/chat.mjs pinhole "$url" "$TMP/a.png" "$TMP/b.png" "$seq" | tee -a "$JSONL" >&2
        kill -INT "$pid"; wait "$pid"
        grep -E 'chat_completions' "$TMP/serve.log" >&2 || true
    fi
    if [[ " $ENGINES " == *" llama-server "* ]]; then
        if [ -z "${PEER:-}" ]; then
            PEER=$(PEER_ONLY_EXISTING=1 bash "$ROOT/../shared/tools/llama-peer.sh" 2>/dev/null) ||
                { echo "chat.sh: the native llama.cpp peer is not built (../shared/tools/llama-peer.sh)" >&2; exit 1; }
        fi
        port=$(node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close() })')
        LD_LIBRARY_PATH=$PEER "$PEER/llama-server" -m "$MODEL.gguf" --mmproj "$MODEL-mmproj.gguf" --host 127.0.0.1 \
            --port "$port" -t "$THREADS" -c 8192 -fa on --no-webui 2>"$TMP/llama.log" &
        pid=$!
        for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.2; done
        node bench/chat.mjs llama-server "http://127.0.0.1:$port" "$TMP/a.png" "$TMP/b.png" "$seq" | tee -a "$JSONL" >&2
        kill "$pid"; wait "$pid" || true
    fi
    if [[ " $ENGINES " == *" llama "* ]]; then
        [ -d bench/node_modules/@fugood/llama.node ] || (cd bench && npm ci --omit=optional --no-audit --no-fund) >&2
        node bench/chat.mjs llama "$MODEL.gguf" "$MODEL-mmproj.gguf" "$TMP/a.png" "$TMP/b.png" "$seq" \
            --threads "$THREADS" | grep '^{"engine"' | tee -a "$JSONL" >&2
    fi
done
table=$(node bench/chat_table.mjs "$JSONL")
echo "$table"
if [ "${RECORD:-0}" = 1 ]; then
    node -e '
const fs = require("fs"), p = "bench/RESULTS.md", t = fs.readFileSync(p, "utf8")
const mark = process.argv[2], begin = "<!-- " + mark + ":begin -->", end = "<!-- " + mark + ":end -->"
const body = begin + "\n" + process.argv[1] + "\n" + end
fs.writeFileSync(p, t.includes(begin) ? t.replace(new RegExp(begin + "[\\s\\S]*" + end), body) : t + "\n" + body + "\n")' "$table" "$MARK"
fi
