"""Client.cache_put / cache_get / cache_delete against a real felix-broker
(one per test): a round trip of bytes and str, a miss as None, a TTL, a
delete that says whether an entry was there, a value the broker refuses
raising RemoteError without harming the client, and bad arguments."""

import time

import pytest

import felix
import felix.errors

NS = "default"


def test_cache_put_then_get_round_trip_and_a_miss_is_none(connect):
    c = connect()
    c.cache_put(NS, "sessions", "user-42", b"\x00\x01binary\xff")
    assert c.cache_get(NS, "sessions", "user-42") == b"\x00\x01binary\xff"
    c.cache_put(NS, "sessions", "user-42", "text \u00e9")  # a str goes as UTF-8
    assert c.cache_get(NS, "sessions", "user-42") == "text \u00e9".encode()
    c.cache_put(NS, "sessions", "empty", b"")
    assert c.cache_get(NS, "sessions", "empty") == b""  # empty, not a miss
    assert c.cache_get(NS, "sessions", "nobody") is None
    big = bytes(range(256)) * 100  # larger than the first read buffer
    c.cache_put(NS, "sessions", "big", big)
    assert c.cache_get(NS, "sessions", "big") == big


def test_cache_entry_with_ttl_is_gone_after_it(connect):
    c = connect()
    c.cache_put(NS, "ttl", "short", b"v", ttl_ms=50)
    c.cache_put(NS, "ttl", "kept", b"w")
    time.sleep(0.3)
    assert c.cache_get(NS, "ttl", "short") is None
    assert c.cache_get(NS, "ttl", "kept") == b"w"
    with pytest.raises(ValueError):
        c.cache_put(NS, "ttl", "k", b"v", ttl_ms=0)


def test_cache_delete_returns_whether_an_entry_was_removed(connect):
    c = connect()
    c.cache_put(NS, "d", "k", b"v")
    assert c.cache_delete(NS, "d", "k") is True
    assert c.cache_get(NS, "d", "k") is None
    assert c.cache_delete(NS, "d", "k") is False


def test_cache_refused_value_raises_and_the_client_goes_on(start_broker, connect):
    b = start_broker("cache_max_value_bytes=16")
    c = connect(b)
    c.cache_put(NS, "lim", "a", b"small")
    with pytest.raises(felix.errors.RemoteError, match="value too large"):
        c.cache_put(NS, "lim", "b", b"x" * 64)
    assert c.cache_get(NS, "lim", "a") == b"small"


def test_cache_bad_names_raise_before_sending(connect):
    c = connect()
    with pytest.raises(felix.errors.ConfigError):
        c.cache_put(NS, "c", "", b"v")
    with pytest.raises(ValueError):
        c.cache_get(NS, "c", "a\0b")
    c.close()
    with pytest.raises(felix.errors.Closed):
        c.cache_get(NS, "c", "k")
