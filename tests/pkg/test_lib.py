"""libfelix as built: the shared library's soname and exports, the static
archive's global symbols, and the public headers compiled as C99 and C++.
The public functions are read from include/felix/*.h here, independently of
the version script the build generates from them."""

import os
import re
import subprocess

import pytest

from fxpkg import BIN, SRC, run

HEADERS = os.path.join(SRC, "include", "felix")
LIB = os.path.join(BIN, "lib")
# A declaration: a line starting with a return type and naming fx_*( ;
# function-pointer typedefs "(*fx_x_cb)" and macros are not declarations.
DECL = re.compile(r"^(?!typedef\b)[A-Za-z_][\w \t*]*[ \t*](fx_[a-z0-9_]+)\(", re.M)


def header_functions():
    names = set()
    for h in sorted(os.listdir(HEADERS)):
        if h.endswith(".h"):
            with open(os.path.join(HEADERS, h)) as f:
                names |= set(DECL.findall(f.read()))
    assert len(names) >= 10, "found only %s in %s" % (sorted(names), HEADERS)
    return names


def defined_symbols(args):
    out = run(args).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            syms[parts[2]] = parts[1]
    return syms


def need_lib(name):
    path = os.path.join(LIB, name)
    if not BIN:
        pytest.skip("FX_BINARY_DIR is not set (run through ctest)")
    assert os.path.exists(path), "%s is not built" % path
    return path


def test_shared_library_exports_exactly_the_header_functions():
    so = need_lib("libfelix.so.0")
    syms = defined_symbols(["nm", "-D", "--defined-only", so])
    exported = {}
    for sym, kind in syms.items():
        if kind == "A":  # the version node itself (FELIX_0)
            continue
        name, _, version = sym.partition("@")
        exported[name] = version.lstrip("@")
    want = header_functions()
    missing = sorted(want - exported.keys())
    extra = sorted(exported.keys() - want)
    assert not missing, "declared in include/felix but not exported: %s" % missing
    assert not extra, "exported but not declared in include/felix: %s" % extra
    assert set(exported.values()) == {"FELIX_0"}, exported


def test_shared_library_soname_is_libfelix_so_0():
    so = need_lib("libfelix.so.0")
    dyn = run(["readelf", "-d", so]).stdout
    assert re.search(r"\(SONAME\)\s+Library soname: \[libfelix\.so\.0\]", dyn), dyn
    assert os.readlink(os.path.join(LIB, "libfelix.so")) == "libfelix.so.0"
    real = os.readlink(so)
    assert re.fullmatch(r"libfelix\.so\.0\.\d+\.\d+", real), real
    # Every library it needs is named (linked with --no-undefined).
    assert "libngtcp2" in dyn and "libgnutls" in dyn, dyn


def test_static_archive_globals_are_the_header_functions():
    a = need_lib("libfelix.a")
    syms = defined_symbols(["nm", "-g", "--defined-only", a])
    assert set(syms) == header_functions(), sorted(set(syms) ^ header_functions())


def compile_headers(compiler, std, lang, tmp_path):
    src = tmp_path / ("use." + ("cc" if lang == "c++" else "c"))
    src.write_text(
        "#include <felix/felix.h>\n#include <felix/error.h>\n"
        "int main(void) {\n"
        "    fx_client_opts o;\n"
        "    fx_client_opts_init(&o);\n"
        "    fx_start st = {FX_START_EARLIEST, 0};\n"
        "    (void)st;\n"
        "    return fx_strerror(FX_ECLOSED) != 0 && o.size == sizeof(o) ? 0 : 1;\n"
        "}\n")
    exe = tmp_path / "use"
    r = subprocess.run([compiler, "-std=" + std, "-pedantic-errors", "-Wall", "-Wextra", "-Werror",
                        "-I" + os.path.join(SRC, "include"), str(src), "-o", str(exe),
                        "-L" + LIB, "-lfelix"], capture_output=True, text=True)
    assert r.returncode == 0, "%s -std=%s:\n%s" % (compiler, std, r.stderr)
    env = dict(os.environ, LD_LIBRARY_PATH=LIB)
    assert subprocess.run([str(exe)], env=env).returncode == 0


def test_headers_compile_as_c99(tmp_path):
    need_lib("libfelix.so")
    compile_headers("cc", "c99", "c", tmp_path)


def test_headers_compile_as_cxx(tmp_path):
    need_lib("libfelix.so")
    compile_headers("g++", "c++11", "c++", tmp_path)


def test_header_parser_sees_a_new_declaration(tmp_path):
    """The check above reads declarations the way the version script's
    generator does; a function added to a header is one more name."""
    text = "int fx_new_thing(fx_client *c, int x);\ntypedef void (*fx_new_cb)(void *u);\n"
    assert DECL.findall(text) == ["fx_new_thing"]
    out = tmp_path / "out"
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "x.h").write_text("const char *fx_a(int rv);\n" + text)
    run(["cmake", "-DHEADER_DIR=%s" % (tmp_path / "h"), "-DSYM=%s.sym" % out,
         "-DMAP=%s.map" % out, "-P", os.path.join(SRC, "packaging", "symbols.cmake")])
    assert (tmp_path / "out.sym").read_text().split() == ["fx_a", "fx_new_thing"]
    assert "local:\n    *;" in (tmp_path / "out.map").read_text()
