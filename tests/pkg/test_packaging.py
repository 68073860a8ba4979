"""Packaging for operators: the systemd unit (systemd-analyze verify in a
root made of the install tree), readiness and drain reported through
sd_notify by a real felix-broker, the production example configuration, the
man pages and the Debian packages (dpkg-deb -c / -I)."""

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from fxpkg import BIN, SRC, install, run

from broker_proc import Broker

UNIT = "lib/systemd/system/felix-broker.service"


def unit_keys(text):
    keys = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            k, v = line.split("=", 1)
            keys.setdefault(k, []).append(v)
    return keys


def verify_root(stage, tmp_path):
    """A root for systemd-analyze: the install tree plus what a system
    provides (the stock units the service orders against, /bin/kill)."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    host_units = "/lib/systemd/system"
    if not os.path.exists(os.path.join(host_units, "multi-user.target")):
        pytest.skip("this system has no %s/multi-user.target to verify against" % host_units)
    root = tmp_path / "root"
    shutil.copytree(stage.root, root, symlinks=True)
    shutil.copytree(host_units, root / "lib/systemd/system", symlinks=True, dirs_exist_ok=True)
    (root / "bin").mkdir(exist_ok=True)
    shutil.copy("/bin/kill", root / "bin/kill")
    return root


def analyze(root, unit_path):
    env = dict(os.environ, MANPATH=str(root) + "/usr/local/share/man")
    return subprocess.run(["systemd-analyze", "verify", "--root=%s" % root, unit_path],
                          capture_output=True, text=True, env=env, timeout=60)


def test_unit_passes_systemd_analyze_verify(stage, tmp_path):
    root = verify_root(stage, tmp_path)
    unit = str(root) + "/usr/local/" + UNIT
    r = analyze(root, unit)
    ours = [line for line in r.stderr.splitlines() if "felix" in line]
    assert r.returncode == 0 and not ours, r.stderr
    # The same check refuses a broken copy (so it is checking something).
    bad = root / "usr/local/lib/systemd/system/felix-broken.service"
    bad.write_text(open(unit).read().replace("Type=notify", "Type=notifyy")
                   .replace("/usr/local/bin/felix-broker", "/usr/local/bin/nothing-here"))
    r = analyze(root, str(bad))
    assert r.returncode != 0 and "nothing-here" in r.stderr, r.stderr


def test_unit_is_notify_with_state_dir_unprivileged_user_and_hardening(stage):
    keys = unit_keys(open(stage.path(UNIT)).read())
    want = {
        "Type": "notify", "StateDirectory": "felix", "User": "felix",
        "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
        "PrivateTmp": "yes", "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
        "ExecReload": "/bin/kill -HUP $MAINPID",
        "SystemCallFilter": "@system-service", "SystemCallErrorNumber": "EPERM",
        "ProtectProc": "invisible", "ProcSubset": "pid", "PrivateIPC": "yes", "LimitCORE": "0",
        "RestartPreventExitStatus": "1 2 4",
    }
    for k, v in want.items():
        assert keys.get(k) == [v], "%s=%s, want %s" % (k, keys.get(k), v)
    assert "--set state_dir=/var/lib/felix" in keys["ExecStart"][0]
    sysusers = open(stage.path("lib/sysusers.d/felix.conf")).read()
    assert re.search(r"^u felix - ", sysusers, re.M), sysusers


def test_broker_reports_ready_after_listening_and_stopping_on_drain(tmp_path):
    if not BIN:
        pytest.skip("FX_BINARY_DIR is not set (run through ctest)")
    sock_dir = tempfile.mkdtemp(prefix="fxnotify")  # AF_UNIX paths are short
    path = os.path.join(sock_dir, "notify")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(15)
    b = Broker(str(tmp_path / "state"), env={"NOTIFY_SOCKET": path})
    try:
        msg = s.recv(4096).decode()
        assert "READY=1" in msg.split("\n"), msg
        # Ready means listening: the admin endpoint answers now.
        with socket.create_connection(("127.0.0.1", b.admin_port), timeout=5) as c:
            c.sendall(b"GET /live HTTP/1.0\r\n\r\n")
            assert c.recv(64).startswith(b"HTTP/1.")
        b.terminate()
        msg = s.recv(4096).decode()
        assert "STOPPING=1" in msg.split("\n"), msg
    finally:
        status = b.stop()
        s.close()
        shutil.rmtree(sock_dir)
    assert status == 0


def test_broker_without_notify_socket_sends_nothing_and_serves(tmp_path):
    if not BIN:
        pytest.skip("FX_BINARY_DIR is not set (run through ctest)")
    b = Broker(str(tmp_path / "state"))
    err = b.stderr()
    assert b.stop() == 0
    assert "sd_notify" not in err, err


def test_example_configuration_is_valid_and_names_only_real_keys():
    if not BIN:
        pytest.skip("FX_BINARY_DIR is not set (run through ctest)")
    conf = os.path.join(SRC, "packaging", "broker.yaml")
    r = run([os.path.join(BIN, "felix-broker"), "--check-config", "--config", conf])
    assert "configuration is valid" in r.stdout
    text = open(conf).read()
    keys = re.findall(r"^([a-z_0-9]+):", text, re.M)
    for want in ("auth_mode", "jwks_file", "tls_cert_file", "tls_key_file", "max_connections",
                 "max_frame_bytes", "state_dir"):
        assert want in keys, want
    assert re.search(r"^auth_mode: jwt$", text, re.M)
    assert re.search(r"^state_dir: /var/lib/felix$", text, re.M)
    printed = run([os.path.join(BIN, "felix-broker"), "--print-config", "--config", conf]).stdout
    for k in keys:  # each one is applied (its source is the file, not the default)
        line = re.search(r"^%s: .*$" % k, printed, re.M)
        assert line and "# default" not in line.group(0), (k, line and line.group(0))


def test_man_pages_render(stage):
    if shutil.which("man") is None:
        pytest.skip("man is not installed")
    for page, sect, needle in (("felix.1", "man1", "felix 0."),
                               ("felix-broker.8", "man8", "--check-config")):
        out = run(["man", "-l", stage.path("share/man", sect, page)],
                  env=dict(os.environ, MANWIDTH="100", MAN_KEEP_FORMATTING="")).stdout
        assert "NAME" in out and needle in out.replace("\u2010", "-"), out[:500]


def deb_field(info, name):
    m = re.search(r"^ %s: (.*)$" % name, info, re.M)
    return m.group(1) if m else ""


def test_deb_packages_hold_their_files_and_computed_dependencies(tmp_path):
    if shutil.which("dpkg-deb") is None or shutil.which("dpkg-shlibdeps") is None:
        pytest.skip("dpkg-deb or dpkg-shlibdeps is missing (Debian package dpkg-dev)")
    root = install(tmp_path / "root", "/usr", "--strip")
    out = tmp_path / "deb"
    run([os.path.join(SRC, "packaging", "mkdeb.sh"), root, str(out)], cwd=SRC, timeout=120)
    debs = {f.split("_")[0]: str(out / f) for f in os.listdir(out) if f.endswith(".deb")}
    assert set(debs) == {"felix-broker", "libfelix0", "libfelix-dev", "python3-felix"}, debs
    arch = run(["gcc", "-print-multiarch"]).stdout.strip()
    want_files = {
        "felix-broker": ["./usr/bin/felix-broker", "./usr/bin/felix",
                         "./usr/share/man/man8/felix-broker.8.gz",
                         "./lib/systemd/system/felix-broker.service", "./etc/felix/broker.yaml",
                         "./usr/lib/sysusers.d/felix.conf"],
        "libfelix0": ["./usr/lib/%s/libfelix.so.0" % arch],
        "libfelix-dev": ["./usr/include/felix/felix.h", "./usr/lib/%s/libfelix.so" % arch,
                         "./usr/lib/%s/libfelix.a" % arch,
                         "./usr/lib/%s/pkgconfig/felix.pc" % arch,
                         "./usr/share/doc/felix/examples/publisher.c"],
        "python3-felix": ["./usr/lib/python3/dist-packages/felix/__init__.py"],
    }
    for pkg, files in want_files.items():
        listing = run(["dpkg-deb", "-c", debs[pkg]]).stdout
        names = {line.split()[5] for line in listing.splitlines()}
        assert set(files) <= names, (pkg, sorted(set(files) - names))
        assert "./usr/include/felix/felix.h" not in names or pkg == "libfelix-dev"
        assert not any("libfelix.so.0" in n for n in names) or pkg == "libfelix0", pkg
    info = run(["dpkg-deb", "-I", debs["libfelix0"]]).stdout
    deps = deb_field(info, "Depends")
    for lib in ("libngtcp2", "libgnutls30", "libjansson4", "libc6"):
        assert lib in deps, deps  # computed by dpkg-shlibdeps from the ELF
    assert re.search(r"libc6 \(>= [0-9.]+\)", deps), deps
    assert "libfelix0 (>= " in run(["dpkg-deb", "-I", debs["libfelix0"], "shlibs"]).stdout
    broker = run(["dpkg-deb", "-I", debs["felix-broker"]]).stdout
    assert "libsystemd0" in deb_field(broker, "Depends"), broker
    assert "/etc/felix/broker.yaml" in run(["dpkg-deb", "-I", debs["felix-broker"],
                                            "conffiles"]).stdout
    # Removal stops the service; an upgrade restarts it; purge forgets it.
    prerm = run(["dpkg-deb", "-I", debs["felix-broker"], "prerm"]).stdout
    assert "systemctl stop felix-broker.service" in prerm, prerm
    postinst = run(["dpkg-deb", "-I", debs["felix-broker"], "postinst"]).stdout
    assert "systemctl try-restart felix-broker.service" in postinst, postinst
    postrm = run(["dpkg-deb", "-I", debs["felix-broker"], "postrm"]).stdout
    assert "deb-systemd-helper purge felix-broker.service" in postrm, postrm
    dev = run(["dpkg-deb", "-I", debs["libfelix-dev"]]).stdout
    assert deb_field(dev, "Depends").startswith("libfelix0 (= "), dev
    py = run(["dpkg-deb", "-I", debs["python3-felix"]]).stdout
    assert deb_field(py, "Architecture") == "all" and "libfelix0" in deb_field(py, "Depends")
    # Stripped: no debug sections left in the packaged binaries.
    x = tmp_path / "x"
    run(["dpkg-deb", "-x", debs["libfelix0"], str(x)])
    sections = run(["readelf", "-S", str(x / ("usr/lib/%s/libfelix.so.0" % arch))]).stdout
    assert ".debug_info" not in sections
    # python3-felix loads libfelix0's library by its soname.
    run(["dpkg-deb", "-x", debs["python3-felix"], str(x)])
    env = {k: v for k, v in os.environ.items() if k not in ("FELIX_LIBRARY", "PYTHONPATH")}
    env.update(PYTHONPATH=str(x / "usr/lib/python3/dist-packages"),
               LD_LIBRARY_PATH=str(x / ("usr/lib/%s" % arch)))
    code = "import felix, felix._lib as l; print(felix.__file__, l.lib._name)"
    out = run(["/usr/bin/python3", "-c", code], env=env, cwd="/").stdout.split()
    assert out == [str(x / "usr/lib/python3/dist-packages/felix/__init__.py"), "libfelix.so.0"]


def filter_set(name, seen=None):
    """The system calls of systemd's filter set |name| (@... sets expanded)."""
    seen = set() if seen is None else seen
    out = subprocess.run(["systemd-analyze", "syscall-filter", name], capture_output=True,
                         text=True, timeout=30).stdout
    calls = set()
    for line in out.splitlines()[1:]:
        word = line.strip()
        if not word or word.startswith("#"):
            continue
        if word.startswith("@"):
            if word not in seen:
                seen.add(word)
                calls |= filter_set(word, seen)
        else:
            calls.add(word)
    return calls


def test_broker_system_calls_are_all_in_the_units_filter(tmp_path):
    """SystemCallFilter= in the unit: every system call felix-broker makes while it
    starts, serves durable publishes and subscriptions, idles, reloads and drains
    is in the set the unit allows, so the filter never fails one of them."""
    if not BIN:
        pytest.skip("FX_BINARY_DIR is not set (run through ctest)")
    if shutil.which("strace") is None or shutil.which("systemd-analyze") is None:
        pytest.skip("strace or systemd-analyze is missing (Debian packages strace, systemd)")
    keys = unit_keys(open(os.path.join(SRC, "packaging", "felix-broker.service")).read())
    allowed = set()
    for spec in keys["SystemCallFilter"]:
        for word in spec.split():
            allowed |= filter_set(word) if word.startswith("@") else {word}
    assert "fdatasync" in allowed and "flock" in allowed, sorted(allowed)
    trace = tmp_path / "strace.out"
    wrapper = tmp_path / "traced-broker"
    wrapper.write_text("#!/bin/sh\nexec strace -f -qq -o %s -- %s \"$@\"\n"
                       % (trace, os.path.join(BIN, "felix-broker")))
    wrapper.chmod(0o755)
    data = tmp_path / "data"
    b = Broker(str(tmp_path / "state"), exe=str(wrapper),
               sets=["durable_storage_dir=%s" % data, "durable_default=true",
                     "durable_fsync_mode=on_commit", "allocator_idle_trim_ms=200"])
    try:
        env = dict(os.environ, **b.env())
        felix = os.path.join(BIN, "felix")
        run([felix, "pub", "--ack", "per_message", "--count", "20", "t1/default/sc", "x"],
            env=env, timeout=60)
        run([felix, "sub", "--from", "earliest", "--count", "20", "t1/default/sc"], env=env,
            timeout=60)
        with socket.create_connection(("127.0.0.1", b.admin_port), timeout=5) as c:
            c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            while c.recv(65536):
                pass
        # Signals go to the broker, strace's child (strace would detach on them).
        with open("/proc/%d/task/%d/children" % (b.proc.pid, b.proc.pid)) as f:
            broker_pid = int(f.read().split()[0])
        os.kill(broker_pid, signal.SIGHUP)  # reload
        time.sleep(1.0)  # idle: the trim runs
        os.kill(broker_pid, signal.SIGTERM)  # drain
        b.proc.wait(timeout=60)
    finally:
        err = b.stderr()
        status = b.stop()
    assert status == 0, err
    used = set()
    for line in trace.read_text().splitlines():
        m = re.match(r"^\d+\s+(?:<\.\.\. )?([a-z0-9_]+)(?:\(| resumed>)", line)
        if m:
            used.add(m.group(1))
    assert {"fdatasync", "flock", "epoll_wait"} & used, sorted(used)
    missing = sorted(used - allowed)
    assert not missing, "system calls outside SystemCallFilter=: %s" % missing
