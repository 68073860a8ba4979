#!/bin/sh
# Fails when placement arithmetic appears outside src/base/placement.c, the
# one module that states which loop runs what (stream -> worker and back,
# endpoint -> loop, server endpoint count, client -> loop, loop counts from
# the CPU count). Comments are stripped first (gcc -fpreprocessed), so a
# comment may state a rule; code must call fx_placement_*. Usage:
#   tests/lint/placement.sh [source-dir]
set -eu
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"

# Arithmetic on the quantities placement decides from. src/client's
# |nworkers| counts publish streams (publish_sharding, a publish option), not
# loops, so the worker patterns skip src/client.
any='fx_quic_place|handle_id(\([^()]*\))?\)* *[%/]|io_threads *[-%/]|[%/] *\(?[A-Za-z_][A-Za-z0-9_>.-]*io_threads\b|nloops *[-%/]|[%/] *\(?[A-Za-z_][A-Za-z0-9_>.-]*nloops\b|NPROCESSORS_ONLN *\) *-'
workers='[%/] *\(?[A-Za-z_][A-Za-z0-9_>.-]*nworkers\b|nworkers *[*+]|[*] *\(?[A-Za-z_][A-Za-z0-9_>.-]*nworkers\b'

status=0
for f in $(find src tools bench -name '*.[ch]' 2>/dev/null | sort); do
    [ "$f" = src/base/placement.c ] && continue
    code=$(gcc -fpreprocessed -dD -E -P -x c "$f" 2>/dev/null) || {
        echo "placement check: cannot read $f" >&2
        status=1
        continue
    }
    pat=$any
    case $f in src/client/*) ;; *) pat="$any|$workers" ;; esac
    hits=$(printf '%s\n' "$code" | grep -E "$pat" || true)
    if [ -n "$hits" ]; then
        printf '%s\n' "$hits" | sed "s|^ *|$f: |" >&2
        status=1
    fi
done
if [ $status -ne 0 ]; then
    echo "placement arithmetic outside src/base/placement.c: call fx_placement_* instead" >&2
    exit 1
fi
echo "placement check: every rule is in src/base/placement.c"
