"""felix.Error and its subclasses: one per kind of libfelix failure.

Every error carries libfelix's code (``code``, negative), its symbolic name
(``name``, e.g. ``"FX_ENOSTREAM"``) and libfelix's message: the broker's
text for a refused publish, the TLS reason for a refused certificate, the
variable for a bad environment value.
"""

from __future__ import annotations

import builtins
from typing import Dict, Optional, Type

# FX_E* values of include/felix/error.h (stable: values are never renumbered).
FX_EFULL = -1001
FX_ECLOSED = -1002
FX_ETIMEDOUT = -1003
FX_EEOF = -1004
FX_EWOULDBLOCK_LOOP = -1005
FX_ETOOBIG = -1006
FX_ECONFIG = -1007
FX_EINTERNAL = -1008
FX_ESHUTDOWN = -1009
FX_ENOTCONN = -1100
FX_ECONNLOST = -1101
FX_ETLS = -1102
FX_ETLS_UNKNOWN_CA = -1103
FX_ETLS_PIN = -1104
FX_ETLS_EXPIRED = -1105
FX_ETLS_NAME = -1106
FX_EQUIC = -1107
FX_EIDLE = -1108
FX_ESTREAMS = -1109
FX_EAUTH = -1200
FX_EFORBIDDEN = -1201
FX_ENOSTREAM = -1202
FX_ECURSOR_TOO_OLD = -1203
FX_ECURSOR_IN_FUTURE = -1204
FX_EPROTO = -1205
FX_EREMOTE = -1206
FX_EOVERLOAD = -1207
FX_EREFUSED = -1208
FX_ENOTFOUND = -1209
FX_EREDIRECT = -1210
FX_ENOTSERVING = -1211
FX_EMOVING = -1212
FX_EWIRE_FIRST = -1399  # the wire codec's FX_EWIRE_* are -1300..-1399
FX_EWIRE_LAST = -1300


class Error(Exception):
    """A libfelix call failed.

    Attributes: ``code`` (libfelix's negative code), ``name`` (its symbol,
    ``"FX_ETIMEDOUT"``, ``"EINVAL"``), ``message`` (libfelix's text).
    """

    def __init__(self, code: int, name: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.name = name
        self.message = message


class ConfigError(Error):
    """An option or FELIX_* variable is invalid (FX_ECONFIG, EINVAL)."""


class TLSError(Error):
    """The broker's certificate was refused: unknown CA, pin mismatch, expired, name."""


class ConnectionLost(Error):
    """Not connected, or the connection was lost or timed out idle."""


class Timeout(Error, builtins.TimeoutError):
    """A deadline passed (connect, close, flush, a subscription wait)."""


class AuthError(Error):
    """The broker refused the client's token."""


class Forbidden(Error):
    """The token does not grant this publish or subscribe."""


class StreamNotFound(Error):
    """The stream does not exist (and the broker does not create streams on use)."""


class Overloaded(Error):
    """The broker answered "overloaded": its queues stayed full."""


class TooBig(Error):
    """The publish is larger than the client's whole byte budget."""


class Closed(Error):
    """The client or the subscription is closed."""


class ShuttingDown(Error):
    """The broker is draining."""


class ProtocolError(Error):
    """A malformed frame or an unexpected answer."""


class RemoteError(Error):
    """The broker reported another error; its message says which."""


class Refused(Error):
    """The idempotent check refused the publish (``idempotent=True``); the
    message names the reason (sequence_gap, unknown_producer, ...)."""


class NotFound(Error):
    """A cache key has no live entry (libfelix's FX_ENOTFOUND); the cache_*
    methods answer None / False instead of raising it."""


class CursorError(Error):
    """A subscription's start offset is outside the stream's replay window.

    ``requested`` is the offset asked for, ``available`` the earliest offset
    the broker still has (too old) or the next one it will write (in future).
    """

    def __init__(self, code: int, name: str, message: str, requested: int = 0,
                 available: int = 0) -> None:
        super().__init__(code, name, message)
        self.requested = requested
        self.available = available


class CursorTooOld(CursorError):
    """The start offset has left the replay window; resume from ``available``."""


class CursorInFuture(CursorError):
    """The start offset has not been written yet; ``available`` is the next one."""


_BY_CODE: Dict[int, Type[Error]] = {
    FX_ECONFIG: ConfigError,
    -22: ConfigError,  # -EINVAL
    FX_ETLS: TLSError,
    FX_ETLS_UNKNOWN_CA: TLSError,
    FX_ETLS_PIN: TLSError,
    FX_ETLS_EXPIRED: TLSError,
    FX_ETLS_NAME: TLSError,
    FX_ENOTCONN: ConnectionLost,
    FX_ECONNLOST: ConnectionLost,
    FX_EQUIC: ConnectionLost,
    FX_EIDLE: ConnectionLost,
    FX_ETIMEDOUT: Timeout,
    FX_EAUTH: AuthError,
    FX_EFORBIDDEN: Forbidden,
    FX_ENOSTREAM: StreamNotFound,
    FX_EOVERLOAD: Overloaded,
    FX_EFULL: Overloaded,
    FX_ETOOBIG: TooBig,
    FX_ECLOSED: Closed,
    FX_ESHUTDOWN: ShuttingDown,
    FX_EPROTO: ProtocolError,
    FX_EREMOTE: RemoteError,
    FX_EREFUSED: Refused,
    FX_ENOTFOUND: NotFound,
    FX_ECURSOR_TOO_OLD: CursorTooOld,
    FX_ECURSOR_IN_FUTURE: CursorInFuture,
}


def class_of(code: int) -> Type[Error]:
    """The Error subclass raised for libfelix code |code|."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls
    if FX_EWIRE_FIRST <= code <= FX_EWIRE_LAST:
        return ProtocolError
    return Error


def make(code: int, name: str, message: str, detail: Optional[dict] = None) -> Error:
    """Builds the exception for |code|; |detail| adds CursorError's fields."""
    cls = class_of(code)
    if issubclass(cls, CursorError):
        return cls(code, name, message, **(detail or {}))
    return cls(code, name, message)
