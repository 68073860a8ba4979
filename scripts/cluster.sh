#!/usr/bin/env bash
# Starts or stops a local Felix-C cluster for trying it out and for tests
# (docs/cluster.md, "Running a cluster"): a throwaway etcd (scripts/etcd.sh,
# loopback, auto-compaction on, its data under DIR/etcd) and N felix-broker
# processes on free loopback ports, node ids n1..nN, all serving the first
# broker's certificate (one pin for the whole cluster).
# Usage:
#   scripts/cluster.sh start DIR [N]   (N brokers, default 3, at most 9)
#   scripts/cluster.sh stop DIR        (SIGTERM to each broker by its PID, SIGKILL after
#                                       10 s; stops etcd; removes the data under DIR)
#   scripts/cluster.sh run [N]         (`make run-cluster`: start in a temporary directory,
#                                       print the commands to try, stop and remove it all
#                                       on Ctrl-C)
# The broker binary is $FELIX_BROKER, else build/release/felix-broker of this tree.
# Extra broker settings: FX_CLUSTER_SET="key=value key=value" (passed as --set each).
# `start` returns once every broker's /ready answers 200. Under DIR it leaves:
#   nI.log         broker nI's standard output and error     nI.pid  its PID
#   sI/            its state_dir (s1 holds the shared tls-cert.pem and tls-key.pem)
#   etcd/          etcd's data, log (etcd/etcd.log), PID and endpoint
#   cluster.env    shell lines: `export FELIX_SERVER=<every QUIC address, comma-separated>
#                  FELIX_PIN=<pin>`, `export FELIX_ADMIN=<n1's admin address>`, and
#                  per node NI_SERVER, NI_ADMIN, NI_PID (`. DIR/cluster.env`)
# It exits 1 with the reason when etcd or a broker cannot start (and stops what it
# started). `stop` keeps the nI.log files.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:-}
dir=${2:-}
if [ "$cmd" = run ]; then
    # `make run-cluster`: this script again, start then stop, on a directory of its own.
    n=${2:-3}
    dir=$(mktemp -d /tmp/felix-cluster.XXXXXX)
    trap 'echo; echo "cluster.sh: stopping the brokers and etcd"; "$here/cluster.sh" stop "$dir"; rm -rf "$dir"; exit 0' INT TERM
    "$here/cluster.sh" start "$dir" "$n" || { rm -rf "$dir"; exit 1; }
    broker=${FELIX_BROKER:-$here/../build/release/felix-broker}
    bin=$(cd "$(dirname "$broker")" && pwd)
    path=""
    [ -x "$bin/felix" ] && path="  export PATH=$bin:\$PATH    # the felix CLI built beside the broker"$'\n'
    cat <<EOT

A cluster of $n brokers (n1..n$n) and an etcd, all on loopback, data and logs in $dir.
In another terminal:
  . $dir/cluster.env    # FELIX_SERVER (every node), FELIX_PIN, FELIX_ADMIN (n1), NI_SERVER, NI_ADMIN, NI_PID
$path  felix cluster status                 # the nodes, their leases, which stream is where
  felix pub --ack per_message t1/default/demo hello
      # n1 serves the stream, or refuses: "stream t1/default/demo is served by nX"
      # (a publish is not forwarded yet): publish to the owner it names
  felix pub --server \$N2_SERVER --ack per_message t1/default/demo hello
      # here the owner named was n2 (use the NI_SERVER of yours)
  felix sub --server \$N${n}_SERVER t1/default/demo
      # through a node that is not the owner: libfelix follows its redirect to the owner
  felix cluster status --admin \$N${n}_ADMIN   # every node names the same owner
  kill -9 \$N2_PID                       # the owner dies: after its lease TTL (5 s) it leaves the
                                          # nodes, and the next publish or subscribe places its streams
                                          # on a live node at epoch 2 (cluster status shows it)
Logs: $dir/nI.log and $dir/etcd/etcd.log. Ctrl-C stops the brokers and etcd and removes $dir.
EOT
    while :; do
        sleep 1
    done
fi
if [ -z "$cmd" ] || [ -z "$dir" ]; then
    echo "usage: scripts/cluster.sh start DIR [N] | stop DIR | run [N]" >&2
    exit 2
fi

free_port() { # $1: tcp or udp
    python3 -c 'import socket,sys
s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM if sys.argv[1]=="udp" else socket.SOCK_STREAM)
s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' "$1"
}

# Stops the process whose PID is in file $1: SIGTERM, then SIGKILL after 10 s.
stop_pid() {
    [ -f "$1" ] || return 0
    local pid
    pid=$(cat "$1")
    if kill "$pid" 2>/dev/null; then
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -9 "$pid" 2>/dev/null; then
            echo "cluster.sh: broker pid $pid ignored SIGTERM for 10 s: killed" >&2
        fi
    fi
    rm -f "$1"
}

stop_all() {
    for f in "$dir"/n*.pid; do
        [ -e "$f" ] || continue
        stop_pid "$f"
    done
    bash "$here/etcd.sh" stop "$dir/etcd" || true
    rm -rf "$dir"/s[0-9]* "$dir/etcd" "$dir/cluster.env"
}

# Waits for "export FELIX_SERVER=" in broker log $1 (PID $2); prints the line.
wait_banner() {
    for _ in $(seq 1 300); do
        if grep -q 'export FELIX_SERVER=' "$1" 2>/dev/null; then
            grep -m1 'export FELIX_SERVER=' "$1"
            return 0
        fi
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# Waits until http://$1/ready answers 200 (PID $2); 30 s at most.
wait_ready() {
    local code=000
    for _ in $(seq 1 300); do
        code=$(curl -s -o /dev/null -m 1 -w '%{http_code}' "http://$1/ready" || true)
        [ "$code" = 200 ] && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

fail() { # stops what was started, then exits 1 with the reason
    echo "cluster.sh: $*" >&2
    stop_all
    exit 1
}

case "$cmd" in
start)
    n=${3:-3}
    case $n in
    [1-9]) ;;
    *)
        echo "cluster.sh: N must be 1 to 9, got '$n'" >&2
        exit 2
        ;;
    esac
    command -v curl >/dev/null || { echo "cluster.sh: needs curl" >&2; exit 1; }
    broker=${FELIX_BROKER:-$here/../build/release/felix-broker}
    if [ ! -x "$broker" ]; then
        echo "cluster.sh: $broker is missing; run 'make build' first (or set FELIX_BROKER)" >&2
        exit 1
    fi
    if ! command -v etcd >/dev/null && [ -z "${FX_ETCD_BIN:-}" ]; then
        echo "cluster.sh: no etcd binary on PATH: scripts/deps.sh installs etcd-server" >&2
        exit 1
    fi
    if ls "$dir"/n*.pid >/dev/null 2>&1; then
        echo "cluster.sh: $dir already holds a cluster; 'scripts/cluster.sh stop $dir' first" >&2
        exit 1
    fi
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    url=$(bash "$here/etcd.sh" start "$dir/etcd") || fail "etcd did not start (see above)"
    extra=()
    for kv in ${FX_CLUSTER_SET:-}; do
        extra+=(--set "$kv")
    done
    servers="" pin="" nodes=""
    tls=()
    for i in $(seq 1 "$n"); do
        quic=127.0.0.1:$(free_port udp)
        admin=127.0.0.1:$(free_port tcp)
        internal=127.0.0.1:$(free_port udp)
        # probe_bind is emptied: every broker would want the same default port.
        FELIX_LOG_LEVEL=${FELIX_LOG_LEVEL:-info} "$broker" \
            --set "quic_bind=$quic" --set "metrics_bind=$admin" --set probe_bind= \
            --set "state_dir=$dir/s$i" --set "cluster_etcd_endpoints=$url" \
            --set "cluster_node_id=n$i" --set "cluster_advertise=$quic" \
            --set "cluster_internal_bind=$internal" \
            "${tls[@]}" "${extra[@]}" </dev/null >"$dir/n$i.log" 2>&1 &
        pid=$!
        echo "$pid" >"$dir/n$i.pid"
        line=$(wait_banner "$dir/n$i.log" "$pid") ||
            fail "broker n$i did not start; last lines of $dir/n$i.log:
$(tail -n 5 "$dir/n$i.log")"
        p=${line##*FELIX_PIN=}
        p=${p%% *}
        if [ "$i" = 1 ]; then
            pin=$p
            # The others serve the first one's certificate: one pin.
            tls=(--set "tls_cert_file=$dir/s1/tls-cert.pem" --set "tls_key_file=$dir/s1/tls-key.pem")
        elif [ "$p" != "$pin" ]; then
            fail "broker n$i serves another certificate (pin $p, n1's is $pin)"
        fi
        servers=${servers:+$servers,}$quic
        nodes+="N${i}_SERVER=$quic N${i}_ADMIN=$admin N${i}_PID=$pid"$'\n'
        [ "$i" = 1 ] && first_admin=$admin
    done
    for i in $(seq 1 "$n"); do
        admin=$(sed -n "s/^N${i}_SERVER=[^ ]* N${i}_ADMIN=\([^ ]*\) .*/\1/p" <<<"$nodes")
        wait_ready "$admin" "$(cat "$dir/n$i.pid")" ||
            fail "broker n$i never answered 200 on http://$admin/ready; last lines of $dir/n$i.log:
$(tail -n 5 "$dir/n$i.log")"
    done
    {
        echo "# scripts/cluster.sh start $dir $n: etcd at $url"
        echo "export FELIX_SERVER=$servers FELIX_PIN=$pin"
        echo "export FELIX_ADMIN=$first_admin"
        printf '%s' "$nodes"
    } >"$dir/cluster.env"
    echo "cluster.sh: $n brokers ready (etcd $url); . $dir/cluster.env"
    ;;
stop)
    [ -d "$dir" ] || exit 0
    stop_all
    ;;
*)
    echo "usage: scripts/cluster.sh start DIR [N] | stop DIR | run [N]" >&2
    exit 2
    ;;
esac
