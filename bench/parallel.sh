#!/usr/bin/env bash
# Several requests at once (issue 26): pinhole serve --parallel N against the
# native llama-server -np N --kv-unified, the same streaming requests to both
# (bench/parallel.mjs; greedy, end-of-turn tokens banned so every answer has
# its max_tokens). A fresh server for each scenario (and each agent pass).
# Not part of CI.
#
#   bash bench/parallel.sh [PINHOLE_BINARY]          (default: build/pinhole)
#
# SCENARIOS ["agg gap siblings agent"]:
#   agg       AGG_CLIENTS ["1 2 4 8"] clients at once, AGG_PROMPT [128] tokens, AGG_TOKENS [128] each
#             (servers: --parallel / -np AGG_PARALLEL [8])
#   gap       GAP_STREAMS [3] answers (GAP_PROMPT [128]-token prompts) of at most GAP_TOKENS
#             [1500], stopped 1 s after the picture's answer; GAP_DELAY_S [2] s after their
#             first tokens one SIZE [1024x768] picture request (PIC_TOKENS [16]): the gaps
#             between tokens while it runs, its TTFT (-np 4)
#   siblings  SIB_N [4] requests together: one system prompt of SIB_PREFIX [2048] tokens, one
#             SIZE picture, different questions, SIB_TOKENS [16] each (--parallel / -np 4)
#   agent     a system prompt of PROMPT_TOKENS [12288] tokens with tools, AGENT_TURNS [4] main
#             turns (AGENT_TOKENS [32]), two passes: main only, and each main turn followed by
#             two side calls (SIDE_TOKENS [16]) (--parallel / -np 4)
# THREADS [2], ENGINES ["pinhole llama-server"], MODEL [bench/models/synth-2b-q4_k_m: MODEL.gguf
# and MODEL-mmproj.gguf], PEER [llama-peer.sh's bin folder], TEMPLATE [llama-server's
# --chat-template-file; tests/oracle/templates/Qwen3-VL-Instruct.jinja], CTX [per request; default by
# scenario]; llama-server gets -c NP*CTX (its unified cache holds every slot's rows),
# JSONL [a file that collects the results; default a temporary one]. Prints the tables
# (parallel.mjs table); with RECORD=1 writes them between the parallel markers of
# bench/RESULTS.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PINHOLE=${1:-build/pinhole}
SCENARIOS=${SCENARIOS:-"agg gap siblings agent"}
ENGINES=${ENGINES:-"pinhole llama-server"}
THREADS=${THREADS:-2}
MODEL=${MODEL:-bench/models/synth-2b-q4_k_m}
MODEL=${MODEL%.gguf}
SIZE=${SIZE:-1024x768}
# the synthetic models carry a plain ChatML template that renders no tools: pinhole renders
# them as Qwen3-VL's template does (docs/chat-format.md), llama-server needs that template
TEMPLATE=${TEMPLATE:-tests/oracle/templates/Qwen3-VL-Instruct.jinja}
export PROMPT_TOKENS=${PROMPT_TOKENS:-12288}
[ -f "$MODEL.gguf" ] && [ -f "$MODEL-mmproj.gguf" ] ||
    { echo "parallel.sh: no $MODEL.gguf and $MODEL-mmproj.gguf (bench/run.sh synthesizes the 2B pair)" >&2; exit 1; }
if [[ " $ENGINES " == *" llama-server "* ]] && [ -z "${PEER:-}" ]; then
    PEER=$(PEER_ONLY_EXISTING=1 bash "$ROOT/../shared/tools/llama-peer.sh" 2>/dev/null) ||
        { echo "parallel.sh: the native llama.cpp peer is not built (../shared/tools/llama-peer.sh)" >&2; exit 1; }
fi
TMP=$(mktemp -d /tmp/pinhole-parallel.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$TMP"' EXIT
w=${SIZE%x*}; h=${SIZE#*x}
node bench/make_picture.mjs "$w" "$h" "$TMP/gap.png" 0
node bench/make_picture.mjs "$w" "$h" "$TMP/siblings.png" 1
JSONL=${JSONL:-$TMP/results.jsonl}
touch "$JSONL"

# start ENGINE NP CTX: a server with NP slots, CTX rows per request; sets pid and url
start() {
    local engine=$1 np=$2 ctx=$3
    if [ "$engine" = pinhole ]; then
        "$PINHOLE" serve -m "$MODEL.gguf" --mmproj "$MODEL-mmproj.gguf" --port 0 -t "$THREADS" -c "$ctx" \
            --parallel "$np" --any-model 2>"$TMP/serve.log" &
        pid=$!
        for _ in $(seq 600); do grep -q 'listening on' "$TMP/serve.log" && break; sleep 0.2; done
        url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$TMP/serve.log")
        [ -n "$url" ] || { cat "$TMP/serve.log" >&2; exit 1; }
    else
        local port
        port=$(node -e 'const s = require("net").createServer(); s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close() })')
        LD_LIBRARY_PATH=$PEER "$PEER/llama-server" -m "$MODEL.gguf" --mmproj "$MODEL-mmproj.gguf" --host 127.0.0.1 \
            --port "$port" -t "$THREADS" -c $((np * ctx)) -np "$np" --kv-unified -fa on --metrics --no-webui \
            --chat-template-file "$TEMPLATE" 2>"$TMP/llama.log" &
        pid=$!
        url="http://127.0.0.1:$port"
        for _ in $(seq 1200); do curl -sf "$url/health" >/dev/null && break; sleep 0.2; done
        curl -sf "$url/health" >/dev/null || { tail -20 "$TMP/llama.log" >&2; exit 1; }
    fi
}
stop() {
    if [ "$1" = pinhole ]; then kill -INT "$pid"; else kill "$pid"; fi
    wait "$pid" || true
    pid=
}

for scenario in $SCENARIOS; do
    case "$scenario" in
    agg) np=${AGG_PARALLEL:-8}; ctx=${CTX:-2048}; passes=- ;;
    gap) np=4; ctx=${CTX:-4096}; passes=- ;;
    siblings) np=4; ctx=${CTX:-4096}; passes=- ;;
    agent) np=4; ctx=${CTX:-$(( (PROMPT_TOKENS + 4095) / 1024 * 1024 ))}; passes="main main+sides" ;;
    *) echo "parallel.sh: SCENARIOS are agg gap siblings agent, not '$scenario'" >&2; exit 1 ;;
    esac
    for pass in $passes; do
        for engine in $ENGINES; do
            [ "$engine" = pinhole ] || [ "$engine" = llama-server ] ||
                { echo "parallel.sh: ENGINES are pinhole and llama-server, not '$engine'" >&2; exit 1; }
            echo "parallel.sh: $scenario ${pass#-} $engine (np $np, ctx $ctx)" >&2
            start "$engine" "$np" "$ctx"
            args=(--model "$MODEL.gguf")
            case "$scenario" in gap | siblings) args+=(--picture "$TMP/$scenario.png") ;; esac
            if [ "$pass" != - ]; then args+=(--pass "$pass"); fi
            node bench/parallel.mjs "$scenario" "$engine" "$url" "${args[@]}" | tee -a "$JSONL" >&2
            stop "$engine"
        done
    done
done
table=$(node bench/parallel.mjs table "$JSONL")
echo "$table"
if [ "${RECORD:-0}" = 1 ]; then
    node -e '
const fs = require("fs"), p = "bench/RESULTS.md", t = fs.readFileSync(p, "utf8")
const begin = "<!-- parallel:begin -->", end = "<!-- parallel:end -->"
const body = begin + "\n" + process.argv[1] + "\n" + end
fs.writeFileSync(p, t.includes(begin) ? t.replace(new RegExp(begin + "[\\s\\S]*" + end), body) : t + "\n" + body + "\n")' "$table"
fi
