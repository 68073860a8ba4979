"""Helpers of the packaging tests (tests/pkg): install trees, running
commands, the source and build directories."""

import os
import subprocess
import sys

SRC = os.environ.get("FX_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                                    "..", "..")))
BIN = os.environ.get("FX_BINARY_DIR", "")
PREFIX = "/usr/local"
sys.path.insert(0, os.path.join(SRC, "python", "tests"))


def install(destdir, prefix, *extra):
    """`cmake --install` of the build tree under |destdir| with |prefix|."""
    env = dict(os.environ, DESTDIR=str(destdir))
    r = subprocess.run(["cmake", "--install", BIN, "--prefix", prefix, *extra], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, "cmake --install failed:\n" + r.stdout + r.stderr
    return str(destdir)


class Stage:
    """An install tree: ``root`` (DESTDIR), ``prefix``, ``path(rel)``."""

    def __init__(self, root, prefix=PREFIX):
        self.root, self.prefix = root, prefix

    def path(self, *rel):
        return os.path.join(self.root + self.prefix, *rel)

    def pkg_env(self):
        """pkg-config and the dynamic loader pointed into the tree."""
        return dict(os.environ, PKG_CONFIG_SYSROOT_DIR=self.root,
                    PKG_CONFIG_PATH=self.path("lib", "pkgconfig"),
                    LD_LIBRARY_PATH=self.path("lib"))


def run(args, **kw):
    """Runs |args|; fails the test with its output unless it exits 0."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 60)
    r = subprocess.run(args, **kw)
    assert r.returncode == 0, "%s exited %d:\n%s%s" % (args, r.returncode, r.stdout, r.stderr)
    return r
