#!/usr/bin/env bash
# Restart benchmark of the disk tier (src/state/disk_tier.h): after the server
# restarts, how fast does turn 3 of a picture chat start? pinhole serve
# --kv-disk-dir resumes from its checkpoint file; llama.cpp's llama-server
# (the native peer build, ../shared/tools/llama-peer.sh) either recomputes
# the conversation (picture encoded again) or restores a slot it was told to
# save (--slot-save-path, POST /slots/0?action=save|restore). Also restore
# time against checkpoint size for text chats of ~1k-8k tokens. The engines
# run one at a time; before each measurement restart.mjs waits for a quiet
# machine (no compiler or test running, CPUs idle). Not part of CI.
#
#   bash bench/restart.sh [PINHOLE_BINARY]          (default: build/pinhole)
#
# Knobs (defaults in brackets): THREADS [2], CTX [8192] (picture chat),
# D_CTX [16384] (text chats), SIZE [1024x768], PARTS ["A BC D"] (A: pinhole,
# BC: llama-server recompute and slot restore, D: restore against size; T: a
# ~800-token text chat on both, run anyway when llama-server refuses to save
# the picture chat), SIZES [1024,2048,4096,8192] (D, tokens), REPS [1]
# (resumed turns per engine and state), PAGE_CACHE [warm,cold,warmup] (the
# states of the resumed turn: warm: the files as written, in the page cache;
# cold: their pages dropped first: sync, then dd iflag=nocache count=0; warmup, pinhole
# only: warm, and one short unrelated request before the measured turn, as
# llama-server runs a warm-up pass when it starts), ENGINES [pinhole,llama]
# (which engines run: A is pinhole's, BC llama-server's, D and T both), PEER [the llama.cpp bin folder that
# llama-peer.sh prints], JSONL [bench/results/restart-DATE.jsonl: per-run
# JSON lines are appended to it]. Prints the tables (restart.mjs table).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PINHOLE=${1:-build/pinhole}
THREADS=${THREADS:-2}
CTX=${CTX:-8192}
D_CTX=${D_CTX:-16384}
SIZE=${SIZE:-1024x768}
PARTS=${PARTS:-"A BC D"}
SIZES=${SIZES:-1024,2048,4096,8192}
REPS=${REPS:-1}
PAGE_CACHE=${PAGE_CACHE:-warm,cold,warmup}
ENGINES=${ENGINES:-pinhole,llama}
MODEL=bench/models/synth-2b-q4_k_m
die() { echo "restart.sh: $*" >&2; exit 1; }
[ -x "$PINHOLE" ] || die "no pinhole binary at '$PINHOLE'"
[ -f "$MODEL.gguf" ] && [ -f "$MODEL-mmproj.gguf" ] ||
    die "$MODEL.gguf / -mmproj.gguf missing: pinhole synth --shape 2b --type q4_k_m --vocab ../shared/oracle/models/tiny-f16.gguf -o $MODEL"
if [ -z "${PEER:-}" ]; then
    PEER=$(PEER_ONLY_EXISTING=1 bash "$ROOT/../shared/tools/llama-peer.sh" 2>/dev/null ||
           PEER_ONLY_EXISTING=1 bash /work/shared/tools/llama-peer.sh) ||
        die "the native llama.cpp peer is not built: bash ../shared/tools/llama-peer.sh (10-40 minutes)"
fi
LLAMA_SERVER=$PEER/llama-server
[ -x "$LLAMA_SERVER" ] || die "no llama-server in $PEER"
JSONL=${JSONL:-bench/results/restart-$(date -u +%Y-%m-%d).jsonl}
mkdir -p "$(dirname "$JSONL")"
touch "$JSONL"

TMP=$(mktemp -d /tmp/pinhole-restart.XXXXXX)
# the servers' logs and the lines measured so far stay in $TMP when something fails
trap 'rc=$?; if [ $rc = 0 ]; then rm -rf "$TMP"; else echo "restart.sh: failed ($rc); logs and lines kept in $TMP" >&2; fi' EXIT
w=${SIZE%x*}; h=${SIZE#*x}
node bench/make_picture.mjs "$w" "$h" "$TMP/picture.png" 0
cc -O2 -march=native -pthread bench/membw.c -o "$TMP/membw"
membw() { node bench/restart.mjs quiet membw >/dev/null; "$TMP/membw" "$THREADS" 1024 10; }

CMD="bash bench/restart.sh"
[ "$PINHOLE" = build/pinhole ] || CMD="$CMD $PINHOLE"
for v in THREADS CTX D_CTX SIZE PARTS SIZES REPS PAGE_CACHE ENGINES; do
    case "$v=${!v}" in
    THREADS=2 | CTX=8192 | D_CTX=16384 | SIZE=1024x768 | "PARTS=A BC D" | SIZES=1024,2048,4096,8192 | REPS=1 | PAGE_CACHE=warm,cold,warmup | ENGINES=pinhole,llama) ;;
    *) CMD="$v=\"${!v}\" $CMD" ;;
    esac
done

echo "== memory read bandwidth ($THREADS threads)" >&2
BW_BEFORE=$(membw)
echo "$BW_BEFORE" >&2
T0=$(date +%s)
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
node bench/restart.mjs run --pinhole "$PINHOLE" --llama-server "$LLAMA_SERVER" --model "$MODEL.gguf" \
    --mmproj "$MODEL-mmproj.gguf" --picture "$TMP/picture.png" --tmp "$TMP" --threads "$THREADS" \
    --ctx "$CTX" --d-ctx "$D_CTX" --parts "$PARTS" --sizes "$SIZES" --reps "$REPS" --page-cache "$PAGE_CACHE" --engines "$ENGINES" \
    >"$TMP/run.jsonl"
BW_AFTER=$(membw)
echo "$BW_AFTER" >&2

# one line about the run: machine, versions, bandwidth, command
flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|fma|f16c|avx512f|avx512bw|avx512vl|avx512_vnni|avx512_bf16|amx_tile' | tr '\n' ' ')
node -e '
const [start, secs, cmd, git, cpu, ncpu, mem, flags, kern, llv, bwb, bwa, pinhole, peer, sizeArg] = process.argv.slice(1)
process.stdout.write(JSON.stringify({ meta: true, start, duration_s: Number(secs), command: cmd, git,
  machine: { cpu, cpus: Number(ncpu), memory_gib: Number(mem), isa_flags: flags.trim(), pinhole_kernels: kern,
             read_bandwidth_before: JSON.parse(bwb), read_bandwidth_after: JSON.parse(bwa) },
  pinhole, llama_server: peer, llama_cpp_version: llv, picture: sizeArg }) + "\n")' \
    "$START" "$(( $(date +%s) - T0 ))" "$CMD" "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo '+dirty src')" \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')" "$(nproc)" \
    "$(awk '/MemTotal/ {printf "%.1f", $2/1048576}' /proc/meminfo)" "$flags" \
    "$(grep -ho 'pictures on, [a-z0-9_]*' "$TMP"/*pinhole-1.log | head -1 | sed 's/pictures on, //')" \
    "$("$LLAMA_SERVER" --version 2>&1 | head -1)" "$BW_BEFORE" "$BW_AFTER" "$PINHOLE" "$LLAMA_SERVER" "$SIZE" \
    >"$TMP/meta.jsonl"
cat "$TMP/meta.jsonl" "$TMP/run.jsonl" >>"$JSONL"
echo "== appended $(wc -l <"$TMP/run.jsonl") lines to $JSONL" >&2
node bench/restart.mjs table "$TMP/run.jsonl"
