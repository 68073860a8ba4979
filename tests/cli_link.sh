#!/bin/sh
# Checks that the felix CLI binary |$1| is built from the public client
# library and libauth only: its link line (|$2|, CMake's link.txt, when given)
# names no daemon library (fx_server, fx_broker, libyaml, libmicrohttpd), the
# binary holds and references no broker, daemon, configuration or admin
# symbol, needs no libyaml or libmicrohttpd at run time, and has the client
# and token code it should. The link line matters because the linker drops
# unused archive members and unneeded shared libraries, so a binary linked
# against the daemon can still look clean.
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
for want in fx_client_connect fx_auth_mint fx_auth_jwks_write; do
    if ! printf '%s\n' "$syms" | grep -qE " T $want\$"; then
        echo "cli_link: $bin lacks $want (libfelix / libauth not linked?)" >&2
        fail=1
    fi
done
exit $fail
