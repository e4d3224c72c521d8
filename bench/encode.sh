#!/usr/bin/env bash
# Picture benchmark: time to encode a picture with the synthetic 2B mmproj
# (F16) and put it into the context, pinhole against llama.cpp
# (@fugood/llama.node) in one run. Not part of CI.
#
#   bash bench/encode.sh [PINHOLE_BINARY]      (default: build/pinhole)
#
# SIZES ["448x448 1024x768"], THREADS [2], REPS [3] (pinhole runs per size;
# llama.cpp runs once per size: its CPU build here has no AVX and takes
# minutes a picture). Writes the section between the encode markers of
# bench/RESULTS.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PINHOLE=${1:-build/pinhole}
SIZES=${SIZES:-"448x448 1024x768"}
THREADS=${THREADS:-2}
REPS=${REPS:-3}
MODEL=bench/models/synth-2b-q4_k_m
[ -f "$MODEL.gguf" ] || { echo "encode.sh: run bench/run.sh first (it synthesizes $MODEL.gguf)" >&2; exit 1; }
[ -d bench/node_modules/@fugood/llama.node ] || (cd bench && npm ci --omit=optional --no-audit --no-fund) >&2
TMP=$(mktemp -d /tmp/pinhole-encode.XXXXXX)
PROMPT=$'<|im_start|>user\n<__image__>Describe the picture.<|im_end|>\n<|im_start|>assistant\n'
rows=""
for size in $SIZES; do
    w=${size%x*}; h=${size#*x}
    pic=$TMP/pic-$size.png
    node bench/make_picture.mjs "$w" "$h" "$pic"
    enc=(); pre=()
    for r in $(seq "$REPS"); do
        "$PINHOLE" run -m "$MODEL.gguf" --mmproj "$MODEL-mmproj.gguf" --image "$pic" --raw "$PROMPT" \
            -n 1 -t "$THREADS" >/dev/null 2>"$TMP/err"
        enc+=("$(sed -n 's/.*pictures encoded in \([0-9.]*\) s.*/\1/p' "$TMP/err")")
        pre+=("$(sed -n 's/.*prompt [0-9]* tokens in \([0-9.]*\) s.*/\1/p' "$TMP/err")")
        echo "   pinhole $size run $r: encode ${enc[-1]} s, prefill ${pre[-1]} s" >&2
    done
    med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
    pe=$(med "${enc[@]}"); pp=$(med "${pre[@]}")
    lj=$(node bench/llama_encode.mjs "$MODEL.gguf" "$MODEL-mmproj.gguf" "$pic" --threads "$THREADS" | grep '^{"engine"' | tail -1)
    lms=$(node -e 'process.stdout.write(String(JSON.parse(process.argv[1]).prompt_ms/1000))' "$lj")
    echo "   llama.cpp $size: picture + prompt ${lms} s" >&2
    ratio=$(awk -v a="$lms" -v b="$pe" -v c="$pp" 'BEGIN {printf "%.2f", a / (b + c)}')
    rows+="| $size | $pe | $pp | $(awk -v b="$pe" -v c="$pp" 'BEGIN {printf "%.2f", b + c}') | $lms | ${ratio}x |"$'\n'
done
section=$(cat <<MD
<!-- encode:begin -->
## Pictures: encode and prefill (synthetic 2B mmproj, F16; LLM q4_k_m)

$(date -u +%Y-%m-%d), $(lscpu | sed -n 's/^Model name: *//p'), $THREADS threads. Reproduce: \`bash bench/encode.sh\`.
The prompt is one picture and a short question; pinhole's times are medians of $REPS runs (encode = the
vision tower; prefill = the picture's rows and the text around them in the LLM); llama.cpp's is the
prompt time of its own timings, which covers both, measured once.

| picture | pinhole encode s | pinhole prefill s | pinhole total s | llama.cpp total s | speed-up |
|---|---|---|---|---|---|
$rows
<!-- encode:end -->
MD
)
touch bench/RESULTS.md
node -e '
const fs = require("fs"); const f = "bench/RESULTS.md"; const sec = process.argv[1];
let s = fs.readFileSync(f, "utf8");
const re = /<!-- encode:begin -->[\s\S]*<!-- encode:end -->/;
s = re.test(s) ? s.replace(re, sec) : s.trimEnd() + "\n\n" + sec + "\n";
fs.writeFileSync(f, s);' "$section"
echo "$section"
rm -rf "$TMP"
