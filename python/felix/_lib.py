"""ctypes declarations of libfelix (include/felix/felix.h).

The library is FELIX_LIBRARY when set, else the soname libfelix.so.0 found
by the dynamic loader. Structures libfelix fills are given buffers larger
than the fields declared here: fields are only ever appended to them, so a
newer libfelix never writes past what Python allocated.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (
    POINTER,
    Structure,
    c_bool,
    c_char,
    c_char_p,
    c_int,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)
from typing import List

SONAME = "libfelix.so.0"

# Room for structures libfelix fills; the declared fields are a prefix.
STRUCT_ROOM = 4096

# enum fx_ack
ACK_NONE = 1
ACK_PER_MESSAGE = 2
ACK_PER_BATCH = 3
# enum fx_policy
POLICY_BLOCK = 1
POLICY_DROP_NEW = 2
POLICY_DROP_OLD = 3
# enum fx_start_kind
START_LATEST = 0
START_EARLIEST = 1
START_OFFSET = 2
# fx_event.flags
EVENT_GAP = 0x1


class ClientOpts(Structure):
    """fx_client_opts, in header order."""

    _fields_ = [
        ("size", c_size_t),
        ("server", c_char_p),
        ("server_name", c_char_p),
        ("ca_file", c_char_p),
        ("pin_sha256", c_char_p),
        ("insecure", c_bool),
        ("tenant", c_char_p),
        ("token", c_char_p),
        ("publish_conn_pool", c_uint32),
        ("publish_streams_per_conn", c_uint32),
        ("publish_queue_depth", c_uint32),
        ("publish_inflight_bytes", c_size_t),
        ("publish_sharding", c_int),
        ("event_conn_pool", c_uint32),
        ("sub_queue_capacity", c_uint32),
        ("sub_queue_policy", c_int),
        ("max_frame_bytes", c_uint32),
        ("connect_timeout_ms", c_int),
        ("idle_timeout_ms", c_int),
        ("keepalive_ms", c_int),
        ("reconnect", c_bool),
        ("reconnect_initial_ms", c_int),
        ("reconnect_max_ms", c_int),
        ("stream_window_bytes", c_uint32),
        ("publish_coalesce", c_bool),
        ("publish_linger_us", c_uint32),
        ("publish_ack_timeout_ms", c_int),
        ("idempotent", c_bool),
        ("cache_streams", c_uint32),
        ("cache_inflight", c_uint32),
        ("cache_timeout_ms", c_int),
    ]


class Iov(Structure):
    _fields_ = [("data", c_void_p), ("len", c_size_t)]


class Start(Structure):
    _fields_ = [("kind", c_int), ("offset", c_uint64)]


class Event(Structure):
    _fields_ = [
        ("payload", POINTER(c_uint8)),
        ("len", c_size_t),
        ("offset", c_uint64),
        ("has_offset", c_bool),
        ("flags", c_uint32),
        ("gap", c_uint64),
    ]


class SubStats(Structure):
    _fields_ = [
        ("received", c_uint64),
        ("delivered", c_uint64),
        ("dropped", c_uint64),
        ("dropped_batches", c_uint64),
        ("gaps", c_uint64),
        ("missed", c_uint64),
        ("queue_depth", c_uint64),
        ("reconnects", c_uint64),
        ("subscription_id", c_uint64),
        ("owner_changes", c_uint64),
    ]


class SubError(Structure):
    _fields_ = [
        ("code", c_int),
        ("message", c_char * 256),
        ("requested", c_uint64),
        ("available", c_uint64),
    ]


class ClientStats(Structure):
    _fields_ = [("publishes_lost", c_uint64), ("reconnects", c_uint64)]


class GroupOpts(Structure):
    """fx_group_opts, in header order."""

    _fields_ = [
        ("size", c_size_t),
        ("ns", c_char_p),
        ("stream", c_char_p),
        ("group", c_char_p),
        ("member", c_char_p),
        ("window", c_uint32),
        ("ack_wait_ms", c_int),
        ("create", POINTER(Start)),
    ]


class GroupMsg(Structure):
    _fields_ = [
        ("payload", POINTER(c_uint8)),
        ("len", c_size_t),
        ("offset", c_uint64),
        ("attempt", c_uint32),
        ("skipped", c_uint64),
    ]


class MemberStats(Structure):
    _fields_ = [
        ("received", c_uint64),
        ("delivered", c_uint64),
        ("expired", c_uint64),
        ("dropped", c_uint64),
        ("ops_sent", c_uint64),
        ("frames_sent", c_uint64),
        ("refused", c_uint64),
        ("reconnects", c_uint64),
    ]


def room(struct_type: type) -> ctypes.Array:
    """A zeroed buffer for |struct_type| with STRUCT_ROOM bytes of headroom."""
    return ctypes.create_string_buffer(max(STRUCT_ROOM, ctypes.sizeof(struct_type)))


# Functions a libfelix from before consumer groups (or the cache) lacks: the
# package still loads it, and Client.join_group / Client.cache_* name what is
# missing.
_OPTIONAL_PREFIX = ("fx_group_", "fx_cache_")
missing: List[str] = []


def _declare(lib: ctypes.CDLL) -> List[str]:
    """Sets restype/argtypes of every function used; returns the optional
    ones |lib| does not export."""
    p = c_void_p
    sigs = {
        "fx_client_opts_init": (None, [p]),
        "fx_client_opts_from_env": (c_int, [p]),
        "fx_client_connect": (c_int, [POINTER(c_void_p), p]),
        "fx_client_close": (c_int, [p, c_int]),
        "fx_client_last_error": (c_size_t, [p, c_char_p, c_size_t]),
        "fx_publish": (c_int, [p, c_char_p, c_char_p, c_char_p, c_size_t, c_int]),
        "fx_publish_batch": (c_int, [p, c_char_p, c_char_p, p, c_size_t, c_int]),
        "fx_flush": (c_int, [p, c_int]),
        "fx_subscribe": (c_int, [POINTER(c_void_p), p, c_char_p, c_char_p, POINTER(Start)]),
        "fx_subscription_next": (c_int, [p, p, c_int]),
        "fx_subscription_stats": (c_int, [p, p]),
        "fx_subscription_error": (c_int, [p, p]),
        "fx_client_get_stats": (c_int, [p, p]),
        "fx_unsubscribe": (None, [p]),
        "fx_group_opts_init": (None, [p]),
        "fx_group_join": (c_int, [POINTER(c_void_p), p, p]),
        "fx_group_next": (c_int, [p, p, c_int]),
        "fx_group_ack": (c_int, [p, c_uint64]),
        "fx_group_nak": (c_int, [p, c_uint64, c_uint32, c_int]),
        "fx_group_in_progress": (c_int, [p, c_uint64, c_uint32]),
        "fx_group_term": (c_int, [p, c_uint64, c_uint32, c_char_p]),
        "fx_group_ack_sync": (c_int, [p, c_int]),
        "fx_group_stats": (c_int, [p, p]),
        "fx_group_leave": (None, [p]),
        "fx_cache_put": (c_int, [p, c_char_p, c_char_p, c_char_p, c_char_p, c_size_t, c_uint64]),
        "fx_cache_get": (c_int, [p, c_char_p, c_char_p, c_char_p, p, c_size_t,
                                 POINTER(c_size_t)]),
        "fx_cache_delete": (c_int, [p, c_char_p, c_char_p, c_char_p, POINTER(c_bool)]),
        "fx_strerror": (c_char_p, [c_int]),
        "fx_errname": (c_char_p, [c_int]),
    }
    absent = []
    for name, (res, args) in sigs.items():
        if name.startswith(_OPTIONAL_PREFIX) and not hasattr(lib, name):
            absent.append(name)
            continue
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return absent


def load() -> ctypes.CDLL:
    """Loads libfelix: $FELIX_LIBRARY, else the soname libfelix.so.0.

    Raises OSError naming what was tried when neither loads.
    """
    path = os.environ.get("FELIX_LIBRARY") or SONAME
    try:
        # CDLL (not PyDLL): every call releases the GIL while libfelix runs.
        lib = ctypes.CDLL(path)
    except OSError as e:
        hint = (
            "FELIX_LIBRARY=%s" % path
            if os.environ.get("FELIX_LIBRARY")
            else "%s (install libfelix, run ldconfig, or set FELIX_LIBRARY)" % SONAME
        )
        raise OSError("felix: cannot load %s: %s" % (hint, e)) from e
    missing[:] = _declare(lib)
    return lib


lib = load()
