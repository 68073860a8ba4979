"""A real felix-broker for tests: the binary from $FX_BINARY_DIR (or
$FELIX_BROKER), the development configuration on 127.0.0.1 with ports the
kernel picks, a state directory of its own. The banner gives the QUIC
address, the certificate's SHA-256 and the admin port."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
from typing import Dict, Iterable, Optional

HANG_S = 15.0


def broker_binary() -> Optional[str]:
    path = os.environ.get("FELIX_BROKER")
    if not path and os.environ.get("FX_BINARY_DIR"):
        path = os.path.join(os.environ["FX_BINARY_DIR"], "felix-broker")
    return path if path and os.access(path, os.X_OK) else None


class Broker:
    """felix-broker --dev on 127.0.0.1:0. ``server``, ``pin``, ``admin_port``;
    ``env()`` is the FELIX_SERVER / FELIX_PIN pair for clients."""

    def __init__(self, state_dir: str, sets: Iterable[str] = (),
                 env: Optional[Dict[str, str]] = None, exe: Optional[str] = None) -> None:
        exe = exe or broker_binary()
        if exe is None:
            raise RuntimeError("felix-broker not found: set FX_BINARY_DIR or FELIX_BROKER")
        args = [exe, "--dev", "--set", "quic_bind=127.0.0.1:0", "--set",
                "metrics_bind=127.0.0.1:0", "--set", "state_dir=%s" % state_dir]
        for s in sets:
            args += ["--set", s]
        self.err_path = state_dir.rstrip("/") + ".err"
        self._err = open(self.err_path, "wb")
        self._term_sent = False
        full_env = dict(os.environ)
        full_env.pop("NOTIFY_SOCKET", None)
        full_env.update(env or {})
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._err,
                                     env=full_env)
        self.banner = self._read_banner()
        m = re.search(r"export FELIX_SERVER=(\S+) FELIX_PIN=([0-9a-f]{64})", self.banner)
        a = re.search(r"admin HTTP on \S+ \(port (\d+)\)", self.banner)
        if not m or not a:
            self.stop()  # the banner is in the message
            raise RuntimeError("unexpected banner:\n" + self.banner)
        self.server, self.pin = m.group(1), m.group(2)
        self.admin_port = int(a.group(1))

    def _read_banner(self) -> str:
        deadline = time.monotonic() + HANG_S
        out = b""
        fd = self.proc.stdout.fileno()
        while b"Stop with Ctrl-C" not in out:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                err = self.stderr()
                status = self.stop()
                raise RuntimeError("felix-broker did not start (status %s); stdout:\n%s\n"
                                   "stderr:\n%s" % (status, out.decode(), err))
            r, _, _ = select.select([fd], [], [], min(left, 0.2))
            if r:
                chunk = os.read(fd, 65536)
                if chunk:
                    out += chunk
        return out.decode()

    def env(self) -> Dict[str, str]:
        return {"FELIX_SERVER": self.server, "FELIX_PIN": self.pin}

    def stderr(self) -> str:
        if not self._err.closed:
            self._err.flush()
        with open(self.err_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def terminate(self) -> None:
        """Sends SIGTERM once (a second one would end the drain at once)."""
        if not self._term_sent and self.proc.poll() is None:
            self._term_sent = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> int:
        """SIGTERM (a drain), then the exit status."""
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(HANG_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self._err.close()
        try:
            os.unlink(self.err_path)
        except OSError:
            pass
        return self.proc.returncode
