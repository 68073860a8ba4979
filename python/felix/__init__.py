"""Felix-C client for Python: publish to and subscribe from a Felix-C broker.

A thin layer over libfelix (the C client library) with ctypes::

    import felix

    with felix.Client() as c:                 # FELIX_SERVER, FELIX_PIN, ... as the CLI
        c.publish("default", "demo", b"hello", ack="per_message")
        with c.subscribe("default", "demo", start="earliest") as sub:
            for ev in sub:
                print(ev.offset, ev.payload)

libfelix is loaded from $FELIX_LIBRARY, else by its soname libfelix.so.0.
"""

from .client import SLICE_MS, Client, Event, Group, GroupMessage, Subscription
from .errors import (
    AuthError,
    Closed,
    ConfigError,
    ConnectionLost,
    CursorError,
    CursorInFuture,
    CursorTooOld,
    Error,
    Forbidden,
    Overloaded,
    ProtocolError,
    Refused,
    NotFound,
    RemoteError,
    ShuttingDown,
    StreamNotFound,
    Timeout,
    TLSError,
    TooBig,
)

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Subscription",
    "Event",
    "Group",
    "GroupMessage",
    "SLICE_MS",
    "Error",
    "AuthError",
    "Closed",
    "ConfigError",
    "ConnectionLost",
    "CursorError",
    "CursorInFuture",
    "CursorTooOld",
    "Forbidden",
    "Overloaded",
    "ProtocolError",
    "Refused",
    "NotFound",
    "RemoteError",
    "ShuttingDown",
    "StreamNotFound",
    "Timeout",
    "TLSError",
    "TooBig",
]
