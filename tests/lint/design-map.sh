#!/bin/sh
# Fails when the "code" column of docs/design.md's checkpoint table names a
# file that does not exist or a function that file does not define, so the
# map from the table to the code stays true. Usage:
#   tests/lint/design-map.sh [source-dir]
set -eu
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"

# The table rows: "| # | checkpoint | ... | code |"; the code cell is the last.
rows=$(sed -n '/^| # | checkpoint |/,/^$/p' docs/design.md | grep '^| [0-9-] |' || true)
if [ -z "$rows" ]; then
    echo "design map: no checkpoint table in docs/design.md" >&2
    exit 1
fi
status=0
checked=0
printf '%s\n' "$rows" | while IFS= read -r row; do
    cell=$(printf '%s\n' "$row" | awk -F'|' '{print $(NF-1)}')
    file=
    for tok in $(printf '%s\n' "$cell" | grep -o '`[^`]*`' | tr -d '`'); do
        case $tok in
        src/* | include/* | tools/*)
            file=$tok
            [ -f "$file" ] || { echo "design map: $file does not exist" >&2; exit 1; }
            ;;
        *)
            [ -n "$file" ] || { echo "design map: '$tok' before any file in: $row" >&2; exit 1; }
            grep -Eq "^[A-Za-z].*[ *]$tok\(" "$file" ||
                { echo "design map: $file defines no function $tok" >&2; exit 1; }
            ;;
        esac
    done
    [ -n "$file" ] || { echo "design map: a row names no code: $row" >&2; exit 1; }
done || status=1
[ $status -eq 0 ] && echo "design map: every file and function of the checkpoint table exists"
exit $status
