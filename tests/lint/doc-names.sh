#!/bin/sh
# Fails when README.md or docs/*.md names something the tree does not have.
# It reads only the sources (no build needed). In backticks (`...`):
#
# 1. Test names. A span `PREFIX.CASE` is a test name when PREFIX is a test
#    module (tests/unit/test_M.c and tests/integ/test_M.c give M), one of the
#    registered prefixes below (integ, lint, link, ui, pkg, lib, install,
#    examples, packaging, python, fuzz) or a retired module (broker), and CASE
#    holds a `_` or a `*` (`stream.publish` and `broker.yaml` are not tests).
#    It must name at least one test registered the way CMakeLists.txt,
#    packaging/felix.cmake and tests/fuzz/fuzz.cmake register them, as
#    `ctest -R` would find it: `*` matches anything, and the name may leave
#    out leading components (`quota.x` names `integ.quota.x`).
# 2. Metric names. A span starting `felix_` names a metric: the name (up to
#    `{`, or a prefix ending in `*`) must be registered in
#    src/base/metrics_defs.h (the per-stream felix_storage_stream_* gauges
#    included); a histogram's _bucket, _sum and _count series count too.
# 3. Configuration keys. A span `key: value` or `key=value` names a setting
#    |key|, and so does the first cell of a table whose first header is `key`
#    in docs/configuration.md: it must be a key or an alias in
#    src/server/config.c's key table, or a field of libfelix's fx_client_opts
#    (include/felix/felix.h), whose options the docs write the same way.
# 4. felix CLI flags. A span starting `--flag` in docs/cli.md must be an
#    option of tools/felix, of felix-bench (bench/felix_bench.c, which
#    `felix bench` runs) or of bench/matrix.sh (`felix bench matrix`).
#
# Usage: tests/lint/doc-names.sh [source-dir]. Exits 1 listing every unknown
# name with its file and line.
set -eu
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Names the docs may cite although the tree does not have them, one per line
# as `kind name`: placeholders (`key: value`, `--name value`), fields of
# felix-bench's JSON output shown as `field: value`, and the original's
# metric that Felix-C does not export (docs/metrics.md says so).
allow='config key
config ok
config msgs_per_s
flag --name
metric felix_sub_queue_drop_old_emulated_total'

docs="README.md $(ls docs/*.md)"

# ---- the registered tests ----------------------------------------------------
cases() { # file -> the case names of its `static void test_<case>(void **` lines
    sed -n 's/^static void test_\([a-z0-9_]*\)(void \*\*.*/\1/p' "$1"
}
pycases() { # file -> the case names of its `def test_<case>(` lines
    sed -n 's/^def test_\([a-z0-9_]*\)(.*/\1/p' "$1"
}
cmake_list() { # variable -> the words of CMakeLists.txt's `set(VARIABLE ...)`
    sed -n "s/^set($1 \\(.*\\))\$/\\1/p" CMakeLists.txt | tr ' ' '\n'
}
cmake_list FX_TSAN_TESTS >"$tmp/tsan_unit"
cmake_list FX_TSAN_INTEG_TESTS >"$tmp/tsan_integ"
: >"$tmp/tests"
: >"$tmp/modules"
for f in tests/unit/test_*.c tests/integ/test_*.c; do
    m=$(basename "$f" .c)
    m=${m#test_}
    echo "$m" >>"$tmp/modules"
    case $f in
    tests/integ/*) p=integ.$m tsan=$tmp/tsan_integ ;;
    *) p=$m tsan=$tmp/tsan_unit ;;
    esac
    cases "$f" | sed "s/^/$p./" >>"$tmp/tests"
    if grep -qx "$m" "$tsan"; then
        cases "$f" | sed "s/^/$p.tsan./" >>"$tmp/tests"
    fi
done
# Tests added by name (add_test(NAME literal ...)).
sed -n 's/.*add_test(NAME \([A-Za-z0-9_.-]*\)\( .*\)\{0,1\}$/\1/p' \
    CMakeLists.txt packaging/felix.cmake tests/fuzz/fuzz.cmake >>"$tmp/tests"
for f in tests/fuzz/fuzz_*.c; do
    echo "fuzz.$(basename "$f" .c)" >>"$tmp/tests"
done
for s in lib install examples packaging; do
    [ -f "tests/pkg/test_$s.py" ] && pycases "tests/pkg/test_$s.py" | sed "s/^/$s./" >>"$tmp/tests"
done
for f in python/tests/test_*.py; do
    [ -f "$f" ] && pycases "$f" | sed 's/^/python./' >>"$tmp/tests"
done
[ -s "$tmp/tests" ] || { echo "doc-names: found no registered test" >&2; exit 1; }
{
    cat "$tmp/modules"
    printf '%s\n' integ lint link ui pkg lib install examples packaging python fuzz broker
} | sort -u >"$tmp/prefixes"

# ---- metrics, keys, flags ----------------------------------------------------
grep -o '"felix_[a-z0-9_]*"' src/base/metrics_defs.h | tr -d '"' | sort -u >"$tmp/metrics"
[ -s "$tmp/metrics" ] || { echo "doc-names: found no metric" >&2; exit 1; }
{
    sed -n '/^const struct key fx_config_keys\[\] = {/,/^};/p' src/server/config.c |
        grep -o '\.\(name\|alias\) = "[a-z0-9_]*"' | sed 's/.*"\(.*\)"/\1/'
    sed -n '/^typedef struct fx_client_opts {/,/^} fx_client_opts;/p' include/felix/felix.h |
        sed -n 's/^ *[a-z_ ]*[ *]\([a-z0-9_]*\)\( *\[[^]]*\]\)\{0,1\};.*/\1/p'
} | sort -u >"$tmp/keys"
[ -s "$tmp/keys" ] || { echo "doc-names: found no configuration key" >&2; exit 1; }
{
    grep -ho '"[a-z0-9-]*", *\(true\|false\|FX_CLI_NUM_ARG\),' tools/felix/*.c tools/felix/*.h
    grep -ho '{"[a-z0-9-]*", [01], 0,' bench/felix_bench.c
} | sed 's/^{\{0,1\}"\([a-z0-9-]*\)".*/--\1/' >"$tmp/flags"
# Options a command parses itself (felix log): strcmp(a, "--flag").
grep -ho 'strcmp([a-z]*, "--[a-z0-9-]*")' tools/felix/*.c | sed 's/.*"\(--[a-z0-9-]*\)")/\1/' \
    >>"$tmp/flags"
sed -n 's/^ *\(--[a-z0-9-]*\)).*/\1/p' bench/matrix.sh >>"$tmp/flags"
sort -u -o "$tmp/flags" "$tmp/flags"

# ---- the spans of the docs: "file:line<TAB>span" --------------------------------
for f in $docs; do
    # Fenced code blocks are examples and output, not citations.
    awk -v f="$f" '
        /^```/ { code = !code; next }
        !code {
            s = $0
            while (match(s, /`[^`]+`/)) {
                print f ":" NR "\t" substr(s, RSTART + 1, RLENGTH - 2)
                s = substr(s, RSTART + RLENGTH)
            }
        }' "$f"
done >"$tmp/spans"

bad=0
report() { # where, kind, name
    if printf '%s\n' "$allow" | grep -qxF "$2 $3"; then
        return 0
    fi
    echo "$1: unknown $2 \`$3\`" >&2
    bad=1
}

# Each check reads its list(s) first (files before "-"), then spans, and
# prints "where<TAB>name" for every unknown name.
# Tests.
awk -F'\t' '
    FILENAME == ARGV[1] { prefix[$0] = 1; next }
    FILENAME == ARGV[2] { tests[++n] = $0; next }
    $2 ~ /^[a-z][a-z0-9_]*\.[a-z0-9_.*]+$/ {
        name = $2
        p = name; sub(/\..*/, "", p)
        if (!(p in prefix)) next
        rest = substr(name, length(p) + 2)
        if (rest !~ /[_*]/) next
        re = name; gsub(/\./, "\\.", re); gsub(/\*/, ".*", re)
        re = "(^|\\.)" re "$"
        found = 0
        for (i = 1; i <= n && !found; i++) if (tests[i] ~ re) found = 1
        if (!found) print $1 "\t" name
    }' "$tmp/prefixes" "$tmp/tests" "$tmp/spans" >"$tmp/bad_tests"
# Metrics.
awk -F'\t' '
    FILENAME == ARGV[1] { m[$0] = 1; all[++n] = $0; next }
    $2 ~ /^felix_/ {
        match($2, /^felix_[a-z0-9_]*\*?/)
        name = substr($2, 1, RLENGTH)
        if (name ~ /\*$/) {
            pre = substr(name, 1, length(name) - 1)
            found = 0
            for (i = 1; i <= n && !found; i++) if (index(all[i], pre) == 1) found = 1
            if (!found) print $1 "\t" name
            next
        }
        base = name; sub(/_(bucket|sum|count)$/, "", base)
        if (!(name in m) && !(base in m)) print $1 "\t" name
    }' "$tmp/metrics" "$tmp/spans" >"$tmp/bad_metrics"
# Keys.
{
    sed -n 's/^\([^	]*\)	\([a-z][a-z0-9_]*\)\(: \|=\).*/\1	\2/p' "$tmp/spans"
    awk '
        /^\| *key *\|/ { intable = 1; next }
        intable && /^\|/ {
            if (match($0, /^\| `[a-z][a-z0-9_]*` \|/))
                print "docs/configuration.md:" NR "\t" substr($0, RSTART + 3, RLENGTH - 6)
            next
        }
        { intable = 0 }' docs/configuration.md
} | awk -F'\t' 'FILENAME == ARGV[1] { k[$0] = 1; next } !($2 in k)' "$tmp/keys" - >"$tmp/bad_keys"
# Flags.
awk -F'\t' '
    FILENAME == ARGV[1] { f[$0] = 1; next }
    $1 ~ /^docs\/cli\.md:/ && $2 ~ /^--[a-z]/ {
        match($2, /^--[a-z0-9-]*/)
        flag = substr($2, 1, RLENGTH)
        if (!(flag in f)) print $1 "\t" flag
    }' "$tmp/flags" "$tmp/spans" >"$tmp/bad_flags"

for kind in tests:test metrics:metric keys:config flags:flag; do
    while IFS='	' read -r at name; do
        report "$at" "${kind#*:}" "$name"
    done <"$tmp/bad_${kind%%:*}"
done
if [ $bad -ne 0 ]; then
    echo "doc-names: the docs name tests, metrics, keys or flags the tree does not have" >&2
    exit 1
fi
echo "doc-names: $(wc -l <"$tmp/spans") spans checked against $(wc -l <"$tmp/tests") tests," \
    "$(wc -l <"$tmp/metrics") metrics, $(wc -l <"$tmp/keys") keys, $(wc -l <"$tmp/flags") flags"
