#!/usr/bin/env bash
# Side-by-side benchmark: pinhole vs llama.cpp built natively for this CPU (the
# peer of ../shared/tools/llama-peer.sh, its llama-bench) on the same synthetic
# Qwen3-VL 2B GGUF models. Builds nothing. Not part of CI.
#
#   bash bench/run.sh [PINHOLE_BINARY]          (default: build/pinhole)
#
# Environment knobs (defaults in brackets):
#   ARCH    [qwen3vl]        qwen3vl: the synthetic Qwen3-VL 2B (bench/models/synth-2b-TYPE);
#                            qwen35: the synthetic Qwen3.5 2B (bench/models/synth35-2b-TYPE, `synth --arch qwen35`)
#   TYPES   ["q4_k_m q8_0"]  weight types of the synthetic 2B models
#   THREADS [2]              threads for both engines
#   PP [512] TG [128]        prompt tokens prefilled / tokens decoded one at a time
#   ROUNDS  [3]              interleaved rounds: pinhole, llama.cpp, pinhole, llama.cpp, ...
#   REPS    [1]              repetitions inside each engine invocation (-r / --reps)
#   VOCAB   [../shared/oracle/models/tiny-f16.gguf]  tokenizer source for `pinhole synth`
#   ISA     [none]           PINHOLE_ISA for pinhole (e.g. avx2-novnni: its kernels as on an AVX2-only CPU, run
#                            against a peer built the same way, `PEER=$(bash bench/peer-noamx.sh avx2)`)
#   OUT     [bench/RESULTS.md; with ARCH=qwen35 bench/results/qwen35-speed.md; with ISA set
#            bench/results/ARCH-ISA-speed.md]
#   PEER    [the llama.cpp bin folder that llama-peer.sh prints]
#   PEER_NOTE [none]         a remark on the peer build printed in the report (e.g. why AMX is off:
#                            see bench/peer-noamx.sh)
# Each engine gets ROUNDS*REPS samples per model; the report gives their median.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

PINHOLE=${1:-build/pinhole}
TYPES=${TYPES:-"q4_k_m q8_0"}
THREADS=${THREADS:-2}
PP=${PP:-512}
TG=${TG:-128}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-1}
VOCAB=${VOCAB:-../shared/oracle/models/tiny-f16.gguf}
ARCH=${ARCH:-qwen3vl}
case "$ARCH" in
qwen3vl) PREFIX=synth-2b; SYNTH_ARCH=(); DEFAULT_OUT=bench/RESULTS.md ;;
qwen35) PREFIX=synth35-2b; SYNTH_ARCH=(--arch qwen35); DEFAULT_OUT=bench/results/qwen35-speed.md ;;
*) echo "run.sh: ARCH is qwen3vl or qwen35, not '$ARCH'" >&2; exit 1 ;;
esac
ISA=${ISA:-}
if [ -n "$ISA" ]; then
    export PINHOLE_ISA=$ISA
    DEFAULT_OUT=bench/results/$ARCH-$ISA-speed.md
fi
OUT=${OUT:-$DEFAULT_OUT}
MODELS=bench/models

die() { echo "run.sh: $*" >&2; exit 1; }

[ -x "$PINHOLE" ] || die "no pinhole binary at '$PINHOLE' (build it: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2)"
command -v node >/dev/null || die "node is required (for the llama-bench wrapper and the report)"
command -v cc >/dev/null || die "a C compiler (cc) is required for bench/membw.c"
if [ -z "${PEER:-}" ]; then
    PEER=$(PEER_ONLY_EXISTING=1 bash "$ROOT/../shared/tools/llama-peer.sh" 2>/dev/null) ||
        die "the native llama.cpp peer is not built: bash ../shared/tools/llama-peer.sh (10-40 minutes)"
fi
[ -x "$PEER/llama-bench" ] || die "no llama-bench in $PEER"

# the source state the binary presumably comes from, taken now (commits may land during a long run)
GITREV=$(git rev-parse --short HEAD 2>/dev/null || echo "no commit")
[ -z "$(git status --porcelain -- src include CMakeLists.txt 2>/dev/null)" ] || GITREV="$GITREV (with uncommitted changes)"

LOGDIR=$(mktemp -d /tmp/pinhole-bench.XXXXXX)
SAMPLES=$LOGDIR/samples.jsonl
: >"$SAMPLES"
echo "== logs in $LOGDIR"

# --- models -----------------------------------------------------------------
mkdir -p "$MODELS"
for t in $TYPES; do
    name=$PREFIX-$t
    if [ ! -f "$MODELS/$name.gguf" ]; then
        [ -f "$VOCAB" ] || die "no tokenizer source '$VOCAB' (set VOCAB=...)"
        avail_kb=$(df -Pk "$MODELS" | awk 'NR==2 {print $4}')
        [ "$avail_kb" -gt $((4 * 1024 * 1024)) ] || die "less than 4 GiB free under $MODELS"
        echo "== synthesizing $MODELS/$name.gguf"
        # write under a temporary name so an interrupted synth is never mistaken for a model
        "$PINHOLE" synth "${SYNTH_ARCH[@]}" --shape 2b --type "$t" --vocab "$VOCAB" -o "$MODELS/.tmp-$name" >&2
        mv "$MODELS/.tmp-$name-mmproj.gguf" "$MODELS/$name-mmproj.gguf"
        mv "$MODELS/.tmp-$name.gguf" "$MODELS/$name.gguf"
    fi
done

# --- memory bandwidth ---------------------------------------------------------
MEMBW=$LOGDIR/membw
cc -O3 -march=native -pthread bench/membw.c -o "$MEMBW"
membw() { "$MEMBW" "$THREADS" 1024 10; }
echo "== memory read bandwidth ($THREADS threads)"
membw | tee "$LOGDIR/membw-before.json"

loadavg() { cut -d' ' -f1 /proc/loadavg; }

# --- interleaved runs ---------------------------------------------------------
for t in $TYPES; do
    model=$MODELS/$PREFIX-$t.gguf
    node bench/gguf_bytes.mjs "$model" >"$LOGDIR/bytes-$t.json"
    for ((r = 1; r <= ROUNDS; r++)); do
        for engine in pinhole llama.cpp; do
            l0=$(loadavg)
            log=$LOGDIR/$t-$engine-$r.log
            echo "== $t round $r/$ROUNDS: $engine (load $l0)"
            if [ "$engine" = pinhole ]; then
                "$PINHOLE" bench -m "$model" -p "$PP" -n "$TG" -r "$REPS" -t "$THREADS" >"$log.json" 2>"$log" ||
                    die "pinhole bench failed, see $log"
            else
                node bench/llama_native.mjs "$model" --peer "$PEER" --pp "$PP" --tg "$TG" --reps "$REPS" \
                    --threads "$THREADS" >"$log.json" 2>"$log" || die "llama-bench failed, see $log"
            fi
            json=$(grep '^{' "$log.json" | tail -n 1)
            [ -n "$json" ] || die "$engine printed no JSON, see $log"
            echo "   $json" | cut -c1-200
            printf '{"type":"%s","engine":"%s","round":%d,"load_before":%s,"load_after":%s,"result":%s}\n' \
                "$t" "$engine" "$r" "$l0" "$(loadavg)" "$json" >>"$SAMPLES"
        done
    done
done

echo "== memory read bandwidth again"
membw | tee "$LOGDIR/membw-after.json"

# --- report -------------------------------------------------------------------
CMD="bash bench/run.sh"
[ "$PINHOLE" = build/pinhole ] || CMD="$CMD $PINHOLE"
for v in ARCH ISA TYPES THREADS PP TG ROUNDS REPS; do
    case "$v=${!v}" in
    ARCH=qwen3vl | ISA= | "TYPES=q4_k_m q8_0" | THREADS=2 | PP=512 | TG=128 | ROUNDS=3 | REPS=1) ;;
    *) CMD="$v=\"${!v}\" $CMD" ;;
    esac
done
node bench/report.mjs --arch "$ARCH" --logdir "$LOGDIR" --types "$TYPES" --threads "$THREADS" --pp "$PP" --tg "$TG" \
    --rounds "$ROUNDS" --reps "$REPS" --pinhole "$PINHOLE" --git "$GITREV" --command "$CMD" --out "$OUT" --peer "$PEER" --peer-note "${PEER_NOTE:-}"
echo "== wrote $OUT"
