#!/usr/bin/env bash
# The replicas' trace (issue 27): 24 picture conversations of 4 turns over
# 8 distinct pictures, through HAProxy to 3 replicas of one model on this
# machine (deploy/local-cluster.sh), one request at a time (bench/cluster.mjs).
# Between turn 1 and turn 2 every replica is killed and started again with
# its caches emptied (a replaced machine), so turns 2-4 run after a restart
# of their replica. Four configurations, each on a fresh cluster:
#   rr        no session key (HAProxy round robin), no shared tier
#   affinity  X-Pinhole-Session per conversation, no shared tier
#   shared    X-Pinhole-Session, --shared-tier on the cluster's Redis
#   never     as shared, without the restart: the reference for turns 2-4
# Not part of CI.
#
#   bash bench/cluster.sh [PINHOLE_BINARY]      (default: build/pinhole)
#
# MODEL [bench/models/synth-2b-q4_k_m: MODEL.gguf and MODEL-mmproj.gguf],
# SIZE [448x336] the pictures, CONVERSATIONS [24], PICTURES [8], TOKENS [8]
# per answer, THREADS [2] each replica's -t, CONFIGS ["rr affinity shared
# never"], JSONL [a file that collects the results; default a temporary one].
# Prints the table (cluster.mjs table).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export PINHOLE_BIN=${1:-$ROOT/build/pinhole}
MODEL=${MODEL:-bench/models/synth-2b-q4_k_m}
MODEL=${MODEL%.gguf}
SIZE=${SIZE:-448x336}
CONVERSATIONS=${CONVERSATIONS:-24}
PICTURES=${PICTURES:-8}
TOKENS=${TOKENS:-8}
THREADS=${THREADS:-2}
CONFIGS=${CONFIGS:-"rr affinity shared never"}
if [ ! -f "$MODEL.gguf" ] || [ ! -f "$MODEL-mmproj.gguf" ]; then
    echo "cluster.sh: no $MODEL.gguf and $MODEL-mmproj.gguf (bench/run.sh synthesizes the 2B pair)" >&2
    exit 1
fi
TMP=$(mktemp -d /tmp/pinhole-cluster-bench.XXXXXX)
STATE=$TMP/cluster
export PINHOLE_CLUSTER_DIR=$STATE PINHOLE_CLUSTER_PORT=18180 PINHOLE_CLUSTER_BASE_PORT=18181
export PINHOLE_CLUSTER_REDIS_PORT=16490 PINHOLE_LB_CHECK_INTER=500ms
trap 'deploy/local-cluster.sh down >/dev/null 2>&1 || true; rm -rf "$TMP"' EXIT
JSONL=${JSONL:-$TMP/results.jsonl}
touch "$JSONL"
mkdir -p "$TMP/pictures"
w=${SIZE%x*}; h=${SIZE#*x}
for ((i = 0; i < PICTURES; i++)); do node bench/make_picture.mjs "$w" "$h" "$TMP/pictures/p$i.png" "$i"; done
printf '{"kind":"meta","conversations":%d,"turns":4,"pictures":%d,"size":"%s","replicas":3,"model":"%s","threads":%d,"cpu":"%s"}\n' \
    "$CONVERSATIONS" "$PICTURES" "$SIZE" "$(basename "$MODEL")" "$THREADS" \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >>"$JSONL"

for config in $CONFIGS; do
    tier=off; session=on
    case $config in
        rr) session=off ;;
        affinity) ;;
        shared|never) tier=on ;;
        *) echo "cluster.sh: unknown configuration $config" >&2; exit 2 ;;
    esac
    rm -rf "$STATE"
    deploy/local-cluster.sh up 3 --model "$MODEL.gguf" --mmproj "$MODEL-mmproj.gguf" --threads "$THREADS" \
        --shared-tier "$tier" >&2
    run() {
        node bench/cluster.mjs phase --url "http://127.0.0.1:$PINHOLE_CLUSTER_PORT" \
            --replicas "$PINHOLE_CLUSTER_BASE_PORT,$((PINHOLE_CLUSTER_BASE_PORT + 1)),$((PINHOLE_CLUSTER_BASE_PORT + 2))" \
            --pictures "$TMP/pictures" --state "$TMP/$config.json" --config "$config" --session "$session" \
            --conversations "$CONVERSATIONS" --tokens "$TOKENS" "$@" | tee -a "$JSONL" >&2
    }
    run --turns 1
    if [ "$config" != never ]; then
        for k in 1 2 3; do deploy/local-cluster.sh restart "$k" --kill --fresh >&2; done
        sleep 2 # HAProxy's health checks see them up
    fi
    run --turns 2,3,4
    deploy/local-cluster.sh down >&2
done
node bench/cluster.mjs table "$JSONL"
