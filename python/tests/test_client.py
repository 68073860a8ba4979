"""The felix package against a real felix-broker (one per test, ports
picked by the kernel): connect and its errors, publish and its ack modes,
publish_batch and publish_many, subscribe, resume, gaps, closing, Ctrl-C."""

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import felix
import felix._lib
import felix.errors

NS = "default"
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("FX_SOURCE_DIR", os.path.join(HERE, "..", ".."))


def read(sub, n, timeout=15.0):
    """The next |n| events of |sub|; fails if they take longer than |timeout|."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        ev = sub.get(timeout=max(0.0, deadline - time.monotonic()))
        assert ev is not None, "got %d of %d events" % (len(got), n)
        got.append(ev)
    return got


# ---- connect -------------------------------------------------------------------


def test_publish_acked_then_subscribe_earliest_reads_it_back(connect):
    c = connect()
    for i in range(3):
        c.publish(NS, "rt", b"m%d" % i, ack="per_message")
    with c.subscribe(NS, "rt", start="earliest") as sub:
        evs = read(sub, 3)
    assert [(e.offset, e.payload, e.gap) for e in evs] == [(0, b"m0", 0), (1, b"m1", 0),
                                                         (2, b"m2", 0)]


def test_idempotent_client_publishes_acked_batches_once(connect):
    c = connect(idempotent=True)
    for i in range(3):
        c.publish(NS, "idem", b"m%d" % i, ack="per_message")
    c.publish_batch(NS, "idem", [b"m3", b"m4"], ack="per_batch")
    with c.subscribe(NS, "idem", start="earliest") as sub:
        evs = read(sub, 5)
    assert [(e.offset, e.payload) for e in evs] == [(i, b"m%d" % i) for i in range(5)]


def test_client_defaults_come_from_the_cli_environment(broker, monkeypatch):
    monkeypatch.setenv("FELIX_SERVER", broker.server)
    monkeypatch.setenv("FELIX_PIN", broker.pin)
    monkeypatch.setenv("FELIX_TENANT", "t7")
    monkeypatch.setenv("FELIX_CONNECT_TIMEOUT_MS", "15000")
    with felix.Client() as c:
        assert c.server == broker.server and c.tenant == "t7"
        c.publish(NS, "env", b"x", ack="per_message")
    monkeypatch.setenv("FELIX_INSECURE", "maybe")
    with pytest.raises(felix.ConfigError, match="FELIX_INSECURE"):
        felix.Client()


def test_bad_libfelix_environment_value_raises_config_error_naming_it(broker, monkeypatch):
    monkeypatch.setenv("FELIX_PUB_CONN_POOL", "lots")
    with pytest.raises(felix.ConfigError, match="FELIX_PUB_CONN_POOL"):
        felix.Client(server=broker.server, pin=broker.pin)


def test_wrong_pin_raises_tls_error_with_the_reason(broker):
    with pytest.raises(felix.TLSError) as ei:
        felix.Client(server=broker.server, pin="00" * 32, connect_timeout=15)
    assert ei.value.name == "FX_ETLS_PIN"
    assert "pin" in str(ei.value)


def _ip_only_certificate(tmp_path):
    """A self-signed key and certificate naming only IP 127.0.0.1 (no DNS
    name), made with openssl; skips the test without it."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    key, cert = str(tmp_path / "ip-key.pem"), str(tmp_path / "ip-cert.pem")
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=felix-test", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return key, cert


def test_ca_checks_the_host_of_server_unless_server_name_says_otherwise(start_broker, tmp_path,
                                                                        monkeypatch):
    monkeypatch.delenv("FELIX_SERVER_NAME", raising=False)
    key, cert = _ip_only_certificate(tmp_path)
    b = start_broker("tls_cert_file=%s" % cert, "tls_key_file=%s" % key)
    assert b.server.startswith("127.0.0.1:")
    # The certificate names 127.0.0.1, the host of server: accepted.
    with felix.Client(server=b.server, ca=cert, connect_timeout=15) as c:
        c.publish(NS, "named", b"x", ack="per_message")
    # It does not name localhost: refused when that is the name asked for.
    with pytest.raises(felix.TLSError):
        felix.Client(server=b.server, ca=cert, server_name="localhost", connect_timeout=15)
    monkeypatch.setenv("FELIX_SERVER_NAME", "localhost")
    with pytest.raises(felix.TLSError):
        felix.Client(server=b.server, ca=cert, connect_timeout=15)
    monkeypatch.setenv("FELIX_SERVER_NAME", "127.0.0.1")
    with felix.Client(server=b.server, ca=cert, connect_timeout=15) as c:
        c.publish(NS, "named", b"y", ack="per_message")


def test_strings_with_nul_are_refused_not_cut(connect, broker):
    c = connect()
    calls = [
        lambda: c.publish(NS, "a\0b", b"x", ack="per_message"),
        lambda: c.publish("de\0fault", "a", b"x", ack="per_message"),
        lambda: c.publish_batch(NS, "a\0", [b"x"], ack="per_message"),
        lambda: c.publish_many(NS, "a\0", [b"x"]),
        lambda: c.subscribe(NS, "a\0b"),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="NUL"):
            call()
    with pytest.raises(ValueError, match="tenant contains NUL"):
        felix.Client(server=broker.server, pin=broker.pin, tenant="t1\0t2")
    # Nothing reached stream "a" (the cut name) or any other.
    with c.subscribe(NS, "a", start="earliest") as sub:
        assert sub.get(timeout=0.3) is None


def test_nothing_listening_raises_timeout(tmp_path):
    import socket

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))  # a UDP port nobody answers on
    try:
        with pytest.raises(felix.Timeout) as ei:
            felix.Client(server="127.0.0.1:%d" % s.getsockname()[1], insecure=True,
                         connect_timeout=0.3)
    finally:
        s.close()
    assert isinstance(ei.value, TimeoutError) and ei.value.code == felix.errors.FX_ETIMEDOUT


def test_context_manager_closes_and_later_calls_raise_closed(connect, broker):
    with felix.Client(server=broker.server, pin=broker.pin) as c:
        c.publish(NS, "cm", b"x")
    assert c.closed
    with pytest.raises(felix.Closed):
        c.publish(NS, "cm", b"y")
    c.close()  # twice: nothing


def test_unknown_option_and_bad_values_are_refused(broker):
    with pytest.raises(TypeError, match="no_such_option"):
        felix.Client(server=broker.server, pin=broker.pin, no_such_option=1)
    with pytest.raises(ValueError, match="sub_queue_policy"):
        felix.Client(server=broker.server, pin=broker.pin, sub_queue_policy="sometimes")


# ---- publish -------------------------------------------------------------------


def test_unknown_stream_raises_stream_not_found_with_the_broker_message(start_broker):
    b = start_broker("auto_create_streams=false", "streams=t1/default/known")
    with felix.Client(server=b.server, pin=b.pin) as c:
        c.publish(NS, "known", b"ok", ack="per_message")
        with pytest.raises(felix.StreamNotFound) as ei:
            c.publish(NS, "unknown", b"no", ack="per_message")
        assert ei.value.name == "FX_ENOSTREAM"
        assert "unknown" in str(ei.value), str(ei.value)
        with pytest.raises(felix.StreamNotFound):
            c.publish_batch(NS, "unknown", [b"a", b"b"], ack="per_batch")
        with pytest.raises(felix.StreamNotFound):
            c.subscribe(NS, "unknown")


def test_publish_takes_bytes_str_bytearray_and_memoryview(connect):
    c = connect()
    with c.subscribe(NS, "types") as sub:
        for data in (b"b", "s\u00e9", bytearray(b"ba"), memoryview(b"xmvx")[1:3]):
            c.publish(NS, "types", data, ack="per_message")
        assert [e.payload for e in read(sub, 4)] == [b"b", "s\u00e9".encode(), b"ba", b"mv"]


def test_ack_mode_must_be_none_per_message_or_per_batch(connect):
    c = connect()
    for bad in ("always", 1, True):
        with pytest.raises(ValueError, match="ack"):
            c.publish(NS, "a", b"x", ack=bad)


def test_publish_larger_than_the_budget_raises_too_big(connect):
    c = connect(publish_inflight_bytes=64 * 1024)
    with pytest.raises(felix.TooBig):
        c.publish(NS, "big", b"x" * (128 * 1024))


def test_publish_batch_is_one_frame_in_order(connect, monkeypatch):
    c = connect()
    calls = count_calls(monkeypatch, "fx_publish_batch")
    with c.subscribe(NS, "batch") as sub:
        c.publish_batch(NS, "batch", [b"%d" % i for i in range(10)], ack="per_batch")
        assert [e.payload for e in read(sub, 10)] == [b"%d" % i for i in range(10)]
    assert calls == [10]


def count_calls(monkeypatch, name):
    """Wraps libfelix's |name|; returns the list of message counts passed."""
    real = getattr(felix._lib.lib, name)
    calls = []

    def wrapper(c, ns, stream, iov, n, ack):
        calls.append(n)
        return real(c, ns, stream, iov, n, ack)

    monkeypatch.setattr(felix._lib.lib, name, wrapper)
    return calls


def test_publish_many_crosses_into_c_once_per_batch(connect, monkeypatch):
    c = connect(sub_queue_policy="block")
    batches = count_calls(monkeypatch, "fx_publish_batch")
    singles = count_calls(monkeypatch, "fx_publish")
    with c.subscribe(NS, "many") as sub:
        n = c.publish_many(NS, "many", (b"m%d" % i for i in range(1000)), batch_size=100)
        assert n == 1000
        evs = read(sub, 1000)
    assert batches == [100] * 10 and singles == []
    assert [e.payload for e in evs] == [b"m%d" % i for i in range(1000)]
    assert [e.offset for e in evs] == list(range(1000))


def test_publish_many_splits_large_messages_by_bytes(connect, monkeypatch):
    c = connect(sub_queue_policy="block")
    batches = count_calls(monkeypatch, "fx_publish_batch")
    big = [bytes([i]) * (200 * 1024) for i in range(12)]  # 2.4 MiB in all
    with c.subscribe(NS, "bytes") as sub:
        assert c.publish_many(NS, "bytes", big, ack="per_batch") == 12
        assert [e.payload for e in read(sub, 12)] == big
    assert len(batches) >= 3 and sum(batches) == 12, batches


def test_close_sends_what_was_published_unacked(broker, connect):
    c = felix.Client(server=broker.server, pin=broker.pin)
    c.publish_many(NS, "flush", (b"%d" % i for i in range(500)))
    c.close()
    reader = connect()
    with reader.subscribe(NS, "flush", start="earliest") as sub:
        assert [e.payload for e in read(sub, 500)] == [b"%d" % i for i in range(500)]


# ---- subscribe ---------------------------------------------------------------


def test_subscribe_from_an_offset_resumes_there(connect):
    c = connect()
    c.publish_batch(NS, "off", [b"a", b"b", b"c", b"d", b"e"], ack="per_batch")
    with c.subscribe(NS, "off", start=3) as sub:
        assert [(e.offset, e.payload) for e in read(sub, 2)] == [(3, b"d"), (4, b"e")]
        assert sub.get(timeout=0.2) is None


def test_cursor_too_old_and_in_future_carry_requested_and_available(start_broker):
    b = start_broker("log_capacity=4", "ack_on_commit=true")
    with felix.Client(server=b.server, pin=b.pin) as c:
        for i in range(10):
            c.publish(NS, "cur", b"%d" % i, ack="per_message")
        with pytest.raises(felix.CursorTooOld) as old:
            c.subscribe(NS, "cur", start=1)
        assert (old.value.requested, old.value.available) == (1, 6)
        with pytest.raises(felix.CursorInFuture) as fut:
            c.subscribe(NS, "cur", start=50)
        assert (fut.value.requested, fut.value.available) == (50, 10)
        assert isinstance(old.value, felix.CursorError) and isinstance(old.value, felix.Error)
        with c.subscribe(NS, "cur", start=old.value.available) as sub:
            assert [e.offset for e in read(sub, 4)] == [6, 7, 8, 9]


def test_bad_start_is_refused(connect):
    c = connect()
    for bad in ("middle", -1, 1.5, True):
        with pytest.raises(ValueError, match="start"):
            c.subscribe(NS, "s", start=bad)


def test_gap_counts_messages_the_client_queue_dropped(connect):
    c = connect(sub_queue_capacity=1, sub_queue_policy="drop_new")
    pub = connect()
    with c.subscribe(NS, "gap") as sub:
        for i in range(200):  # one batch each, nobody reading: the queue keeps the first
            pub.publish(NS, "gap", b"%d" % i, ack="per_message")
        deadline = time.monotonic() + 15
        while sub.stats()["dropped"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        evs = []
        while True:
            ev = sub.get(timeout=0.5)
            if ev is None:
                break
            evs.append(ev)
        pub.publish(NS, "gap", b"after", ack="per_message")
        evs += read(sub, 1)
        st = sub.stats()
    assert evs[-1].payload == b"after" and evs[-1].offset == 200
    gaps = sum(e.gap for e in evs)
    assert gaps > 0 and st["dropped"] > 0
    assert len(evs) + gaps == 201, (len(evs), gaps)  # every offset delivered or counted missed
    assert st["missed"] == gaps


def test_get_returns_none_after_its_timeout(connect):
    c = connect()
    with c.subscribe(NS, "quiet") as sub:
        t = time.monotonic()
        assert sub.get(timeout=0.3) is None
        assert 0.25 <= time.monotonic() - t < 5


def test_close_from_another_thread_ends_a_blocked_iteration(connect):
    c = connect()
    sub = c.subscribe(NS, "close")
    got = []
    done = threading.Event()

    def consume():
        for ev in sub:
            got.append(ev)
        done.set()

    th = threading.Thread(target=consume)
    th.start()
    c.publish(NS, "close", b"one", ack="per_message")
    deadline = time.monotonic() + 15
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    t = time.monotonic()
    sub.close()
    assert done.wait(5), "iteration did not end after close()"
    assert time.monotonic() - t < 2
    th.join()
    assert [e.payload for e in got] == [b"one"]
    assert sub.closed and sub.end_reason == "closed"
    sub.close()


def test_client_close_closes_its_subscriptions(broker):
    c = felix.Client(server=broker.server, pin=broker.pin)
    sub = c.subscribe(NS, "cc")
    c.close()
    assert sub.closed
    assert list(sub) == []


def test_ctrl_c_interrupts_a_blocked_iteration(broker, tmp_path):
    script = tmp_path / "sub.py"
    script.write_text(textwrap.dedent("""
        import sys, felix
        with felix.Client(server=sys.argv[1], pin=sys.argv[2]) as c:
            with c.subscribe("default", "ctrlc") as sub:
                print("subscribed", flush=True)
                try:
                    for ev in sub:
                        pass
                except KeyboardInterrupt:
                    print("interrupted", flush=True)
                    sys.exit(3)
    """))
    p = subprocess.Popen([sys.executable, str(script), broker.server, broker.pin],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "subscribed"
        time.sleep(0.3)  # blocked in the iteration by now
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 3, (p.returncode, out, err)
    assert "interrupted" in out
    assert time.monotonic() - t < 5


# ---- library and errors ---------------------------------------------------------


def test_library_comes_from_felix_library_else_the_soname():
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(felix.__file__)))
    env = dict(os.environ, FELIX_LIBRARY="/nonexistent/libfelix.so.0", PYTHONPATH=pkg_parent)
    r = subprocess.run([sys.executable, "-c", "import felix"], env=env, capture_output=True,
                       text=True)
    assert r.returncode != 0 and "FELIX_LIBRARY=/nonexistent/libfelix.so.0" in r.stderr
    lib = os.environ.get("FELIX_LIBRARY")
    if not lib:
        pytest.skip("FELIX_LIBRARY is not set: no build tree to find the soname in")
    env = {k: v for k, v in os.environ.items() if k != "FELIX_LIBRARY"}
    env["PYTHONPATH"] = pkg_parent
    env["LD_LIBRARY_PATH"] = os.path.dirname(lib)
    code = "import felix, felix._lib as l; print(l.lib._name)"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "libfelix.so.0", r.stderr
    env.pop("LD_LIBRARY_PATH")
    r = subprocess.run([sys.executable, "-c", "import felix"], env=env, capture_output=True,
                       text=True, cwd="/")
    if r.returncode != 0:  # no installed libfelix on this machine: the message says what to do
        assert "libfelix.so.0" in r.stderr and "FELIX_LIBRARY" in r.stderr


def test_error_codes_match_the_c_header():
    text = open(os.path.join(SRC, "include", "felix", "error.h")).read()
    codes = dict(re.findall(r"X\((FX_E[A-Z0-9_]+), (-\d+),", text))
    assert len(codes) > 30
    lib = felix._lib.lib
    for name, value in codes.items():
        assert lib.fx_errname(int(value)).decode() == name
        if hasattr(felix.errors, name):
            assert getattr(felix.errors, name) == int(value), name
        if name.startswith("FX_EWIRE_"):
            assert felix.errors.class_of(int(value)) is felix.ProtocolError
    for const in dir(felix.errors):
        if const.startswith("FX_E") and not const.startswith("FX_EWIRE_"):
            assert const in codes, "%s is not in error.h" % const
    assert felix.errors.class_of(int(codes["FX_ETLS_PIN"])) is felix.TLSError


def test_structure_prefixes_match_the_header_field_order():
    text = open(os.path.join(SRC, "include", "felix", "felix.h")).read()

    def fields(struct):
        body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (struct, struct), text, re.S)
        assert body, struct
        decls = re.sub(r"/\*.*?\*/", "", body.group(1), flags=re.S)
        return re.findall(r"(\w+)(?:\[\d+\])?;", decls)

    for struct, cls in (("fx_client_opts", felix._lib.ClientOpts), ("fx_event", felix._lib.Event),
                        ("fx_sub_stats", felix._lib.SubStats),
                        ("fx_sub_error", felix._lib.SubError),
                        ("fx_client_stats", felix._lib.ClientStats),
                        ("fx_iov", felix._lib.Iov), ("fx_start", felix._lib.Start)):
        names = [n for n, _ in cls._fields_]
        # Python declares a prefix: fields are only ever appended in C.
        assert fields(struct)[:len(names)] == names, struct


def test_readme_quick_start_prints_what_it_published(broker):
    text = open(os.path.join(SRC, "README.md")).read()
    m = re.search(r"python3 - <<'PY'\n(.*?)\nPY\n", text, re.S)
    assert m, "no Python quick start in README.md"
    env = dict(os.environ, **broker.env())
    p = subprocess.Popen([sys.executable, "-c", m.group(1)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    lines = []
    try:
        while len(lines) < 1001:
            line = p.stdout.readline()
            assert line, "the quick start ended after %r: %s" % (lines[-3:], p.stderr.read())
            lines.append(line.rstrip("\n"))
        p.send_signal(signal.SIGINT)  # it iterates until Ctrl-C, as it says
        _, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert lines[0] == "0 b'hello' 0"
    assert lines[1000] == "1000 b'm999' 0"
    assert "KeyboardInterrupt" in err
