"""felix-broker's idle trim (allocator_idle_trim_ms) against a real,
unsanitised broker: 40 MiB published into a stream and freed when the
stream expires stays in the process while the broker is busy
(allocator_retain_bytes keeps it) and goes back to the kernel once nothing
has moved for allocator_idle_trim_ms. The control run with the trim off
shows that it is the trim that gave it back."""

import time
import urllib.request

NS = "default"
MiB = 1 << 20
PAYLOAD = b"x" * (256 * 1024)
COUNT = 160  # 40 MiB, under the 64 MiB allocator_retain_bytes default


def scrape(broker):
    url = "http://127.0.0.1:%d/metrics" % broker.admin_port
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def rss_bytes(broker):
    with open("/proc/%d/status" % broker.proc.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS for the broker")


def fill_and_expire(broker, connect):
    """Publishes 40 MiB to an auto-created stream, closes the client and waits
    until the stream expired (its ring freed). Returns the RSS with the ring
    full."""
    c = connect(broker)
    for _ in range(COUNT):
        c.publish(NS, "mem", PAYLOAD, ack="per_message")
    full = rss_bytes(broker)
    c.close()
    deadline = time.monotonic() + 20
    while scrape(broker).get("felix_registry_streams_expired_total", 0) < 1:
        assert time.monotonic() < deadline, "the stream did not expire"
        time.sleep(0.1)
    return full


def test_idle_broker_returns_freed_heap_to_the_kernel(start_broker, connect):
    b = start_broker("allocator_idle_trim_ms=300", "stream_idle_expiry_s=1")
    full = fill_and_expire(b, connect)
    assert full > 40 * MiB, "the ring did not hold the payloads (RSS %d)" % full
    deadline = time.monotonic() + 10
    while scrape(b).get("felix_broker_allocator_trimmed_bytes_total", 0) < 24 * MiB:
        assert time.monotonic() < deadline, "no idle trim gave 24 MiB back: %s" % {
            k: v for k, v in scrape(b).items() if "allocator" in k}
        time.sleep(0.1)
    m = scrape(b)
    assert m["felix_broker_allocator_trims_total"] >= 1
    assert m["felix_broker_allocator_idle_periods_total"] >= 1
    assert rss_bytes(b) < full - 24 * MiB


def test_without_idle_trim_the_freed_heap_stays(start_broker, connect):
    b = start_broker("allocator_idle_trim_ms=0", "stream_idle_expiry_s=1")
    full = fill_and_expire(b, connect)
    time.sleep(1.5)  # five times the trim delay of the test above
    m = scrape(b)
    assert m["felix_broker_allocator_trims_total"] == 0
    assert m["felix_broker_allocator_idle_periods_total"] == 0
    assert rss_bytes(b) > full - 8 * MiB, "RSS fell from %d to %d without a trim" % (
        full, rss_bytes(b))
