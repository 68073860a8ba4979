#!/bin/sh
# Runs a ThreadSanitizer test binary. gcc 12 / clang 14 TSan aborts at start
# when vm.mmap_rnd_bits is above 28; then retry without ASLR, or report the
# test skipped (exit 77) with the reason.
bits=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)
if [ "$bits" -le 28 ]; then
    exec "$@"
fi
if command -v setarch >/dev/null 2>&1 && setarch "$(uname -m)" -R true 2>/dev/null; then
    exec setarch "$(uname -m)" -R "$@"
fi
echo "SKIPPED: ThreadSanitizer cannot run here (vm.mmap_rnd_bits=$bits > 28, and ASLR cannot be disabled)" >&2
exit 77
