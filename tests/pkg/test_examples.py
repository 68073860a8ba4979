"""The C examples, built out of tree as a user would, with
`cc $(pkg-config --cflags --libs felix)` against the install tree, and run
against a real felix-broker."""

import os
import shlex
import shutil
import subprocess

from fxpkg import run

EXAMPLES = "share/doc/felix/examples"


# What docs/client.md gives for linking libfelix.a: the archive, then the
# shared libraries it uses (Debian ships GnuTLS's dependencies shared only).
STATIC_DEPS = ["libngtcp2", "libngtcp2_crypto_gnutls", "gnutls", "nettle", "jansson"]


def build(stage, name, out_dir, static=False):
    """Compiles the installed example |name|.c into |out_dir|."""
    env = stage.pkg_env()
    if static:
        flags = run(["pkg-config", "--cflags", "felix"], env=env).stdout.strip()
        flags += " -L%s -Wl,-Bstatic -lfelix -Wl,-Bdynamic " % stage.path("lib")
        flags += run(["pkg-config", "--libs"] + STATIC_DEPS).stdout.strip() + " -lpthread -lm"
    else:
        flags = run(["pkg-config", "--cflags", "--libs", "felix"], env=env).stdout
    src = stage.path(EXAMPLES, name + ".c")
    exe = os.path.join(str(out_dir), name + ("-static" if static else ""))
    cmd = "cc -std=c11 -Wall -Wextra -Werror -o %s %s %s" % (shlex.quote(exe), shlex.quote(src),
                                                              flags)
    run(["sh", "-c", cmd], env=env)
    return exe


def example_env(stage, broker):
    env = stage.pkg_env()
    env.update(broker.env())
    return env


def test_publisher_builds_and_publishes(stage, broker, tmp_path):
    pub = build(stage, "publisher", tmp_path)
    sub = build(stage, "resume_subscriber", tmp_path)
    env = example_env(stage, broker)
    r = run([pub, "default", "ex-pub", "7"], env=env)
    assert "published 7 message(s) to default/ex-pub" in r.stdout
    r = run([sub, "default", "ex-pub", str(tmp_path / "off"), "7"], env=env)
    assert r.stdout.splitlines() == ["%d message %d" % (i, i) for i in range(7)]


def test_resume_subscriber_resumes_after_its_saved_offset(stage, broker, tmp_path):
    pub = build(stage, "publisher", tmp_path)
    sub = build(stage, "resume_subscriber", tmp_path)
    env = example_env(stage, broker)
    off = str(tmp_path / "offset")
    run([pub, "default", "ex-res", "5"], env=env)
    first = run([sub, "default", "ex-res", off, "3"], env=env).stdout.splitlines()
    assert first == ["0 message 0", "1 message 1", "2 message 2"]
    assert open(off).read() == "2\n"
    # The next run starts after offset 2: no event twice, none lost.
    second = run([sub, "default", "ex-res", off, "2"], env=env).stdout.splitlines()
    assert second == ["3 message 3", "4 message 4"]
    assert open(off).read() == "4\n"


def test_acked_publisher_gets_every_ack_and_reports_refusals(stage, start_broker_sets, tmp_path):
    acked = build(stage, "acked_publisher", tmp_path)
    sub = build(stage, "resume_subscriber", tmp_path)
    b = start_broker_sets("auto_create_streams=false", "streams=t1/default/known")
    env = example_env(stage, b)
    r = run([acked, "default", "known", "4"], env=env)
    assert "4 message(s) acked one by one" in r.stdout
    assert "batch of 4 message(s) acked" in r.stdout
    got = run([sub, "default", "known", str(tmp_path / "o"), "8"], env=env).stdout.splitlines()
    assert got == ["%d acked %d" % (i, i) for i in range(4)] + \
        ["%d batched %d" % (i + 4, i) for i in range(4)]
    r = subprocess.run([acked, "default", "unknown", "1"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1
    assert "FX_ENOSTREAM" in r.stderr, r.stderr


def test_publisher_links_statically(stage, broker, tmp_path):
    pub = build(stage, "publisher", tmp_path, static=True)
    needed = run(["readelf", "-d", pub]).stdout
    assert "libfelix" not in needed, needed
    env = example_env(stage, broker)
    env.pop("LD_LIBRARY_PATH")
    assert "published 3 message(s)" in run([pub, "default", "ex-static", "3"], env=env).stdout


def test_installed_examples_makefile_builds_all_three(stage, tmp_path):
    work = tmp_path / "ex"
    shutil.copytree(stage.path(EXAMPLES), work)
    run(["make", "-C", str(work), "CFLAGS=-O2 -Wall -Wextra -Werror"], env=stage.pkg_env())
    for prog in ("publisher", "acked_publisher", "resume_subscriber"):
        assert os.access(str(work / prog), os.X_OK), prog
