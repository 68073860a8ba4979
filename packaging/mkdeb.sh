#!/usr/bin/env bash
# Builds the Debian packages from an install tree made with prefix /usr
# (`cmake --install build/release --prefix /usr --strip` under DESTDIR=ROOT):
#   felix-broker    the broker, the felix CLI and felix-bench, man pages,
#                   the systemd unit, its sysusers.d account, /etc/felix/broker.yaml
#   libfelix0       libfelix.so.0
#   libfelix-dev    headers, libfelix.so, libfelix.a, felix.pc, the C examples
#   python3-felix   the felix Python package (ctypes over libfelix0)
# Dependencies on shared libraries come from dpkg-shlibdeps.
# Usage: packaging/mkdeb.sh ROOT OUTDIR [VERSION]   (run from the source tree)
set -euo pipefail

root=$(realpath "$1")
out=$(realpath -m "$2")
version=${3:-$(sed -n 's/^project(felix VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)}
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
libdir=usr/lib/$multiarch
maint="Felix-C maintainers <felix-c@example.org>"
work=$out/work
[ -n "$version" ] || { echo "mkdeb: no version" >&2; exit 1; }
[ -e "$root/$libdir/libfelix.so.0" ] ||
    { echo "mkdeb: $root has no $libdir/libfelix.so.0: install with --prefix /usr" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work" "$out"

# take PKG PATH...: moves PATH (relative to the install tree) into package PKG.
take() {
    local pkg=$1
    shift
    for p in "$@"; do
        [ -e "$root/$p" ] || [ -L "$root/$p" ] || { echo "mkdeb: $root/$p is missing" >&2; exit 1; }
        mkdir -p "$work/$pkg/$(dirname "$p")"
        cp -a "$root/$p" "$work/$pkg/$p"
    done
}

pydir=usr/lib/python3/dist-packages/felix
unitdir=
for d in lib/systemd/system usr/lib/systemd/system; do
    [ -n "$unitdir" ] || [ ! -e "$root/$d/felix-broker.service" ] || unitdir=$d
done
take felix-broker usr/bin/felix-broker usr/bin/felix usr/bin/felix-bench \
    usr/share/man/man1/felix.1 usr/share/man/man8/felix-broker.8 \
    "$unitdir/felix-broker.service" usr/lib/sysusers.d/felix.conf etc/felix/broker.yaml
take libfelix0 $(cd "$root" && echo "$libdir"/libfelix.so.0*)
take libfelix-dev usr/include/felix "$libdir/libfelix.so" "$libdir/libfelix.a" \
    "$libdir/pkgconfig/felix.pc" usr/share/doc/felix/examples
take python3-felix "$pydir"
gzip -9n "$work"/felix-broker/usr/share/man/man*/*

# dpkg-shlibdeps wants a debian/control to read; the shlibs of libfelix0
# (for packages that link it) are written below.
mkdir -p "$work/src/debian"
printf 'Source: felix\n\nPackage: felix-broker\nArchitecture: any\n' >"$work/src/debian/control"
shlibdeps() { # FILES... -> the Depends line dpkg-shlibdeps computes
    (cd "$work/src" && dpkg-shlibdeps -O "$@" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
}
broker_deps=$(shlibdeps "$work"/felix-broker/usr/bin/*)
lib_deps=$(shlibdeps "$work/libfelix0/$libdir"/libfelix.so.0.*)

control() { # PKG ARCH SECTION DEPENDS DESCRIPTION [EXTRA-FIELDS]
    mkdir -p "$work/$1/DEBIAN"
    local size
    size=$(du -sk --exclude=DEBIAN "$work/$1" | cut -f1)
    {
        echo "Package: $1"
        echo "Version: $version"
        echo "Architecture: $2"
        echo "Section: $3"
        echo "Priority: optional"
        echo "Maintainer: $maint"
        echo "Installed-Size: $size"
        echo "Depends: $4"
        [ -z "${6:-}" ] || echo "$6"
        echo "Description: $5"
    } >"$work/$1/DEBIAN/control"
}

control felix-broker "$arch" net "$broker_deps, adduser | systemd" \
    "Felix-C publish/subscribe broker over QUIC
 felix-broker serves the Felix v1 wire protocol over QUIC (TLS 1.3) with
 bounded, observable queues at every stage. The package also has the felix
 command-line client, the felix-bench harness and a systemd unit
 (Type=notify) running as the unprivileged user felix." "Recommends: systemd"
echo /etc/felix/broker.yaml >"$work/felix-broker/DEBIAN/conffiles"
cat >"$work/felix-broker/DEBIAN/postinst" <<'EOF'
#!/bin/sh
# Creates the felix account of sysusers.d/felix.conf; the unit is not
# enabled: configure /etc/felix/broker.yaml first, then
# systemctl enable --now felix-broker.
set -e
if [ "$1" = configure ]; then
    if command -v systemd-sysusers >/dev/null 2>&1; then
        systemd-sysusers felix.conf
    elif ! getent passwd felix >/dev/null; then
        adduser --system --group --home /var/lib/felix --no-create-home felix
    fi
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload >/dev/null || true
        # An upgrade restarts a running broker on the new binary (it drains first).
        if [ -n "$2" ]; then
            systemctl try-restart felix-broker.service >/dev/null || true
        fi
    fi
fi
EOF
chmod 0755 "$work/felix-broker/DEBIAN/postinst"
cat >"$work/felix-broker/DEBIAN/prerm" <<'EOF'
#!/bin/sh
# Stops the broker (it drains) before its files go; an upgrade keeps it
# running until postinst restarts it on the new binary.
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    systemctl stop felix-broker.service >/dev/null || true
fi
EOF
chmod 0755 "$work/felix-broker/DEBIAN/prerm"
cat >"$work/felix-broker/DEBIAN/postrm" <<'EOF'
#!/bin/sh
# Forgets the unit once removed; purge also drops its enablement state. The
# state directory (certificate, durable streams) is kept: delete
# /var/lib/felix by hand once its data is no longer wanted.
set -e
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null || true
fi
if [ "$1" = purge ] && command -v deb-systemd-helper >/dev/null 2>&1; then
    deb-systemd-helper purge felix-broker.service >/dev/null || true
fi
EOF
chmod 0755 "$work/felix-broker/DEBIAN/postrm"

control libfelix0 "$arch" libs "$lib_deps" "Felix-C client library (shared)
 libfelix publishes to and subscribes from a Felix-C broker over QUIC:
 acked and unacked publishes, batches, subscriptions that resume from an
 offset, reconnection." "Multi-Arch: same"
echo "libfelix 0 libfelix0 (>= $version)" >"$work/libfelix0/DEBIAN/shlibs"
echo "activate-noawait ldconfig" >"$work/libfelix0/DEBIAN/triggers"

control libfelix-dev "$arch" libdevel \
    "libfelix0 (= $version), libngtcp2-dev, libngtcp2-crypto-gnutls-dev, libgnutls28-dev, nettle-dev, libjansson-dev" \
    "Felix-C client library (development files)
 Headers, pkg-config file (felix.pc), the static library and C examples
 for libfelix."

control python3-felix all python "python3:any, libfelix0 (>= $version)" \
    "Felix-C client library (Python 3)
 The felix package: Client, publish, publish_many and subscribe over
 libfelix with ctypes; no compiled extension."

for pkg in felix-broker libfelix0 libfelix-dev python3-felix; do
    a=$arch
    [ "$pkg" = python3-felix ] && a=all
    dpkg-deb --root-owner-group -Zxz -z6 --build "$work/$pkg" "$out/${pkg}_${version}_$a.deb" >/dev/null
    echo "mkdeb: $out/${pkg}_${version}_$a.deb"
done
rm -rf "$work"
