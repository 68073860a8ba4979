"""felix.Client, felix.Subscription and felix.Group over libfelix.

Threads: every libfelix call runs on the calling Python thread with the GIL
released (ctypes.CDLL); no Python code ever runs on a libfelix loop thread
(no callbacks are registered), so a slow Python program cannot stall the
connections of the process. Subscriptions wait in short slices, so Ctrl-C
(KeyboardInterrupt) interrupts a blocked iteration within SLICE_MS.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import weakref
from array import array
from itertools import accumulate, islice
from typing import (
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Union,
)

from . import _lib
from . import errors as _errors
from ._lib import lib

__all__ = ["Client", "Subscription", "Event", "Group", "GroupMessage", "Bytes", "Start",
           "Create"]

Bytes = Union[bytes, bytearray, memoryview, str]
Start = Union[str, int]
Create = Union[None, str, int]

# How long one fx_subscription_next call may wait: the bound on how late a
# blocked iteration sees Ctrl-C or a close() from another thread.
SLICE_MS = 100

_ACKS = {
    None: _lib.ACK_NONE,
    "none": _lib.ACK_NONE,
    "per_message": _lib.ACK_PER_MESSAGE,
    "per_batch": _lib.ACK_PER_BATCH,
}
_POLICIES = {
    "block": _lib.POLICY_BLOCK,
    "drop_new": _lib.POLICY_DROP_NEW,
    "drop_old": _lib.POLICY_DROP_OLD,
}
_SHARDINGS = {"hash_stream": 1, "rr": 2}
_DIRECT_FIELDS = frozenset(
    name for name, _ in _lib.ClientOpts._fields_ if name not in (
        "size", "server", "server_name", "ca_file", "pin_sha256", "insecure", "tenant", "token",
        "connect_timeout_ms", "sub_queue_policy", "publish_sharding")
)
# fx_iov packed as two native 64-bit words, built with array('Q').
_IOV_AS_QWORDS = (ctypes.sizeof(_lib.Iov) == 16 and ctypes.sizeof(ctypes.c_void_p) == 8
                  and array("Q").itemsize == 8)


def _env(name: str) -> Optional[str]:
    v = os.environ.get(name)
    return v if v else None


def _env_bool(name: str) -> Optional[bool]:
    v = _env(name)
    if v is None:
        return None
    if v in ("1", "true", "yes"):
        return True
    if v in ("0", "false", "no"):
        return False
    raise _errors.ConfigError(_errors.FX_ECONFIG, "FX_ECONFIG",
                              "%s: expected 1 or 0, got '%s'" % (name, v))


def _no_nul(b: bytes, what: str) -> bytes:
    """|b|, or ValueError when it holds a NUL byte (C would end it there)."""
    if b"\0" in b:
        raise ValueError("%s contains NUL (\\0), which C strings cannot carry" % what)
    return b


def _last_error() -> str:
    buf = ctypes.create_string_buffer(1024)
    lib.fx_client_last_error(None, buf, len(buf))
    return buf.value.decode("utf-8", "replace")


def _error(rv: int, what: str = "", detail: Optional[dict] = None) -> _errors.Error:
    """The exception for libfelix's |rv|, with this thread's last error text
    (read right after the failed call, on the same thread)."""
    name = lib.fx_errname(rv).decode()
    base = lib.fx_strerror(rv).decode()
    text = _last_error()
    if not text or text == base:
        msg = base
    elif base in text:
        msg = text
    else:
        msg = "%s: %s" % (base, text)
    if what:
        msg = "%s: %s" % (what, msg)
    return _errors.make(rv, name, msg, detail)


def _as_bytes(data: Bytes) -> bytes:
    if type(data) is bytes:
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    return bytes(data)


class Event:
    """One delivered message.

    ``payload`` (bytes), ``offset`` (int, or None when the broker sent none),
    ``gap`` (messages missed just before this one: 0 when none were).
    """

    __slots__ = ("payload", "offset", "gap")

    def __init__(self, payload: bytes, offset: Optional[int], gap: int) -> None:
        self.payload = payload
        self.offset = offset
        self.gap = gap

    def __repr__(self) -> str:
        return "Event(offset=%r, gap=%d, payload=%r)" % (self.offset, self.gap, self.payload[:32])


class Client:
    """A connection to a Felix-C broker (one libfelix fx_client).

    Arguments default to the environment variables the felix CLI reads, then
    to the CLI's defaults: ``server`` FELIX_SERVER ("127.0.0.1:5000"),
    ``pin`` FELIX_PIN (hex SHA-256 of the broker's certificate), ``ca``
    FELIX_CA (PEM trust anchors), ``insecure`` FELIX_INSECURE (accept any
    certificate: development only), ``tenant`` FELIX_TENANT ("t1"),
    ``token`` FELIX_TOKEN (""), ``server_name`` FELIX_SERVER_NAME (unset:
    the host part of ``server``, which a certificate checked against ``ca``
    must name; an IP address is matched against the certificate's IP
    addresses), ``connect_timeout`` in seconds FELIX_CONNECT_TIMEOUT_MS
    (5). libfelix's own FELIX_* tuning variables (FELIX_PUB_CONN_POOL, ...)
    apply too. Further keyword arguments set fx_client_opts fields by name
    (``sub_queue_capacity=1024``, ``sub_queue_policy="block"``,
    ``publish_inflight_bytes=...``; ``idempotent=True``: every acked publish
    is written at most once, re-sent after a lost connection under the same
    sequence; docs/client.md "Idempotent publish").

    Strings may not contain NUL ("\\0"): C would cut them there, so a name
    would silently mean another stream; they raise ValueError.

    Connects in the constructor (raising a felix.Error subclass: TLSError,
    Timeout, AuthError, ...); use it as a context manager, or call close().
    Any thread may publish; closing while other threads still call the
    client is not supported (stop them first).
    """

    def __init__(self, server: Optional[str] = None, pin: Optional[str] = None,
                 ca: Optional[str] = None, insecure: Optional[bool] = None,
                 tenant: Optional[str] = None, token: Optional[str] = None, *,
                 server_name: Optional[str] = None, connect_timeout: Optional[float] = None,
                 **options: Any) -> None:
        self._c: Optional[int] = None
        self._cp: Optional[ctypes.c_void_p] = None  # the same handle, ready to pass
        self._subs: "weakref.WeakSet[Subscription]" = weakref.WeakSet()
        self._groups: "weakref.WeakSet[Group]" = weakref.WeakSet()
        self._names: Dict[str, bytes] = {}
        buf = _lib.room(_lib.ClientOpts)
        lib.fx_client_opts_init(buf)
        o = _lib.ClientOpts.from_buffer(buf)
        if o.size < ctypes.sizeof(_lib.ClientOpts) or o.size > len(buf):
            raise _errors.ConfigError(
                _errors.FX_ECONFIG, "FX_ECONFIG",
                "libfelix's fx_client_opts is %d bytes; this felix package expects %d..%d"
                % (o.size, ctypes.sizeof(_lib.ClientOpts), len(buf)))
        rv = lib.fx_client_opts_from_env(buf)
        if rv != 0:
            raise _error(rv, "environment")
        keep: List[bytes] = []  # the strings o points to, alive until connect returns

        def s(v: Optional[str], what: str) -> Optional[bytes]:
            if v is None:
                return None
            b = _no_nul(v.encode("utf-8"), what)
            keep.append(b)
            return b

        self.server = server or _env("FELIX_SERVER") or "127.0.0.1:5000"
        o.server = s(self.server, "server")
        # None lets libfelix check the host part of server, as the CLI does.
        o.server_name = s(server_name or _env("FELIX_SERVER_NAME") or None, "server_name")
        o.pin_sha256 = s(pin if pin is not None else _env("FELIX_PIN"), "pin")
        o.ca_file = s(ca if ca is not None else _env("FELIX_CA"), "ca")
        ins = insecure if insecure is not None else _env_bool("FELIX_INSECURE")
        o.insecure = bool(ins)
        self.tenant = tenant or _env("FELIX_TENANT") or _env("FELIX_AUTH_TENANT") or "t1"
        o.tenant = s(self.tenant, "tenant")
        tok = token if token is not None else (_env("FELIX_TOKEN") or _env("FELIX_AUTH_TOKEN"))
        o.token = s(tok or "", "token")
        o.connect_timeout_ms = self._timeout_ms(connect_timeout)
        self._apply_options(o, options)
        self._batch_bytes = max(1, min(1 << 20, o.publish_inflight_bytes // 4,
                                       o.max_frame_bytes // 2))
        handle = ctypes.c_void_p()
        # The loop threads libfelix starts in its first connect inherit this
        # thread's signal mask: keep SIGINT/SIGTERM for Python's main thread.
        stop = {signal.SIGINT, signal.SIGTERM}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        try:
            rv = lib.fx_client_connect(ctypes.byref(handle), buf)
            err = _error(rv, "cannot connect to %s" % self.server) if rv != 0 else None
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        if err is not None:
            raise err
        self._c = handle.value
        self._cp = handle

    @staticmethod
    def _timeout_ms(connect_timeout: Optional[float]) -> int:
        if connect_timeout is not None:
            if connect_timeout <= 0:
                raise ValueError("connect_timeout must be > 0 seconds")
            return max(1, int(connect_timeout * 1000))
        v = _env("FELIX_CONNECT_TIMEOUT_MS")
        if v is None:
            return 5000
        if not v.isdigit() or not 0 < int(v) <= 3600000:
            raise _errors.ConfigError(_errors.FX_ECONFIG, "FX_ECONFIG",
                                      "FELIX_CONNECT_TIMEOUT_MS: expected milliseconds, got '%s'"
                                      % v)
        return int(v)

    @staticmethod
    def _apply_options(o: _lib.ClientOpts, options: Dict[str, Any]) -> None:
        for k, v in options.items():
            if k == "sub_queue_policy":
                if v not in _POLICIES:
                    raise ValueError("sub_queue_policy: expected block, drop_new or drop_old")
                o.sub_queue_policy = _POLICIES[v]
            elif k == "publish_sharding":
                if v not in _SHARDINGS:
                    raise ValueError("publish_sharding: expected hash_stream or rr")
                o.publish_sharding = _SHARDINGS[v]
            elif k in _DIRECT_FIELDS:
                setattr(o, k, v)
            else:
                raise TypeError("Client() got an unknown option '%s'" % k)

    # ---- lifetime -----------------------------------------------------------

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_c", None) is not None:
            try:
                self.close(timeout=1.0)
            except Exception:  # noqa: BLE001 - nothing can be raised from __del__
                pass

    @property
    def closed(self) -> bool:
        return self._c is None

    def close(self, timeout: Optional[float] = 5.0) -> None:
        """Closes the client without losing what was published: queued
        publishes are sent and taken by the broker within |timeout| seconds
        (None: no limit). Its subscriptions and group members are closed
        first. Raises Timeout when the deadline cut the close short, or the
        error that ended a publish stream early. Closing twice does nothing."""
        for sub in list(self._subs):
            sub.close()
        for g in list(self._groups):
            g.close()
        c, self._c, self._cp = self._c, None, None
        if c is None:
            return
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        rv = lib.fx_client_close(c, ms)
        if rv != 0:
            raise _error(rv, "close")

    def _handle(self) -> ctypes.c_void_p:
        c = self._cp
        if c is None:
            raise _errors.Closed(_errors.FX_ECLOSED, "FX_ECLOSED", "client closed")
        return c

    def _name(self, s: str) -> bytes:
        b = self._names.get(s)
        if b is None:
            b = _no_nul(s.encode("utf-8"), "name %r" % (s,))
            if len(self._names) < 4096:
                self._names[s] = b
        return b

    # ---- publish --------------------------------------------------------------

    def publish(self, ns: str, stream: str, data: Bytes, ack: Optional[str] = None) -> None:
        """Publishes |data| (bytes; a str is sent as UTF-8) to |ns|/|stream|
        of the client's tenant.

        ack=None returns once the client admitted the message (the byte
        budget and the publish queue wait while full; the client's loop sends
        it). ack="per_message" or "per_batch" returns once the broker
        answered, and raises its refusal: StreamNotFound, Forbidden,
        Overloaded, RemoteError, with the broker's message. Also raises
        TooBig, Closed, ConnectionLost.
        """
        # The hot path of single publishes: no method calls, the handle
        # already a c_void_p (no conversion per call), names encoded once.
        mode = _ACKS.get(ack)
        if mode is None:
            raise ValueError("ack must be None, 'per_message' or 'per_batch', not %r" % (ack,))
        names = self._names
        nsb = names.get(ns) or self._name(ns)
        stb = names.get(stream) or self._name(stream)
        b = data if data.__class__ is bytes else _as_bytes(data)
        c = self._cp
        if c is None:
            raise _errors.Closed(_errors.FX_ECLOSED, "FX_ECLOSED", "client closed")
        rv = lib.fx_publish(c, nsb, stb, b, len(b), mode)
        if rv != 0:
            raise _error(rv, "publish")

    def publish_batch(self, ns: str, stream: str, messages: Sequence[Bytes],
                      ack: Optional[str] = None) -> None:
        """Publishes |messages| as one batch frame (one call into libfelix),
        order kept; an acked batch is answered by one ack. Errors as publish().
        """
        mode = _ACKS.get(ack)
        if mode is None:
            raise ValueError("ack must be None, 'per_message' or 'per_batch', not %r" % (ack,))
        parts = [m if type(m) is bytes else _as_bytes(m) for m in messages]
        if parts:
            self._publish_parts(self._name(ns), self._name(stream), parts, mode)

    def publish_many(self, ns: str, stream: str, messages: Iterable[Bytes],
                     ack: Optional[str] = None, batch_size: int = 256) -> int:
        """Publishes every message of the iterable |messages|, |batch_size|
        messages (and at most about 1 MiB) per batch frame: one call into
        libfelix per batch. Returns how many were published. Errors as
        publish(); the messages of batches before the failing one were
        published.
        """
        mode = _ACKS.get(ack)
        if mode is None:
            raise ValueError("ack must be None, 'per_message' or 'per_batch', not %r" % (ack,))
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        nsb, stb = self._name(ns), self._name(stream)
        it = iter(messages)
        total = 0
        while True:
            parts = [m if type(m) is bytes else _as_bytes(m) for m in islice(it, batch_size)]
            if not parts:
                return total
            lens = list(map(len, parts))
            if sum(lens) <= self._batch_bytes:
                self._publish_parts(nsb, stb, parts, mode, lens)
            else:
                for chunk in self._split_by_bytes(parts, lens):
                    self._publish_parts(nsb, stb, chunk, mode)
            total += len(parts)

    def _split_by_bytes(self, parts: List[bytes], lens: List[int]) -> Iterator[List[bytes]]:
        start, size = 0, 0
        for i, n in enumerate(lens):
            if i > start and size + n > self._batch_bytes:
                yield parts[start:i]
                start, size = i, 0
            size += n
        yield parts[start:]

    def _publish_parts(self, ns: bytes, stream: bytes, parts: List[bytes], mode: int,
                       lens: Optional[List[int]] = None) -> None:
        """One fx_publish_batch of |parts|: their bytes joined into one buffer,
        the fx_iov array built without a Python object per message."""
        n = len(parts)
        if lens is None:
            lens = list(map(len, parts))
        blob = b"".join(parts)
        base = ctypes.cast(ctypes.c_char_p(blob), ctypes.c_void_p).value or 0
        if _IOV_AS_QWORDS:
            offs = list(accumulate(lens, initial=base))
            offs.pop()
            iov = array("Q", bytes(16 * n))
            iov[0::2] = array("Q", offs)
            iov[1::2] = array("Q", lens)
            ptr = iov.buffer_info()[0]
        else:
            iov = (_lib.Iov * n)()
            off = base
            for i, ln in enumerate(lens):
                iov[i].data, iov[i].len = off, ln
                off += ln
            ptr = ctypes.addressof(iov)
        rv = lib.fx_publish_batch(self._handle(), ns, stream, ptr, n, mode)
        del blob, iov
        if rv != 0:
            raise _error(rv, "publish")

    def flush(self, timeout: Optional[float] = None) -> None:
        """Waits until every publish made so far is acknowledged by QUIC (and
        answered, if acked), up to |timeout| seconds (None: no limit).
        Raises Timeout or Closed."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        rv = lib.fx_flush(self._handle(), ms)
        if rv != 0:
            raise _error(rv, "flush")

    def stats(self) -> Dict[str, int]:
        """The client's counters: publishes_lost, reconnects."""
        buf = _lib.room(_lib.ClientStats)
        rv = lib.fx_client_get_stats(self._handle(), buf)
        if rv != 0:
            raise _error(rv, "stats")
        st = _lib.ClientStats.from_buffer(buf)
        return {name: getattr(st, name) for name, _ in _lib.ClientStats._fields_}

    # ---- cache ------------------------------------------------------------------

    def _cache_names(self, ns: str, cache: str, key: str) -> tuple:
        absent = [n for n in _lib.missing if n.startswith("fx_cache_")]
        if absent:
            raise _errors.Error(-38, "ENOSYS",
                                "this libfelix has no cache calls (no %s): install a newer "
                                "libfelix" % ", ".join(absent))
        return self._name(ns), self._name(cache), _no_nul(key.encode("utf-8"), "key")

    def cache_put(self, ns: str, cache: str, key: str, value: Bytes,
                  ttl_ms: Optional[int] = None) -> None:
        """Stores |value| (bytes; a str as UTF-8) under |key| of |ns|/|cache|
        of the client's tenant, replacing any entry; returns once the broker
        answered. |ttl_ms|: the entry expires that many milliseconds after the
        put (None: never). Raises Forbidden, RemoteError (the broker's
        message, e.g. "cache put refused: value too large"), TooBig, Timeout,
        ConnectionLost, Closed; ConfigError (-EINVAL) for an empty name or key.
        """
        if ttl_ms is not None and (not isinstance(ttl_ms, int) or ttl_ms <= 0):
            raise ValueError("ttl_ms must be a positive int or None, not %r" % (ttl_ms,))
        nsb, cb, kb = self._cache_names(ns, cache, key)
        b = _as_bytes(value)
        rv = lib.fx_cache_put(self._handle(), nsb, cb, kb, b, len(b), ttl_ms or 0)
        if rv != 0:
            raise _error(rv, "cache_put")

    def cache_get(self, ns: str, cache: str, key: str) -> Optional[bytes]:
        """The value of |key| in |ns|/|cache|, or None when it has no live
        entry (never written, deleted or expired). Raises as cache_put."""
        nsb, cb, kb = self._cache_names(ns, cache, key)
        c = self._handle()
        n = ctypes.c_size_t(0)
        cap = 4096
        while True:
            buf = ctypes.create_string_buffer(cap)
            rv = lib.fx_cache_get(c, nsb, cb, kb, buf, cap, ctypes.byref(n))
            if rv == 0:
                return buf.raw[:n.value]
            if rv == _errors.FX_ENOTFOUND:
                return None
            if rv == _errors.FX_ETOOBIG and n.value > cap:
                cap = n.value  # the value grew between two reads: ask again
                continue
            raise _error(rv, "cache_get")

    def cache_delete(self, ns: str, cache: str, key: str) -> bool:
        """Removes |key| of |ns|/|cache|; True if a live entry was removed.
        Raises ProtocolError when the broker does not serve deletes, else as
        cache_put."""
        nsb, cb, kb = self._cache_names(ns, cache, key)
        existed = ctypes.c_bool(False)
        rv = lib.fx_cache_delete(self._handle(), nsb, cb, kb, ctypes.byref(existed))
        if rv != 0:
            raise _error(rv, "cache_delete")
        return bool(existed.value)

    # ---- subscribe --------------------------------------------------------------

    def subscribe(self, ns: str, stream: str, start: Start = "latest") -> "Subscription":
        """Subscribes to |ns|/|stream| from |start|: "latest" (new messages
        only), "earliest" (the oldest the broker keeps) or an offset (int).
        Returns once the broker accepted. Raises CursorTooOld /
        CursorInFuture (with .requested and .available) for an offset outside
        the replay window, StreamNotFound, Forbidden, Timeout, Closed.
        """
        st = _lib.Start()
        if start == "latest":
            st.kind = _lib.START_LATEST
        elif start == "earliest":
            st.kind = _lib.START_EARLIEST
        elif isinstance(start, int) and not isinstance(start, bool) and start >= 0:
            st.kind, st.offset = _lib.START_OFFSET, start
        else:
            raise ValueError("start must be 'latest', 'earliest' or an offset >= 0, not %r"
                             % (start,))
        h = ctypes.c_void_p()
        rv = lib.fx_subscribe(ctypes.byref(h), self._handle(), self._name(ns),
                              self._name(stream), ctypes.byref(st))
        if rv != 0:
            err = _error(rv, "subscribe %s/%s" % (ns, stream))
            if h.value:
                e = _sub_error(h.value)
                lib.fx_unsubscribe(h.value)
                err = _errors.make(rv, err.name, err.message,
                                   {"requested": e.requested, "available": e.available}
                                   if rv in (_errors.FX_ECURSOR_TOO_OLD,
                                             _errors.FX_ECURSOR_IN_FUTURE) else None)
            raise err
        sub = Subscription(self, h, ns, stream)
        self._subs.add(sub)
        return sub


    # ---- consumer groups -----------------------------------------------------------

    def join_group(self, ns: str, stream: str, group: str, member: Optional[str] = None,
                   window: int = 0, ack_wait: Optional[float] = None,
                   create: Create = None) -> "Group":
        """Joins consumer group |group| on |ns|/|stream| as one member and
        returns the Group once the broker accepted.

        The members of a group share the stream's records: each goes to one
        member at a time and is redelivered (attempt + 1) when that member
        naks it, lets its ack wait pass or leaves without settling it.
        |member| names this member (None: a generated name; joining again
        under a name gets back what that member held); |window| the records
        it may hold unsettled (0: 256); |ack_wait| the seconds after which a
        record not acked is redelivered (None: the group's). |create|
        creates the group if it does not exist: "all" (every record the
        stream still holds), "new" (records appended from now on) or an
        offset (int); None: joining a missing group raises RemoteError.
        Raises ProtocolError when the broker does not serve consumer
        groups, StreamNotFound, Forbidden, RemoteError (the broker's
        message), Timeout, Closed.
        """
        absent = [n for n in _lib.missing if n.startswith("fx_group_")]
        if absent:
            raise _errors.Error(-38, "ENOSYS",
                                "this libfelix has no consumer groups (no %s): install a "
                                "newer libfelix" % ", ".join(absent))
        buf = _lib.room(_lib.GroupOpts)
        lib.fx_group_opts_init(buf)
        o = _lib.GroupOpts.from_buffer(buf)
        if o.size < ctypes.sizeof(_lib.GroupOpts) or o.size > len(buf):
            raise _errors.ConfigError(
                _errors.FX_ECONFIG, "FX_ECONFIG",
                "libfelix's fx_group_opts is %d bytes; this felix package expects %d..%d"
                % (o.size, ctypes.sizeof(_lib.GroupOpts), len(buf)))
        o.ns, o.stream, o.group = self._name(ns), self._name(stream), self._name(group)
        o.member = None if member is None else _no_nul(member.encode("utf-8"), "member")
        if not isinstance(window, int) or isinstance(window, bool) or not 0 <= window < 1 << 32:
            raise ValueError("window must be an int from 0 to 2**32 - 1, not %r" % (window,))
        o.window = window
        o.ack_wait_ms = _ack_wait_ms(ack_wait)
        st = _group_create(create)
        if st is not None:
            o.create = ctypes.pointer(st)
        h = ctypes.c_void_p()
        rv = lib.fx_group_join(ctypes.byref(h), self._handle(), buf)
        if rv != 0:
            what = "join group %s on %s/%s" % (group, ns, stream)
            if rv == _errors.FX_EPROTO:
                what += " (does the broker serve consumer groups?)"
            raise _error(rv, what)
        g = Group(self, h, ns, stream, group, member)
        self._groups.add(g)
        return g


def _ack_wait_ms(ack_wait: Optional[float]) -> int:
    if ack_wait is None:
        return 0
    if isinstance(ack_wait, bool) or not isinstance(ack_wait, (int, float)) or \
            not 0 < ack_wait <= 2147483.647:
        raise ValueError("ack_wait must be None or seconds in (0, 2147483.647], not %r"
                         % (ack_wait,))
    return max(1, int(ack_wait * 1000))


def _group_create(create: Create) -> Optional[_lib.Start]:
    """fx_group_opts.create for |create|: None, "all", "new" or an offset."""
    if create is None:
        return None
    st = _lib.Start()
    if create == "all":
        st.kind = _lib.START_EARLIEST
    elif create == "new":
        st.kind = _lib.START_LATEST
    elif isinstance(create, int) and not isinstance(create, bool) and 0 <= create < 1 << 64:
        st.kind, st.offset = _lib.START_OFFSET, create
    elif create == "last":
        raise ValueError("create='last' cannot be asked for through libfelix yet: "
                         "use 'all', 'new' or an offset")
    else:
        raise ValueError("create must be None, 'all', 'new' or an offset >= 0, not %r"
                         % (create,))
    return st


def _ms(timeout: Optional[float], what: str) -> int:
    """|timeout| seconds as libfelix milliseconds (None: -1, no limit)."""
    if timeout is None:
        return -1
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError("%s must be None or seconds >= 0, not %r" % (what, timeout))
    return min(2147483647, int(timeout * 1000))


def _sub_error(h: Union[int, ctypes.c_void_p]) -> _lib.SubError:
    buf = _lib.room(_lib.SubError)
    lib.fx_subscription_error(h, buf)
    return _lib.SubError.from_buffer_copy(buf)


class Subscription:
    """An open subscription: iterate it for Events.

    ``for ev in sub`` blocks for the next event (Ctrl-C works) and ends when
    the broker ends the event stream (the reason is then in
    ``end_reason``) or the subscription is closed; a failure (connection
    lost without reconnect, protocol error) raises its felix.Error. Use it
    as a context manager or call close(), from any thread: a blocked
    iteration then ends within SLICE_MS. One consumer thread at a time.
    """

    def __init__(self, client: Client, handle: ctypes.c_void_p, ns: str, stream: str) -> None:
        # Handles are kept as c_void_p objects: ctypes passes them unconverted.
        self._h: Optional[ctypes.c_void_p] = handle
        self._lock = threading.Lock()
        self._ev_buf = _lib.room(_lib.Event)
        self._ev = _lib.Event.from_buffer(self._ev_buf)
        self._ev_ptr = ctypes.c_void_p(ctypes.addressof(self._ev_buf))
        self.client = client
        self.ns = ns
        self.stream = stream
        self.end_reason: Optional[str] = None

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_h", None) is not None:
            self.close()

    def __iter__(self) -> "Subscription":
        return self

    def __next__(self) -> Event:
        while True:
            ev = self._next(SLICE_MS)
            if ev is not None:
                return ev
            if self._h is None or self.end_reason is not None:
                raise StopIteration

    def get(self, timeout: Optional[float] = None) -> Optional[Event]:
        """The next event, waiting up to |timeout| seconds (None: until one
        arrives); None if the time passed or the stream ended (see
        ``end_reason``/``closed``). Raises the error that ended the
        subscription otherwise."""
        if timeout is None:
            try:
                return next(self)
            except StopIteration:
                return None
        left_ms = max(0, int(timeout * 1000))
        while True:
            ms = min(left_ms, SLICE_MS)
            ev = self._next(ms)
            left_ms -= ms
            if ev is not None or left_ms <= 0 or self._h is None or self.end_reason is not None:
                return ev

    def _next(self, ms: int) -> Optional[Event]:
        """One fx_subscription_next of at most |ms|: an Event, or None on
        timeout, on a clean end (end_reason set) or when closed."""
        with self._lock:
            h = self._h
            if h is None or self.end_reason is not None:
                return None
            rv = lib.fx_subscription_next(h, self._ev_ptr, ms)
            if rv == 0:
                ev = self._ev
                return Event(ctypes.string_at(ev.payload, ev.len),
                             ev.offset if ev.has_offset else None,
                             ev.gap if ev.flags & _lib.EVENT_GAP else 0)
            if rv == _errors.FX_ETIMEDOUT:
                return None
            err = _error(rv, "subscription %s/%s" % (self.ns, self.stream))
            e = _sub_error(h)
            reason = e.message.decode("utf-8", "replace") or err.message
        if rv == _errors.FX_EEOF or (rv == _errors.FX_ECLOSED and e.code == _errors.FX_ECLOSED):
            self.end_reason = reason
            return None
        raise _errors.make(e.code or rv, err.name, "%s: %s" % (err.message, reason)
                           if reason not in err.message else err.message)

    @property
    def closed(self) -> bool:
        return self._h is None

    def stats(self) -> Dict[str, int]:
        """The subscription's counters: received, delivered, dropped,
        dropped_batches, gaps, missed, queue_depth, reconnects,
        subscription_id, owner_changes."""
        with self._lock:
            if self._h is None:
                raise _errors.Closed(_errors.FX_ECLOSED, "FX_ECLOSED", "subscription closed")
            buf = _lib.room(_lib.SubStats)
            rv = lib.fx_subscription_stats(self._h, buf)
        if rv != 0:
            raise _error(rv, "stats")
        st = _lib.SubStats.from_buffer(buf)
        return {name: getattr(st, name) for name, _ in _lib.SubStats._fields_}

    def close(self) -> None:
        """Stops the subscription (the broker sees it end) and frees it.
        Closing twice does nothing."""
        with self._lock:
            h, self._h = self._h, None
            if h is not None:
                lib.fx_unsubscribe(h)
        self.end_reason = self.end_reason or "closed"


class GroupMessage:
    """One record given to a group member.

    ``payload`` (bytes), ``offset`` (int), ``attempt`` (1 on the first
    delivery, more on a redelivery), ``skipped`` (offsets the group settled
    as skipped just before this one).
    """

    __slots__ = ("payload", "offset", "attempt", "skipped")

    def __init__(self, payload: bytes, offset: int, attempt: int, skipped: int) -> None:
        self.payload = payload
        self.offset = offset
        self.attempt = attempt
        self.skipped = skipped

    def __repr__(self) -> str:
        return "GroupMessage(offset=%d, attempt=%d, skipped=%d, payload=%r)" % (
            self.offset, self.attempt, self.skipped, self.payload[:32])


class Group:
    """One member of a consumer group (Client.join_group): iterate it for
    GroupMessages and settle each with ack(), nak(), in_progress() or
    term().

    ``for m in group`` blocks for the next record (Ctrl-C works) and ends
    when the broker ends the member (``end_reason`` says so) or the member
    is closed; a failure (connection lost without reconnect, protocol
    error) raises its felix.Error. Settling queues an op that the client's
    loop sends, those of one loop turn in one frame; ack_sync() waits for
    the broker's answer that they are durable. Use it as a context manager
    or call leave() (close() is the same), from any thread: a blocked
    iteration then ends within SLICE_MS. One consumer thread at a time;
    other threads may settle (waiting up to SLICE_MS for the consumer's
    current wait).
    """

    def __init__(self, client: Client, handle: ctypes.c_void_p, ns: str, stream: str,
                 group: str, member: Optional[str]) -> None:
        self._h: Optional[ctypes.c_void_p] = handle
        self._lock = threading.Lock()
        self._msg_buf = _lib.room(_lib.GroupMsg)
        self._msg = _lib.GroupMsg.from_buffer(self._msg_buf)
        self._msg_ptr = ctypes.c_void_p(ctypes.addressof(self._msg_buf))
        self.client = client
        self.ns = ns
        self.stream = stream
        self.group = group
        self.member = member
        self.end_reason: Optional[str] = None

    def __enter__(self) -> "Group":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.leave()

    def __del__(self) -> None:
        if getattr(self, "_h", None) is not None:
            self.leave()

    def __iter__(self) -> "Group":
        return self

    def __next__(self) -> GroupMessage:
        while True:
            m = self._next(SLICE_MS)
            if m is not None:
                return m
            if self._h is None or self.end_reason is not None:
                raise StopIteration

    def get(self, timeout: Optional[float] = None) -> Optional[GroupMessage]:
        """The next record, waiting up to |timeout| seconds (None: until one
        arrives); None if the time passed, the broker ended the member or it
        was left (see ``end_reason``/``closed``). Raises the error that
        ended the member otherwise (ConnectionLost, ProtocolError)."""
        if timeout is None:
            try:
                return next(self)
            except StopIteration:
                return None
        left_ms = _ms(timeout, "timeout")
        while True:
            ms = min(left_ms, SLICE_MS)
            m = self._next(ms)
            left_ms -= ms
            if m is not None or left_ms <= 0 or self._h is None or self.end_reason is not None:
                return m

    def _next(self, ms: int) -> Optional[GroupMessage]:
        """One fx_group_next of at most |ms|: a GroupMessage, or None on
        timeout, when the broker ended the member (end_reason set) or when
        left."""
        with self._lock:
            h = self._h
            if h is None or self.end_reason is not None:
                return None
            rv = lib.fx_group_next(h, self._msg_ptr, ms)
            if rv == 0:
                m = self._msg
                return GroupMessage(ctypes.string_at(m.payload, m.len), m.offset, m.attempt,
                                    m.skipped)
            if rv == _errors.FX_ETIMEDOUT:
                return None
            err = _error(rv, "group %s on %s/%s" % (self.group, self.ns, self.stream))
        if rv in (_errors.FX_EEOF, _errors.FX_ECLOSED):
            self.end_reason = err.message
            return None
        raise err

    def _call(self, what: str, fn: Any, *args: Any) -> None:
        """|fn|(handle, *args) under the lock, so leave() cannot free the
        member meanwhile; raises its error (Closed once left)."""
        with self._lock:
            h = self._h
            if h is None:
                raise _errors.Closed(_errors.FX_ECLOSED, "FX_ECLOSED",
                                     "%s: group member closed" % what)
            rv = fn(h, *args)
            if rv != 0:
                raise _error(rv, "%s (group %s)" % (what, self.group))

    def ack(self, offset: int) -> None:
        """Acknowledges |offset|: processed, never redelivered. Queues the op
        and returns (ack_sync() waits for the broker). Raises Closed."""
        self._call("ack", lib.fx_group_ack, offset)

    def nak(self, offset: int, attempt: int, delay: Optional[float] = None) -> None:
        """Gives |offset| (delivery |attempt|) back for redelivery after
        |delay| seconds (None: the group's backoff; 0: at once)."""
        ms = -1 if delay is None else _ms(delay, "delay")
        self._call("nak", lib.fx_group_nak, offset, attempt, ms)

    def in_progress(self, offset: int, attempt: int) -> None:
        """Still working on |offset|: its ack wait starts again."""
        self._call("in_progress", lib.fx_group_in_progress, offset, attempt)

    def term(self, offset: int, attempt: int, reason: Optional[str] = None) -> None:
        """Never redeliver |offset|: settled as failed, with |reason| (at most
        256 bytes of UTF-8; longer raises ConfigError)."""
        r = None if reason is None else _no_nul(reason.encode("utf-8"), "reason")
        self._call("term", lib.fx_group_term, offset, attempt, r)

    def ack_sync(self, timeout: Optional[float] = None) -> None:
        """Sends the ops queued so far and waits up to |timeout| seconds
        (None: no limit) for the broker's answer that they are durable. Ops
        the broker refused as stale or invalid are counted in
        stats()["refused"]. Raises Timeout, ConnectionLost (the ops may not
        have arrived), Closed."""
        self._call("ack_sync", lib.fx_group_ack_sync, _ms(timeout, "timeout"))

    @property
    def closed(self) -> bool:
        return self._h is None

    def stats(self) -> Dict[str, int]:
        """The member's counters: received, delivered, expired, dropped,
        ops_sent, frames_sent, refused, reconnects."""
        buf = _lib.room(_lib.MemberStats)
        self._call("stats", lib.fx_group_stats, buf)
        st = _lib.MemberStats.from_buffer(buf)
        return {name: getattr(st, name) for name, _ in _lib.MemberStats._fields_}

    def leave(self) -> None:
        """Leaves the group: records that arrived but were not taken go back
        to the group at once, the queued ops are sent; records taken but
        not settled wait for their ack wait. Leaving twice does nothing."""
        with self._lock:
            h, self._h = self._h, None
            if h is not None:
                lib.fx_group_leave(h)
        self.end_reason = self.end_reason or "left"

    def close(self) -> None:
        """The same as leave()."""
        self.leave()
