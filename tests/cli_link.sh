#!/bin/sh
# Checks that the felix CLI binary |$1| is built from the public client
# library, libauth and the storage library only: libfelix (fx_client and the
# modules under it: fx_quic, fx_wire, fx_base) for the commands that talk to a
# broker, libauth (fx_auth) for `felix token`, and the storage library
# (fx_storage) for `felix log`, which reads, verifies and repairs durable logs
# offline. Its link line (|$2|, CMake's link.txt, when given) names no other
# Felix-C library (fx_server, fx_broker: the daemon) and no libyaml or
# libmicrohttpd; the binary holds and references no broker, daemon,
# configuration or admin symbol, needs no libyaml or libmicrohttpd at run
# time, and has the client, token and log code it should. The storage
# library's symbols (fx_dlog_*, fx_catalog_*, fx_logfmt_*, ...) are allowed.
# The link line matters because the linker drops unused archive members and
# unneeded shared libraries, so a binary linked against the daemon can still
# look clean.
# Exits 0 when all hold, 1 naming what is wrong otherwise.
set -u
bin=${1:?usage: cli_link.sh PATH/TO/felix [PATH/TO/link.txt]}
link=${2:-}
fail=0

if [ -n "$link" ]; then
    [ -r "$link" ] || { echo "cli_link: cannot read the link line $link" >&2; exit 1; }
    for lib in libfx_server libfx_broker libyaml -lyaml libmicrohttpd -lmicrohttpd; do
        if tr ' ' '\n' <"$link" | grep -q -- "^$lib\|/$lib"; then
            echo "cli_link: the link line of $bin names $lib" >&2
            fail=1
        fi
    done
    # The Felix-C libraries it may name, and no other.
    for lib in $(tr ' ' '\n' <"$link" | sed -n 's|^\(.*/\)\{0,1\}lib\(fx_[a-z]*\)\(_tsan\)\{0,1\}\.a$|\2|p'); do
        case $lib in
        fx_client | fx_auth | fx_storage | fx_quic | fx_wire | fx_base) ;;
        *)
            echo "cli_link: the link line of $bin names lib$lib.a, not one of" \
                "libfelix, libauth or the storage library" >&2
            fail=1
            ;;
        esac
    done
fi

syms=$(nm "$bin") || { echo "cli_link: nm $bin failed" >&2; exit 1; }
# Defined or undefined: a reference to a daemon symbol is as bad as a copy.
bad=$(printf '%s\n' "$syms" |
    grep -E ' (fxb_|fx_broker_|fx_config_|fx_admin_|fx_authn_|fx_server_|yaml_|MHD_)[A-Za-z0-9_]*$' |
    head -20)
if [ -n "$bad" ]; then
    echo "cli_link: $bin contains broker/daemon symbols:" >&2
    printf '%s\n' "$bad" >&2
    fail=1
fi

needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for lib in libyaml libmicrohttpd; do
    if printf '%s\n' "$needed" | grep -q "^$lib"; then
        echo "cli_link: $bin needs $lib at run time" >&2
        fail=1
    fi
done

# What the CLI must contain, so a broken nm parse cannot pass silently.
for want in fx_client_connect fx_auth_mint fx_auth_jwks_write fx_dlog_close; do
    if ! printf '%s\n' "$syms" | grep -qE " T $want\$"; then
        echo "cli_link: $bin lacks $want (libfelix / libauth / storage not linked?)" >&2
        fail=1
    fi
done
exit $fail
