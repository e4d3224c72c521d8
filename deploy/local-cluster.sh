#!/usr/bin/env bash
# local-cluster.sh: several `pinhole serve` replicas of one model on this
# machine, behind HAProxy (deploy/haproxy.cfg), with a Redis for their
# shared tier; everything on 127.0.0.1. Reference: docs/cluster.md.
#
# usage: deploy/local-cluster.sh up N --model LLM.gguf|DIR|REF [--mmproj MMPROJ.gguf] [options] [-- SERVE-ARGS...]
#        deploy/local-cluster.sh down   [--state DIR]
#        deploy/local-cluster.sh status [--state DIR]
#        deploy/local-cluster.sh restart K [--kill] [--fresh] [--state DIR]
#
#   up N      start Redis, N replicas and HAProxy, and wait until every
#             replica's GET /health answers 200 and HAProxy answers; if one
#             does not, stop what was started, show its log's end, exit 1
#   down      stop them all (SIGTERM, SIGKILL after --stop-s); stopping what
#             is not running is no error
#   status    each part's pid, port and health; exit 0 when every part runs
#             and answers, 3 when one does not, or nothing runs
#   restart K stop replica K (SIGTERM; --kill: SIGKILL, a crash) and start
#             it again with the same command, then wait for its /health;
#             --fresh: its caches (--kv-disk-dir, --image-cache-dir) emptied
#             first, as on a machine that replaced it
#
# options (each also from the environment variable named after it):
#   --model FILE|DIR|REF   the model, as `pinhole serve -m` takes it (required for
#                          up)                                    PINHOLE_CLUSTER_MODEL
#   --mmproj FILE          its vision file (default: what pinhole serve finds
#                          beside the model)                      PINHOLE_CLUSTER_MMPROJ
#   --state DIR            pid files, logs, configs and each replica's caches
#                          (default ${XDG_STATE_HOME:-~/.local/state}/pinhole-cluster)
#                                                                 PINHOLE_CLUSTER_DIR
#   --port N               HAProxy's port (default 8080)          PINHOLE_CLUSTER_PORT
#   --base-port N          replica K listens on N+K-1 (default 8081)
#                                                                 PINHOLE_CLUSTER_BASE_PORT
#   --redis-port N         Redis's port (default 6390)            PINHOLE_CLUSTER_REDIS_PORT
#   --redis on|off         start Redis (default on)               PINHOLE_CLUSTER_REDIS
#   --redis-maxmemory SIZE Redis's memory bound (default 1gb; least recently
#                          used keys go first)                    PINHOLE_CLUSTER_REDIS_MAXMEMORY
#   --shared-tier auto|on|off
#                          give the replicas --shared-tier redis://127.0.0.1:PORT
#                          (auto, the default: when Redis runs and
#                          `pinhole serve --help` lists the flag) PINHOLE_CLUSTER_SHARED_TIER
#   --parallel N           each replica's --parallel, and its maxconn in
#                          HAProxy (default 4)                    PINHOLE_CLUSTER_PARALLEL
#   --threads N            each replica's -t (default: pinhole's; with N
#                          replicas on one machine, cores/N is fairer)
#                                                                 PINHOLE_CLUSTER_THREADS
#   --check-inter T        HAProxy's health check interval (default 2s)
#                                                                 PINHOLE_LB_CHECK_INTER
#   --balance-factor N     HAProxy's hash-balance-factor: the bounded load,
#                          in % of the average (default 150; 0: strict
#                          affinity)                              PINHOLE_LB_BALANCE_FACTOR
#   --haproxy-cfg FILE     the HAProxy configuration to start from, with its
#                          "# >>> replicas" ... "# <<< replicas" lines
#                          (default: deploy/haproxy.cfg beside this script)
#                                                                 PINHOLE_CLUSTER_HAPROXY_CFG
#   --wait-s S             how long up waits for the parts to answer (default 300)
#                                                                 PINHOLE_CLUSTER_WAIT_S
#   --stop-s S             how long down waits after SIGTERM (default 30)
#                                                                 PINHOLE_CLUSTER_STOP_S
#   -- SERVE-ARGS...       more arguments for every replica's pinhole serve
#
# Programs: $PINHOLE_BIN, else build/pinhole of this repository, else
# pinhole on PATH; $HAPROXY_BIN (default haproxy); $REDIS_SERVER_BIN
# (default redis-server).
set -euo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname -- "$HERE")

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
die() { printf 'local-cluster: %s\n' "$*" >&2; exit 1; }
note() { printf 'local-cluster: %s\n' "$*" >&2; }

# ---- options -------------------------------------------------------------

cmd=""
replicas=""
model=${PINHOLE_CLUSTER_MODEL:-}
mmproj=${PINHOLE_CLUSTER_MMPROJ:-}
state=${PINHOLE_CLUSTER_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/pinhole-cluster}
lb_port=${PINHOLE_CLUSTER_PORT:-8080}
base_port=${PINHOLE_CLUSTER_BASE_PORT:-8081}
redis_port=${PINHOLE_CLUSTER_REDIS_PORT:-6390}
redis_on=${PINHOLE_CLUSTER_REDIS:-on}
redis_maxmemory=${PINHOLE_CLUSTER_REDIS_MAXMEMORY:-1gb}
shared_tier=${PINHOLE_CLUSTER_SHARED_TIER:-auto}
parallel=${PINHOLE_CLUSTER_PARALLEL:-4}
threads=${PINHOLE_CLUSTER_THREADS:-}
check_inter=${PINHOLE_LB_CHECK_INTER:-2s}
balance_factor=${PINHOLE_LB_BALANCE_FACTOR:-150}
wait_s=${PINHOLE_CLUSTER_WAIT_S:-300}
stop_s=${PINHOLE_CLUSTER_STOP_S:-30}
cfg_template=${PINHOLE_CLUSTER_HAPROXY_CFG:-$HERE/haproxy.cfg}
serve_extra=()
restart_kill=0
restart_fresh=0

need_value() { [[ $# -ge 2 ]] || die "$1 needs a value (see --help)"; }
while [[ $# -gt 0 ]]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --model) need_value "$@"; model=$2; shift 2 ;;
        --mmproj) need_value "$@"; mmproj=$2; shift 2 ;;
        --state) need_value "$@"; state=$2; shift 2 ;;
        --port) need_value "$@"; lb_port=$2; shift 2 ;;
        --base-port) need_value "$@"; base_port=$2; shift 2 ;;
        --redis-port) need_value "$@"; redis_port=$2; shift 2 ;;
        --redis) need_value "$@"; redis_on=$2; shift 2 ;;
        --redis-maxmemory) need_value "$@"; redis_maxmemory=$2; shift 2 ;;
        --shared-tier) need_value "$@"; shared_tier=$2; shift 2 ;;
        --parallel) need_value "$@"; parallel=$2; shift 2 ;;
        --threads) need_value "$@"; threads=$2; shift 2 ;;
        --check-inter) need_value "$@"; check_inter=$2; shift 2 ;;
        --balance-factor) need_value "$@"; balance_factor=$2; shift 2 ;;
        --haproxy-cfg) need_value "$@"; cfg_template=$2; shift 2 ;;
        --wait-s) need_value "$@"; wait_s=$2; shift 2 ;;
        --stop-s) need_value "$@"; stop_s=$2; shift 2 ;;
        --kill) restart_kill=1; shift ;;
        --fresh) restart_fresh=1; shift ;;
        --) shift; serve_extra=("$@"); break ;;
        -*) die "unknown option $1 (see --help)" ;;
        *)
            if [[ -z $cmd ]]; then cmd=$1
            elif [[ ($cmd == up || $cmd == restart) && -z $replicas ]]; then replicas=$1
            else die "unexpected argument $1 (see --help)"; fi
            shift ;;
    esac
done

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
on_off() { # NAME VALUE [auto] -> on|off|auto
    case $2 in
        1|on|yes|true) echo on ;;
        0|off|no|false) echo off ;;
        auto) if [[ ${3:-} == auto ]]; then echo auto; else die "$1: on or off, not $2"; fi ;;
        *) die "$1: ${3:+auto, }on or off, not $2" ;;
    esac
}
for v in lb_port base_port redis_port parallel wait_s stop_s balance_factor; do
    is_uint "${!v}" || die "$v: not a number: ${!v}"
done
[[ -z $threads ]] || is_uint "$threads" || die "threads: not a number: $threads"
redis_on=$(on_off redis "$redis_on")
shared_tier=$(on_off shared-tier "$shared_tier" auto)
[[ $redis_maxmemory =~ ^[0-9]+([kKmMgG][bB]?)?$ ]] || die "redis-maxmemory: a size (1gb, 512mb ...), not $redis_maxmemory"
[[ $state == /* ]] || state=$PWD/$state
[[ $state != *[$'\n"']* ]] || die "state: a folder name without a newline or a double quote"

# ---- processes -----------------------------------------------------------
# A pid file holds "PID START PORT": START, the process's start time (field
# 22 of /proc/PID/stat), tells the process from a later one given its pid
# (Linux only).

proc_start() { # PID -> its start time, or fails
    local s f t ts live=0
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    s=${s##*) }
    read -r -a f <<<"$s"
    # ended, not yet reaped: every thread of it (a killed process's first
    # thread ends before the others, which hold its sockets until they end)
    for t in /proc/"$1"/task/*/stat; do
        ts=$(cat "$t" 2>/dev/null) || continue
        ts=${ts##*) }
        if [[ ${ts:0:1} != [ZX] ]]; then live=1; break; fi
    done
    ((live)) || return 1
    printf '%s\n' "${f[19]}"
}

record() { # PIDFILE PID PORT
    local start
    start=$(proc_start "$2") || start=0
    printf '%s %s %s\n' "$2" "$start" "$3" >"$1"
}

# PIDFILE -> sets pf_pid, pf_port; succeeds when that process still runs
pf_pid=""; pf_port=""
running() {
    local start now
    pf_pid=""; pf_port=""
    [[ -r $1 ]] || return 1
    read -r pf_pid start pf_port <"$1" || true
    is_uint "${pf_pid:-x}" || return 1
    now=$(proc_start "$pf_pid") || return 1
    [[ $now == "$start" ]]
}

# Sends SIGTERM to the processes of the pid files given, waits up to
# stop_s for them to end, then SIGKILLs those left; removes the pid files.
stop_all() {
    local pf pids=() names=() i deadline
    for pf in "$@"; do
        if running "$pf"; then
            kill -TERM "$pf_pid" 2>/dev/null || true
            pids+=("$pf_pid"); names+=("$pf")
        fi
    done
    deadline=$((SECONDS + stop_s))
    for i in "${!pids[@]}"; do
        while running "${names[$i]}" && ((SECONDS < deadline)); do sleep 0.1; done
        if running "${names[$i]}"; then
            note "pid ${pids[$i]} still runs ${stop_s} s after SIGTERM: SIGKILL"
            kill -KILL "${pids[$i]}" 2>/dev/null || true
            while running "${names[$i]}"; do sleep 0.05; done
        fi
    done
    for pf in "$@"; do rm -f -- "$pf"; done
}

# ---- probes ----------------------------------------------------------------

# PORT PATH -> the HTTP status of GET PATH on 127.0.0.1:PORT, or nothing
# (bash's /dev/tcp: no curl needed)
http_status() {
    # shellcheck disable=SC2016 # the script's own $1 $2
    timeout 5 bash -c '
        exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" "$2" >&3
        IFS=" " read -r _ code _ <&3 && printf "%s\n" "$code"
    ' _ "$1" "$2" 2>/dev/null || true
}

# PORT [PASSWORD-FILE] -> succeeds when Redis answers PING
redis_ping() {
    # shellcheck disable=SC2016 # the script's own $1 $2
    timeout 5 bash -c '
        exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        if [[ -n $2 ]]; then
            IFS= read -r pw <"$2"
            printf "AUTH %s\r\n" "$pw" >&3
            IFS= read -r _ <&3
        fi
        printf "PING\r\n" >&3
        IFS= read -r answer <&3
        printf "QUIT\r\n" >&3
        [[ $answer == +PONG* ]]
    ' _ "$1" "${2:-}" 2>/dev/null
}

# ---- the state folder ------------------------------------------------------

replica_dirs() { # the replica-K folders of the state folder, by K
    local d
    for d in "$state"/replica-*; do
        [[ -d $d && ${d##*/replica-} =~ ^[0-9]+$ ]] && printf '%s\n' "${d##*/replica-}"
    done | sort -n | while read -r k; do printf '%s\n' "$state/replica-$k"; done
}

pidfiles_in_stop_order() { # HAProxy first, then the replicas, Redis last
    local d
    printf '%s\n' "$state/haproxy.pid"
    while read -r d; do printf '%s\n' "$d/pid"; done < <(replica_dirs)
    printf '%s\n' "$state/redis/pid"
}

cmd_down() {
    [[ -d $state ]] || { note "nothing to stop: no $state"; return 0; }
    local files=()
    mapfile -t files < <(pidfiles_in_stop_order)
    # HAProxy first, so that no new request reaches a stopping replica;
    # then the replicas together (each finishes what it runs); Redis last.
    stop_all "${files[0]}"
    stop_all "${files[@]:1:${#files[@]}-2}"
    stop_all "${files[${#files[@]}-1]}"
    rm -f -- "$state/haproxy.sock"
    note "stopped (state in $state)"
}

# NAME PIDFILE KIND -> one line; returns 1 when the part is not well
status_line() {
    local name=$1 pf=$2 kind=$3 health="-" ok=0 pid port
    if running "$pf"; then
        pid=$pf_pid; port=$pf_port
        case $kind in
            redis) if redis_ping "$port" "$(redis_password_file)"; then health="PONG"; else health="no answer"; ok=1; fi ;;
            *) health=$(http_status "$port" /health); [[ $health == 200 ]] || ok=1; health=${health:-no answer} ;;
        esac
        printf '%-10s pid %-8s port %-6s %s\n' "$name" "$pid" "$port" "$health"
    elif [[ -n $pf_pid ]]; then
        printf '%-10s pid %-8s port %-6s %s\n' "$name" "-" "${pf_port:--}" "not running (pid $pf_pid is gone)"
        ok=1
    else
        printf '%-10s pid %-8s port %-6s %s\n' "$name" "-" "-" "stopped"
        ok=1
    fi
    return "$ok"
}

redis_password_file() {
    if [[ -s $state/redis/password ]]; then printf '%s\n' "$state/redis/password"; fi
}

cmd_status() {
    local bad=0 d k any=0
    printf 'state %s\n' "$state"
    if [[ -d $state ]]; then
        if [[ -e $state/redis/pid ]]; then any=1; status_line redis "$state/redis/pid" redis || bad=1; fi
        while read -r d; do
            k=${d##*/replica-}
            if [[ -e $d/pid ]]; then any=1; status_line "r$k" "$d/pid" http || bad=1; fi
        done < <(replica_dirs)
        if [[ -e $state/haproxy.pid ]]; then any=1; status_line haproxy "$state/haproxy.pid" http || bad=1; fi
    fi
    if ((any == 0)); then printf 'nothing runs\n'; return 3; fi
    ((bad == 0)) || return 3
}

# ---- up --------------------------------------------------------------------

find_pinhole() {
    if [[ -n ${PINHOLE_BIN:-} ]]; then
        [[ -x $PINHOLE_BIN ]] || die "PINHOLE_BIN=$PINHOLE_BIN is not an executable"
        printf '%s\n' "$PINHOLE_BIN"
    elif [[ -x $REPO/build/pinhole ]]; then
        printf '%s\n' "$REPO/build/pinhole"
    elif command -v pinhole >/dev/null; then
        command -v pinhole
    else
        die "no pinhole: set PINHOLE_BIN, build $REPO/build/pinhole, or put pinhole on PATH"
    fi
}

show_log_end() { # NAME FILE
    [[ -s $2 ]] || return 0
    note "the end of $1's log ($2):"
    tail -n 15 -- "$2" | sed 's/^/    /' >&2
}

# Waits until CHECK (a command) succeeds, failing when the process of
# PIDFILE ends first or wait_s passes.
wait_for() { # NAME PIDFILE LOG CHECK...
    local name=$1 pf=$2 log=$3
    shift 3
    while true; do
        if ! running "$pf"; then show_log_end "$name" "$log"; die "$name exited before it answered"; fi
        if "$@"; then return 0; fi
        if ((SECONDS >= up_deadline)); then
            show_log_end "$name" "$log"
            die "$name did not answer within $wait_s s (--wait-s)"
        fi
        sleep 0.2
    done
}
health_ok() { [[ $(http_status "$1" /health) == 200 ]]; }

started_ok=0
up_cleanup() {
    if ((started_ok == 0)); then
        note "up failed: stopping what was started"
        stop_s=5 cmd_down >/dev/null 2>&1 || true
    fi
}

cmd_up() {
    if ! { is_uint "${replicas:-x}" && ((replicas >= 1)); }; then
        die "up needs the number of replicas (up N, N >= 1)"
    fi
    [[ -n $model ]] || die "up needs --model (or PINHOLE_CLUSTER_MODEL): the LLM GGUF file, a folder, or a pulled OWNER/NAME[:QUANT]"
    local bin haproxy redis help k port d f
    bin=$(find_pinhole)
    haproxy=${HAPROXY_BIN:-haproxy}
    redis=${REDIS_SERVER_BIN:-redis-server}
    command -v "$haproxy" >/dev/null || die "no $haproxy (install haproxy, or set HAPROXY_BIN)"
    [[ -r $cfg_template ]] || die "no $cfg_template"
    help=$("$bin" serve --help 2>&1 || true)
    local has_tier=0 has_pwfile=0
    grep -q -- '--shared-tier ' <<<"$help" && has_tier=1
    grep -q -- '--shared-tier-password-file' <<<"$help" && has_pwfile=1
    if [[ $shared_tier == on ]]; then
        ((has_tier)) || die "--shared-tier on: $bin serve does not know --shared-tier"
        [[ $redis_on == on ]] || die "--shared-tier on needs Redis (--redis on)"
    elif [[ $shared_tier == auto ]]; then
        if [[ $redis_on == on ]] && ((has_tier)); then shared_tier=on; else shared_tier=off; fi
    fi
    [[ $redis_on == off ]] || command -v "$redis" >/dev/null || die "no $redis (install redis-server, set REDIS_SERVER_BIN, or --redis off)"

    umask 077
    mkdir -p -- "$state"
    [[ -O $state ]] || die "$state belongs to another user"
    chmod 700 -- "$state"
    local pf
    while read -r pf; do
        if running "$pf"; then die "already up (pid $pf_pid of $pf runs): see status, or down first"; fi
    done < <(pidfiles_in_stop_order)
    # the replicas of an earlier, larger cluster
    while read -r d; do rm -f -- "$d/pid"; done < <(replica_dirs)

    up_deadline=$((SECONDS + wait_s))
    trap up_cleanup EXIT
    trap 'exit 130' INT TERM

    # Redis: loopback only, nothing saved, least recently used keys evicted
    # at --redis-maxmemory; a password (when pinhole can read it from a
    # file) so that other local users cannot read the tier.
    local pwfile=""
    if [[ $redis_on == on ]]; then
        mkdir -p -- "$state/redis"
        f=$state/redis/redis.conf
        {
            printf '# written by local-cluster.sh up\n'
            printf 'bind 127.0.0.1\nport %s\nprotected-mode yes\n' "$redis_port"
            printf 'save ""\nappendonly no\n'
            printf 'maxmemory %s\nmaxmemory-policy allkeys-lru\n' "$redis_maxmemory"
            printf 'dir "%s"\n' "$state/redis"
            printf 'daemonize no\n'
        } >"$f"
        if ((has_pwfile)); then
            pwfile=$state/redis/password
            [[ -s $pwfile ]] || od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$pwfile"
            printf 'requirepass %s\n' "$(cat -- "$pwfile")" >>"$f"
        else
            rm -f -- "$state/redis/password"
        fi
        "$redis" "$f" >"$state/redis/redis.log" 2>&1 </dev/null &
        record "$state/redis/pid" "$!" "$redis_port"
        wait_for redis "$state/redis/pid" "$state/redis/redis.log" redis_ping "$redis_port" "$pwfile"
    fi

    # The replicas: each with its own caches, on its own port.
    local args=()
    for ((k = 1; k <= replicas; k++)); do
        port=$((base_port + k - 1))
        d=$state/replica-$k
        mkdir -p -- "$d"
        args=(serve -m "$model")
        [[ -z $mmproj ]] || args+=(--mmproj "$mmproj")
        args+=(--host 127.0.0.1 --port "$port" --parallel "$parallel"
               --kv-disk-dir "$d/kv" --image-cache-dir "$d/images")
        [[ -z $threads ]] || args+=(-t "$threads")
        if [[ $shared_tier == on ]]; then
            args+=(--shared-tier "redis://127.0.0.1:$redis_port")
            [[ -z $pwfile ]] || args+=(--shared-tier-password-file "$pwfile")
        fi
        args+=("${serve_extra[@]}")
        printf '%q ' "$bin" "${args[@]}" >"$d/command"; printf '\n' >>"$d/command"
        "$bin" "${args[@]}" >"$d/pinhole.log" 2>&1 </dev/null &
        record "$d/pid" "$!" "$port"
    done
    for ((k = 1; k <= replicas; k++)); do
        d=$state/replica-$k
        wait_for "replica r$k" "$d/pid" "$d/pinhole.log" health_ok "$((base_port + k - 1))"
    done

    # HAProxy: the shipped configuration, its server lines replaced.
    f=$state/haproxy.cfg
    if ! grep -q '^ *# >>> replicas' "$cfg_template" || ! grep -q '^ *# <<< replicas' "$cfg_template"; then
        die "$cfg_template has no '# >>> replicas' ... '# <<< replicas' lines"
    fi
    awk -v n="$replicas" -v base="$base_port" '
        /^ *# >>> replicas/ { print; for (k = 1; k <= n; k++) printf "    server r%d 127.0.0.1:%d\n", k, base + k - 1; skip = 1; next }
        /^ *# <<< replicas/ { skip = 0 }
        !skip { print }
    ' "$cfg_template" >"$f"
    export PINHOLE_LB_ADDR=127.0.0.1
    export PINHOLE_LB_PORT=$lb_port
    export PINHOLE_LB_SOCKET=$state/haproxy.sock
    export PINHOLE_LB_MAXCONN=${PINHOLE_LB_MAXCONN:-$parallel}
    export PINHOLE_LB_CHECK_INTER=$check_inter
    export PINHOLE_LB_BALANCE_FACTOR=$balance_factor
    export PINHOLE_LB_CHECK_FASTINTER=${PINHOLE_LB_CHECK_FASTINTER:-$check_inter}
    "$haproxy" -c -q -f "$f" >"$state/haproxy.log" 2>&1 || { show_log_end haproxy "$state/haproxy.log"; die "$f does not check"; }
    "$haproxy" -f "$f" -db >"$state/haproxy.log" 2>&1 </dev/null &
    record "$state/haproxy.pid" "$!" "$lb_port"
    wait_for haproxy "$state/haproxy.pid" "$state/haproxy.log" health_ok "$lb_port"

    started_ok=1
    trap - EXIT INT TERM
    note "up: http://127.0.0.1:$lb_port/v1 -> $replicas replicas on 127.0.0.1:$base_port..$((base_port + replicas - 1)) (--parallel $parallel)"
    if [[ $redis_on == on ]]; then
        note "redis on 127.0.0.1:$redis_port; shared tier $shared_tier"
    else
        note "no redis; shared tier off"
    fi
    note "state, logs: $state"
}

# Replica K (replicas) stopped and started again with the command up gave it.
cmd_restart() {
    is_uint "${replicas:-x}" || die "restart needs the replica's number (restart K)"
    local d=$state/replica-$replicas
    [[ -r $d/command ]] || die "no replica $replicas in $state (up first)"
    if running "$d/pid"; then
        if ((restart_kill)); then
            kill -KILL "$pf_pid" 2>/dev/null || true
            while running "$d/pid"; do sleep 0.05; done
            rm -f -- "$d/pid"
        else
            stop_all "$d/pid"
        fi
    fi
    local how="" port="" i args=()
    if ((restart_fresh)); then rm -rf -- "$d/kv" "$d/images"; how=" (caches emptied)"; fi
    # the command as up wrote it (printf %q words)
    eval "args=($(cat -- "$d/command"))"
    for ((i = 0; i + 1 < ${#args[@]}; i++)); do [[ ${args[i]} == --port ]] && port=${args[i + 1]}; done
    is_uint "${port:-x}" || die "$d/command has no --port"
    up_deadline=$((SECONDS + wait_s))
    "${args[@]}" >>"$d/pinhole.log" 2>&1 </dev/null &
    record "$d/pid" "$!" "$port"
    wait_for "replica r$replicas" "$d/pid" "$d/pinhole.log" health_ok "$port"
    note "restarted replica r$replicas on 127.0.0.1:$port$how"
}

case $cmd in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    restart) cmd_restart ;;
    "") usage >&2; exit 2 ;;
    *) die "unknown command $cmd (up N, down, status, restart K; see --help)" ;;
esac
