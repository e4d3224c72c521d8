#!/usr/bin/env bash
# Picture benchmark: a cold picture turn (a picture neither engine has seen,
# one answer token) through `pinhole serve` and the native `llama-server`, side
# by side in one run, with the synthetic 2B mmproj (F16) and q4_k_m LLM; plus
# pinhole's own split of the turn into the picture's encode and the prefill of
# the prompt (`pinhole run`). Not part of CI.
#
#   bash bench/encode.sh [PINHOLE_BINARY]      (default: build/pinhole)
#
# SIZES ["448x448 1024x768"], THREADS [2], ROUNDS [2] (interleaved rounds:
# pinhole, llama-server, pinhole, ...), REPS [2] (pictures per server start),
# PEER [llama-peer.sh's bin folder], PEER_NOTE [none], ARCH [qwen3vl; qwen35:
# the synthetic Qwen3.5 2B pair, synth35-2b-q4_k_m], ISA [none: PINHOLE_ISA
# for pinhole, e.g. avx2-novnni against PEER=$(bash bench/peer-noamx.sh avx2)].
# Writes the section between the encode markers (encode35 for qwen35, a
# suffix -ISA with ISA set) of bench/RESULTS.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PINHOLE=${1:-build/pinhole}
SIZES=${SIZES:-"448x448 1024x768"}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-2}
REPS=${REPS:-2}
ARCH=${ARCH:-qwen3vl}
case "$ARCH" in
qwen3vl) MODEL=bench/models/synth-2b-q4_k_m; MARK=encode; TITLE=""; REPRO="bash bench/encode.sh" ;;
qwen35) MODEL=bench/models/synth35-2b-q4_k_m; MARK=encode35; TITLE="Qwen3.5: "; REPRO="ARCH=qwen35 bash bench/encode.sh" ;;
*) echo "encode.sh: ARCH is qwen3vl or qwen35, not '$ARCH'" >&2; exit 1 ;;
esac
if [ -n "${ISA:-}" ]; then
    export PINHOLE_ISA=$ISA
    MARK=$MARK-$ISA; TITLE="${TITLE}pinhole's $ISA kernels: "; REPRO="ISA=$ISA $REPRO"
fi
die() { echo "encode.sh: $*" >&2; exit 1; }
[ -f "$MODEL.gguf" ] || die "run ARCH=$ARCH bench/run.sh first (it synthesizes $MODEL.gguf)"
if [ -z "${PEER:-}" ]; then
    PEER=$(PEER_ONLY_EXISTING=1 bash "$ROOT/../shared/tools/llama-peer.sh" 2>/dev/null) ||
        die "the native llama.cpp peer is not built: bash ../shared/tools/llama-peer.sh (10-40 minutes)"
fi
[ -x "$PEER/llama-server" ] || die "no llama-server in $PEER"
TMP=$(mktemp -d /tmp/pinhole-encode.XXXXXX)
PROMPT=$'<|im_start|>user\n<__image__>Describe the picture.<|im_end|>\n<|im_start|>assistant\n'
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
load() { cut -d' ' -f1 /proc/loadavg; }
rows=""; samples=""; variant=100
for size in $SIZES; do
    w=${size%x*}; h=${size#*x}
    enc=(); pre=(); ph=(); ll=()
    for r in $(seq "$ROUNDS"); do
        pic=$TMP/pic-$size-$r.png
        node bench/make_picture.mjs "$w" "$h" "$pic" "$r"
        "$PINHOLE" run -m "$MODEL.gguf" --mmproj "$MODEL-mmproj.gguf" --image "$pic" --raw "$PROMPT" \
            -n 1 -t "$THREADS" >/dev/null 2>"$TMP/err"
        enc+=("$(sed -n 's/.*pictures encoded in \([0-9.]*\) s.*/\1/p' "$TMP/err")")
        pre+=("$(sed -n 's/.*prompt [0-9]* tokens in \([0-9.]*\) s.*/\1/p' "$TMP/err")")
        for engine in pinhole llama; do
            bin=$PINHOLE; [ $engine = llama ] && bin=$PEER
            l0=$(load)
            j=$(node bench/picture_ttft.mjs --engine $engine --bin "$bin" --model "$MODEL.gguf" \
                --mmproj "$MODEL-mmproj.gguf" --size "$size" --reps "$REPS" --threads "$THREADS" \
                --first-variant $variant)
            variant=$((variant + REPS))
            ms=$(node -e 'const j = JSON.parse(process.argv[1]); console.log(j.samples.map((s) => s.ms / 1000).join(" "))' "$j")
            # shellcheck disable=SC2206
            if [ $engine = pinhole ]; then ph+=($ms); else ll+=($ms); fi
            samples+="| $size | $r | $engine | $ms | $l0 / $(load) |"$'\n'
            echo "   $size round $r $engine: $ms s" >&2
        done
    done
    pe=$(med "${enc[@]}"); pp=$(med "${pre[@]}"); pt=$(med "${ph[@]}"); lt=$(med "${ll[@]}")
    rows+="| $size | $pe | $pp | $pt | $lt | $(awk -v a="$lt" -v b="$pt" 'BEGIN {printf "%.2f", a / b}')x |"$'\n'
done
isa=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_vnni|avx_vnni|amx_int8)$' | tr '\n' ' ')
section=$(cat <<MD
<!-- $MARK:begin -->
## ${TITLE}Pictures: a cold picture turn through the servers (synthetic 2B mmproj, F16; LLM q4_k_m)

$(date -u +%Y-%m-%d), $(lscpu | sed -n 's/^Model name: *//p'), ISA flags: ${isa}, pinhole's kernels: $("$PINHOLE" --version | sed 's/.*(\(.*\))/\1/'), $THREADS threads.
Reproduce: \`$REPRO\`. Each sample is one chat request with a picture the server has not
seen and \`max_tokens: 1\`, timed by the client from sending to the answer (picture decode and encode, the
prompt's prefill, one token): \`pinhole serve\` against the native \`llama-server\` ($PEER${PEER_NOTE:+; $PEER_NOTE}), the
same context (8192) and threads, interleaved round by round; medians of $ROUNDS rounds x $REPS pictures.
pinhole's split of the turn (\`pinhole run\`, median of $ROUNDS): encode = the vision tower, prefill = the
prompt's rows in the LLM.

| picture | pinhole encode s | pinhole prefill s | pinhole serve, cold turn s | llama-server, cold turn s | speed-up |
|---|---|---|---|---|---|
$rows
Every sample (seconds; load average before / after):

| picture | round | engine | seconds | load |
|---|---|---|---|---|
$samples
<!-- $MARK:end -->
MD
)
touch bench/RESULTS.md
node -e '
const fs = require("fs"); const f = "bench/RESULTS.md"; const sec = process.argv[1], mark = process.argv[2];
let s = fs.readFileSync(f, "utf8");
const re = new RegExp("<!-- " + mark + ":begin -->[\\s\\S]*<!-- " + mark + ":end -->");
s = re.test(s) ? s.replace(re, sec) : s.trimEnd() + "\n\n" + sec + "\n";
fs.writeFileSync(f, s);' "$section" "$MARK"
echo "$section"
rm -rf "$TMP"
