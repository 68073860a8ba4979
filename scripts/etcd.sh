#!/usr/bin/env bash
# Starts or stops a throwaway single-member etcd for tests and local runs: loopback
# ports, its data under DIR, revision auto-compaction on, stopped by its PID.
# Usage:
#   scripts/etcd.sh start DIR [CLIENT_PORT PEER_PORT]   (free ports are picked when absent)
#   scripts/etcd.sh stop DIR     (stops it and removes its data)
#   scripts/etcd.sh halt DIR     (stops it and keeps its data: `start DIR` then brings the
#                                 same member back on the same ports, as after a crash)
#   scripts/etcd.sh certs DIR    (a throwaway CA, a server certificate for 127.0.0.1 and a
#                                 client certificate, for FX_ETCD_TLS_DIR=DIR; needs openssl)
#   scripts/etcd.sh start3 DIR   (three members, DIR/m1..m3 each with its pid, data and log;
#                                 DIR/endpoint then holds the three client URLs comma-separated;
#                                 `stop DIR` stops them all; plain http)
# With FX_ETCD_TLS_DIR set (a directory holding ca.pem, server.pem, server.key,
# client.pem and client.key), clients speak https and must show a certificate the CA
# signed. `start` returns once etcd answers /health; DIR/endpoint then holds its client URL,
# DIR/pid its PID and DIR/etcd.log its log. It exits 1 with the reason when etcd
# cannot start (the binary is missing: scripts/deps.sh installs etcd-server).
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
    echo "usage: scripts/etcd.sh start|start3|stop|halt|certs DIR [CLIENT_PORT PEER_PORT]" >&2
    exit 2
fi

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

case "$cmd" in
certs)
    command -v openssl >/dev/null || { echo "etcd.sh: certs needs openssl" >&2; exit 1; }
    mkdir -p "$dir"
    cd "$dir"
    key=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
    openssl req -x509 "${key[@]}" -keyout ca.key -out ca.pem -days 2 -subj /CN=fx-etcd-test-ca \
        2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >server.ext
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    for who in server client; do
        openssl req "${key[@]}" -keyout "$who.key" -out "$who.csr" -subj "/CN=fx-$who" 2>/dev/null
        openssl x509 -req -in "$who.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
            -extfile "$who.ext" -out "$who.pem" 2>/dev/null
    done
    ;;
start)
    bin=${FX_ETCD_BIN:-$(command -v etcd || true)}
    if [ -z "$bin" ] || [ ! -x "$bin" ]; then
        echo "etcd.sh: no etcd binary on PATH: scripts/deps.sh installs etcd-server" >&2
        exit 1
    fi
    mkdir -p "$dir"
    if [ -z "${3:-}" ] && [ -d "$dir/data" ] && [ -f "$dir/ports" ]; then
        read -r cport pport <"$dir/ports" # after halt: the same member on its ports
    else
        cport=${3:-$(free_port)}
        pport=${4:-$(free_port)}
    fi
    echo "$cport $pport" >"$dir/ports"
    tls=()
    check=()
    scheme=http
    if [ -n "${FX_ETCD_TLS_DIR:-}" ]; then
        t=$FX_ETCD_TLS_DIR
        scheme=https
        tls=(--cert-file "$t/server.pem" --key-file "$t/server.key" --trusted-ca-file "$t/ca.pem"
             --client-cert-auth)
        check=(--cacert "$t/ca.pem" --cert "$t/client.pem" --key "$t/client.key")
    fi
    url="$scheme://127.0.0.1:$cport"
    # A few quick elections and a short progress-notify interval keep tests fast;
    # compaction by revision keeps the history bounded as the docs ask.
    "$bin" --name fx --data-dir "$dir/data" \
        --listen-client-urls "$url" --advertise-client-urls "$url" \
        --listen-peer-urls "http://127.0.0.1:$pport" \
        --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
        --initial-cluster "fx=http://127.0.0.1:$pport" \
        --auto-compaction-mode revision --auto-compaction-retention 10000 \
        --experimental-watch-progress-notify-interval 5s \
        "${tls[@]}" --logger zap --log-outputs stderr >"$dir/etcd.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/pid"
    echo "$url" >"$dir/endpoint"
    for _ in $(seq 1 100); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "etcd.sh: etcd exited at start; last lines of $dir/etcd.log:" >&2
            tail -n 5 "$dir/etcd.log" >&2
            exit 1
        fi
        if curl -fsS -m 1 "${check[@]}" "$url/health" 2>/dev/null | grep -q '"health":"true"'; then
            echo "$url"
            exit 0
        fi
        sleep 0.1
    done
    echo "etcd.sh: etcd (pid $pid) did not answer $url/health within 10 s; see $dir/etcd.log" >&2
    kill "$pid" 2>/dev/null || true
    exit 1
    ;;
start3)
    bin=${FX_ETCD_BIN:-$(command -v etcd || true)}
    if [ -z "$bin" ] || [ ! -x "$bin" ]; then
        echo "etcd.sh: no etcd binary on PATH: scripts/deps.sh installs etcd-server" >&2
        exit 1
    fi
    mkdir -p "$dir"
    initial="" urls=""
    declare -a cports pports
    for i in 1 2 3; do
        cports[$i]=$(free_port)
        pports[$i]=$(free_port)
        initial="$initial${initial:+,}m$i=http://127.0.0.1:${pports[$i]}"
        urls="$urls${urls:+,}http://127.0.0.1:${cports[$i]}"
    done
    for i in 1 2 3; do
        m=$dir/m$i
        mkdir -p "$m"
        url="http://127.0.0.1:${cports[$i]}"
        "$bin" --name "m$i" --data-dir "$m/data" \
            --listen-client-urls "$url" --advertise-client-urls "$url" \
            --listen-peer-urls "http://127.0.0.1:${pports[$i]}" \
            --initial-advertise-peer-urls "http://127.0.0.1:${pports[$i]}" \
            --initial-cluster "$initial" --initial-cluster-state new \
            --heartbeat-interval 50 --election-timeout 500 \
            --auto-compaction-mode revision --auto-compaction-retention 10000 \
            --logger zap --log-outputs stderr >"$m/etcd.log" 2>&1 &
        echo $! >"$m/pid"
    done
    echo "$urls" >"$dir/endpoint"
    for _ in $(seq 1 150); do
        ok=0
        for i in 1 2 3; do
            if curl -fsS -m 1 "http://127.0.0.1:${cports[$i]}/health" 2>/dev/null |
                grep -q '"health":"true"'; then
                ok=$((ok + 1))
            fi
        done
        if [ "$ok" = 3 ]; then
            echo "$urls"
            exit 0
        fi
        sleep 0.1
    done
    echo "etcd.sh: the three members did not all answer /health within 15 s; see $dir/m*/etcd.log" >&2
    for i in 1 2 3; do kill "$(cat "$dir/m$i/pid")" 2>/dev/null || true; done
    exit 1
    ;;
stop | halt)
    for m in "$dir"/m[123]; do
        [ -f "$m/pid" ] || continue
        pid=$(cat "$m/pid")
        kill -CONT "$pid" 2>/dev/null || true
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$m/pid"
        [ "$cmd" = halt ] || rm -rf "$m/data"
    done
    [ -f "$dir/pid" ] || exit 0
    pid=$(cat "$dir/pid")
    if kill "$pid" 2>/dev/null; then
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/pid"
    [ "$cmd" = halt ] || rm -rf "$dir/data"
    ;;
*)
    echo "usage: scripts/etcd.sh start|start3|stop|halt|certs DIR [CLIENT_PORT PEER_PORT]" >&2
    exit 2
    ;;
esac
