"""felix.Group without a broker: the ctypes declarations of every
fx_group_* function and of the group structures against include/felix/felix.h
(parsed, and compiled by a small C helper when a C compiler is at hand), the
checks join_group makes before calling libfelix, and the wrapper's errors
and lifetime around a member handle libfelix refuses (NULL)."""

import ctypes
import os
import re
import shutil
import subprocess

import pytest

import felix
import felix._lib
import felix.client

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("FX_SOURCE_DIR", os.path.join(HERE, "..", ".."))
HEADER = os.path.join(SRC, "include", "felix", "felix.h")
GROUP_STRUCTS = (("fx_group_opts", felix._lib.GroupOpts), ("fx_group_msg", felix._lib.GroupMsg),
                 ("fx_member_stats", felix._lib.MemberStats))


def header_text():
    with open(HEADER) as f:
        return re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)


def c_to_ctypes(decl):
    """The ctypes type felix._lib declares for the C parameter or return
    type |decl| (names already removed)."""
    decl = " ".join(decl.replace("*", " * ").split())
    if decl.count("*") == 2:
        return ctypes.POINTER(ctypes.c_void_p)  # an out-parameter handle
    if decl in ("const char *", "char *"):
        return ctypes.c_char_p
    if "*" in decl:
        return ctypes.c_void_p  # handles and structures, passed as addresses
    return {"void": None, "int": ctypes.c_int, "uint32_t": ctypes.c_uint32,
            "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t}[decl]


def group_prototypes():
    """{name: (return type, [parameter types])} of every fx_group_* function
    the header declares."""
    protos = {}
    for ret, name, params in re.findall(r"^\s*(\w[\w\s\*]*?)\s*\b(fx_group_\w+)\((.*?)\);",
                                        header_text(), re.S | re.M):
        types = []
        for p in params.split(","):
            p = " ".join(p.split())
            # Drop the parameter's name: the last identifier after the type.
            types.append(re.sub(r"\s*\b\w+$", "", p) if re.search(r"[\s\*]\w+$", p) else p)
        protos[name] = (ret.strip(), types)
    return protos


def struct_fields(text, struct):
    """The field names of |struct| in header order (several declarators in
    one declaration, `const char *ns, *stream;`, each count)."""
    body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (struct, struct), text, re.S)
    assert body, struct
    names = []
    for decl in body.group(1).split(";"):
        decl = decl.strip()
        if not decl:
            continue
        first, *rest = decl.split(",")
        names.append(re.search(r"(\w+)(?:\[\d+\])?$", first.strip()).group(1))
        names += [re.search(r"(\w+)(?:\[\d+\])?$", r.strip()).group(1) for r in rest]
    return names


# ---- bindings against the header --------------------------------------------------


def test_every_group_function_of_the_header_is_declared_with_its_c_types():
    protos = group_prototypes()
    # join, next, ack, nak, in_progress, term, ack_sync, stats, leave, opts_init
    assert len(protos) >= 10, sorted(protos)
    lib = felix._lib.lib
    for name, (ret, params) in protos.items():
        fn = getattr(lib, name)
        assert fn.restype is c_to_ctypes(ret), "%s returns %s" % (name, ret)
        want = [c_to_ctypes(p) for p in params]
        assert fn.argtypes is not None, "%s has no argtypes" % name
        assert list(fn.argtypes) == want, "%s(%s)" % (name, ", ".join(params))


def test_the_prototype_parser_sees_the_types_it_must_check():
    # A parser that lost the types would make the test above vacuous.
    protos = group_prototypes()
    assert protos["fx_group_nak"] == ("int", ["fx_group *", "uint64_t", "uint32_t", "int"])
    assert protos["fx_group_join"] == ("int", ["fx_group **", "fx_client *",
                                               "const fx_group_opts *"])
    assert protos["fx_group_term"][1][3] == "const char *"
    assert protos["fx_group_leave"] == ("void", ["fx_group *"])
    assert c_to_ctypes("fx_group **") is ctypes.POINTER(ctypes.c_void_p)
    assert c_to_ctypes("const char *") is ctypes.c_char_p


def test_group_structures_declare_the_header_fields_in_order():
    text = header_text()
    assert struct_fields(text, "fx_group_opts")[:3] == ["size", "ns", "stream"]
    for struct, cls in GROUP_STRUCTS:
        # Python declares all of them: a prefix would leave fields to libfelix's
        # defaults here, where join_group sets every one.
        assert struct_fields(text, struct) == [n for n, _ in cls._fields_], struct


def test_group_structure_layouts_match_the_compiled_header(tmp_path):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to compute the header's layouts")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "felix/felix.h"',
             "int main(void) {"]
    for struct, cls in GROUP_STRUCTS + (("fx_start", felix._lib.Start),):
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (struct, struct))
        for name, _ in cls._fields_:
            lines.append('printf("%s %s %%zu %%zu\\n", offsetof(%s, %s), '
                         'sizeof(((%s *)0)->%s));'
                         % (struct, name, struct, name, struct, name))
    lines += ["return 0;", "}"]
    (tmp_path / "layout.c").write_text("\n".join(lines) + "\n")
    exe = str(tmp_path / "layout")
    subprocess.run([cc, "-std=c11", "-I", os.path.join(SRC, "include"), "-o", exe,
                    str(tmp_path / "layout.c")], check=True)
    out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    c = {tuple(ln.split()[:2]): [int(v) for v in ln.split()[2:]] for ln in out.splitlines()}
    for struct, cls in GROUP_STRUCTS + (("fx_start", felix._lib.Start),):
        assert ctypes.sizeof(cls) == c[(struct, "sizeof")][0], struct
        for name, _ in cls._fields_:
            # Offset and size of each field: a uint32_t declared as a 64-bit
            # field can keep every offset (padding) but not its size.
            f = getattr(cls, name)
            assert [f.offset, f.size] == c[(struct, name)], "%s.%s" % (struct, name)


# ---- join_group's arguments ----------------------------------------------------------


def test_create_maps_all_new_and_offsets_and_refuses_last_and_others():
    st = felix.client._group_create("all")
    assert st.kind == felix._lib.START_EARLIEST
    assert felix.client._group_create("new").kind == felix._lib.START_LATEST
    st = felix.client._group_create(42)
    assert (st.kind, st.offset) == (felix._lib.START_OFFSET, 42)
    assert felix.client._group_create(None) is None
    with pytest.raises(ValueError, match="last"):
        felix.client._group_create("last")
    for bad in ("earliest", "latest", -1, True, 1.5, 1 << 64, b"all"):
        with pytest.raises(ValueError):
            felix.client._group_create(bad)


def test_ack_wait_and_timeouts_are_seconds_turned_into_milliseconds():
    assert felix.client._ack_wait_ms(None) == 0  # the group's
    assert felix.client._ack_wait_ms(1.5) == 1500
    assert felix.client._ack_wait_ms(0.0001) == 1  # never 0, which would mean the group's
    for bad in (0, -1, True, "5", 3e6):
        with pytest.raises(ValueError):
            felix.client._ack_wait_ms(bad)
    assert felix.client._ms(None, "timeout") == -1
    assert felix.client._ms(0, "timeout") == 0
    assert felix.client._ms(2.5, "timeout") == 2500
    assert felix.client._ms(1e12, "timeout") == 2147483647
    with pytest.raises(ValueError, match="delay"):
        felix.client._ms(-0.5, "delay")


# ---- the wrapper's errors and lifetime ----------------------------------------------


def null_member():
    """A Group around a NULL handle: libfelix refuses every call with EINVAL."""
    return felix.Group(None, ctypes.c_void_p(None), "default", "orders", "billing", None)


def test_settling_maps_libfelix_errors_to_felix_errors():
    g = null_member()
    for call in (lambda: g.ack(1), lambda: g.nak(1, 1), lambda: g.nak(1, 1, delay=0.5),
                 lambda: g.in_progress(1, 1), lambda: g.term(1, 1, "bad"),
                 lambda: g.ack_sync(1.0), lambda: g.stats()):
        with pytest.raises(felix.ConfigError) as e:  # -EINVAL
            call()
        assert e.value.name == "EINVAL" and "billing" in str(e.value)
    with pytest.raises(ValueError, match="NUL"):
        g.term(1, 1, "a\0b")
    g.leave()


def test_a_left_member_raises_closed_and_iteration_ends():
    with null_member() as g:
        assert not g.closed
    assert g.closed and g.end_reason == "left"
    with pytest.raises(felix.Closed):
        g.ack(3)
    with pytest.raises(felix.Closed):
        g.ack_sync(0)
    assert g.get(timeout=0) is None
    assert list(g) == []
    g.close()  # leaving twice does nothing
    assert g.closed


def test_group_message_carries_payload_offset_attempt_and_skipped():
    m = felix.GroupMessage(b"x" * 40, 7, 2, 3)
    assert (m.payload, m.offset, m.attempt, m.skipped) == (b"x" * 40, 7, 2, 3)
    assert repr(m).startswith("GroupMessage(offset=7, attempt=2, skipped=3")


def test_join_group_on_a_libfelix_without_groups_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(felix._lib, "missing", ["fx_group_join", "fx_group_next"])
    c = felix.Client.__new__(felix.Client)  # never connected: the check comes first
    with pytest.raises(felix.Error, match="no consumer groups .*fx_group_join") as e:
        c.join_group("default", "orders", "billing")
    assert e.value.name == "ENOSYS"


def test_this_libfelix_exports_every_group_function():
    assert felix._lib.missing == []
