#!/usr/bin/env bash
# Installs the Debian 12 packages Felix-C needs to build and test.
# Safe to run repeatedly: it only calls apt-get when a package is missing.
# Usage: scripts/deps.sh [--fuzz | --peers]
#   --fuzz   adds clang and libFuzzer's runtime
#   --peers  adds the brokers and client libraries the benchmark scripts compare with
#            (bench/compare-peers.sh, bench/durable.sh: ../shared/peers/run-peers.sh; bench/cache.sh:
#            redis-server with TLS, redis-benchmark and redis-cli from redis-tools, openssl) and jq
set -euo pipefail

pkgs=(
    build-essential cmake pkg-config
    libngtcp2-dev libngtcp2-crypto-gnutls-dev
    libgnutls28-dev nettle-dev
    libjansson-dev libyaml-dev libmicrohttpd-dev libcurl4-gnutls-dev
    libcmocka-dev libdeflate-dev liblzma-dev libsodium-dev
    chromium curl
    libsystemd-dev
    # libfelix's packaging and the Python package: man pages, .deb files with
    # computed dependencies, the unit check, the Python tests and pip install
    help2man dpkg-dev systemd man-db
    python3 python3-pytest python3-setuptools python3-venv python3-pip
    # the cluster's coordination store: tests/integ/test_etcd.c and scripts/etcd.sh run a
    # real single-member etcd (etcd-client gives etcdctl for looking at it by hand; openssl
    # makes the certificates of the TLS case)
    etcd-server etcd-client openssl
)
case "${1:-}" in
    --fuzz) pkgs+=(clang libclang-rt-14-dev) ;;
    --peers) pkgs+=(nats-server libnats-dev redis-server redis-tools libhiredis-dev mosquitto
                    libmosquitto-dev jq openssl) ;;
    "") ;;
    *) echo "usage: scripts/deps.sh [--fuzz | --peers]" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

echo "deps: missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=sudo
    else
        echo "deps: not root; run this and try again:" >&2
        echo "  sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
