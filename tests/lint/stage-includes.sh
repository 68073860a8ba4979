#!/bin/sh
# Fails when a .c file of src/broker includes a broker stage header that its
# row of docs/design.md's "Broker stage headers" table does not allow, or
# includes one without having a row. Stage headers are the headers of the
# table's files and every header a "may include" cell names; other broker
# headers (stream.h, registry.h, durable_int.h, ...) are modules' and free.
# Usage:
#   tests/lint/stage-includes.sh [source-dir]
set -eu
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"

# The table rows: "| stage | `src/broker/x.c` | thread | `a.h` `b.h` |".
rows=$(sed -n '/^| stage | file | thread | may include |/,/^$/p' docs/design.md |
    grep '^| [^-]' | sed 1d || true)
if [ -z "$rows" ]; then
    echo "stage includes: no \"Broker stage headers\" table in docs/design.md" >&2
    exit 1
fi

# file<TAB>allowed headers, one row a line.
allow=$(printf '%s\n' "$rows" | awk -F'|' '{
    file = $3; gsub(/[` ]/, "", file)
    inc = $5; gsub(/`/, "", inc); gsub(/^ +| +$/, "", inc); if (inc == "-") inc = ""
    print file "\t" inc
}')

status=0
stage_headers=" "
for f in $(printf '%s\n' "$allow" | cut -f1); do
    case $f in
    src/broker/*.c) ;;
    *) echo "stage includes: $f is not a .c file of src/broker" >&2; status=1; continue ;;
    esac
    [ -f "$f" ] || { echo "stage includes: $f does not exist" >&2; status=1; continue; }
    h=$(basename "$f" .c).h
    [ -f "src/broker/$h" ] && stage_headers="$stage_headers$h "
done
for h in $(printf '%s\n' "$allow" | cut -f2); do
    [ -f "src/broker/$h" ] || { echo "stage includes: the table names $h, which does not exist" >&2; status=1; }
    case $stage_headers in *" $h "*) ;; *) stage_headers="$stage_headers$h " ;; esac
done

for f in src/broker/*.c; do
    own=$(basename "$f" .c).h
    line=$(printf '%s\n' "$allow" | awk -F'\t' -v f="$f" '$1 == f { print "row\t" $2 }')
    for h in $(sed -n 's|^#include "broker/\([a-z_0-9]*\.h\)".*|\1|p' "$f"); do
        [ "$h" = "$own" ] && continue
        case $stage_headers in *" $h "*) ;; *) continue ;; esac
        if [ -z "$line" ]; then
            echo "stage includes: $f includes stage header $h but has no row in the table" >&2
            status=1
            continue
        fi
        case " $(printf '%s\n' "$line" | cut -f2) " in
        *" $h "*) ;;
        *)
            echo "stage includes: $f includes $h, which its row does not allow" >&2
            status=1
            ;;
        esac
    done
done
[ $status -eq 0 ] && echo "stage includes: every broker stage includes only the stage headers its row allows"
exit $status
