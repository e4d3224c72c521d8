#!/usr/bin/env bash
# Two pinhole binaries side by side at depth: `pinhole bench -d D` prefill and
# decode, runs alternating (A, B, A, B, ...), one JSON line per run. Builds
# nothing; not part of CI.
#
#   bash bench/depth.sh BEFORE_BINARY AFTER_BINARY MODEL.gguf > results.jsonl
#
# Environment (defaults in brackets): DEPTHS ["512 2048 8192"], PP [512],
# TG [32], ROUNDS [3], THREADS [2]. Summarize with
# `node bench/depth_table.mjs results.jsonl`.
set -euo pipefail
[ $# -eq 3 ] || { sed -n 2,10p "$0" >&2; exit 2; }
A=$1 B=$2 MODEL=$3
DEPTHS=${DEPTHS:-"512 2048 8192"} PP=${PP:-512} TG=${TG:-32} ROUNDS=${ROUNDS:-3} THREADS=${THREADS:-2}
for r in $(seq 1 "$ROUNDS"); do
    for d in $DEPTHS; do
        for which in before after; do
            bin=$A; [ "$which" = after ] && bin=$B
            load=$(cut -d' ' -f1 /proc/loadavg)
            out=$("$bin" bench -m "$MODEL" --no-mmproj -p "$PP" -n "$TG" -d "$d" -r 1 -t "$THREADS")
            printf '{"round":%d,"depth":%d,"which":"%s","load":%s,"bench":%s}\n' "$r" "$d" "$which" "$load" "$out"
        done
    done
done
