#!/bin/sh
# `make run`: starts felix-broker from build dir $1 with the built-in
# development configuration (QUIC on 127.0.0.1:5000, admin on 127.0.0.1:8080,
# auto-created streams, a generated dev certificate kept in the state dir).
# --dev also keeps an admin token in the state dir (admin-token, 0600,
# generated at the first start) and prints the export line that gives it to
# the felix CLI, unless FELIX_ADMIN_TOKEN is already set.
# Extra arguments are passed to the broker, e.g. `make run ARGS="--set log_level=debug"`.
set -eu
build=${1:-build/release}
shift || true
bin="$build/felix-broker"
if [ ! -x "$bin" ]; then
    echo "run: $bin is missing; run 'make build' first" >&2
    exit 1
fi
exec "$bin" --dev "$@"
