"""`make install` (cmake --install) into a DESTDIR tree: what it holds,
pkg-config's answer for it, the Python package's place, and the route the
docs give for a virtual environment (pip without build isolation)."""

import os
import shutil
import subprocess
import sys

import pytest

from fxpkg import BIN, SRC, install, run

PY = os.environ.get("FX_PYTHON", "/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                    else sys.executable)


def local_pydir():
    """Where the target Python reads packages of prefix /usr/local (Debian's
    posix_local scheme, as packaging/install.cmake asks it)."""
    code = ("import sysconfig;print(sysconfig.get_path('purelib','posix_local',"
            "vars={'base':'/usr','platbase':'/usr'}))")
    return run([PY, "-c", code]).stdout.strip()


def test_tree_holds_library_headers_pc_programs_man_unit_config_and_python(stage):
    files = [
        "lib/libfelix.so.0", "lib/libfelix.so", "lib/libfelix.a", "lib/pkgconfig/felix.pc",
        "include/felix/felix.h", "include/felix/error.h",
        "bin/felix", "bin/felix-broker", "bin/felix-bench",
        "share/man/man1/felix.1", "share/man/man8/felix-broker.8",
        "lib/systemd/system/felix-broker.service", "lib/sysusers.d/felix.conf",
        "etc/felix/broker.yaml", "share/doc/felix/examples/broker.yaml",
        "share/doc/felix/examples/publisher.c", "share/doc/felix/examples/resume_subscriber.c",
        "share/doc/felix/examples/acked_publisher.c",
    ]
    missing = [f for f in files if not os.path.lexists(stage.path(f))]
    assert not missing, "not installed under %s: %s" % (stage.path(), missing)
    for prog in ("felix", "felix-broker", "felix-bench"):
        assert os.access(stage.path("bin", prog), os.X_OK)
    unit = open(stage.path("lib/systemd/system/felix-broker.service")).read()
    assert "ExecStart=/usr/local/bin/felix-broker --config /usr/local/etc/felix/broker.yaml" in unit
    man = open(stage.path("share/man/man8/felix-broker.8")).read()
    assert ".SH NAME" in man and "felix-broker 0." in man and "READY=1" in man


def test_pkg_config_gives_the_flags_of_the_tree(stage):
    env = stage.pkg_env()
    ver = run(["pkg-config", "--modversion", "felix"], env=env).stdout.strip()
    cflags = run(["pkg-config", "--cflags", "felix"], env=env).stdout.split()
    libs = run(["pkg-config", "--libs", "felix"], env=env).stdout.split()
    static = run(["pkg-config", "--static", "--libs", "felix"], env=env).stdout.split()
    project = open(os.path.join(SRC, "CMakeLists.txt")).read()
    assert ver == project.split("project(felix VERSION ")[1].split()[0], ver
    assert "-I" + stage.path("include") in cflags, cflags
    assert "-L" + stage.path("lib") in libs and "-lfelix" in libs, libs
    assert "-lngtcp2" in static and "-lgnutls" in static and "-ljansson" in static, static


def test_python_package_lands_where_the_target_python_reads(stage):
    where = local_pydir()
    assert os.path.exists(os.path.join(stage.root + where, "felix", "__init__.py")), where
    r = run([PY, "-c", "import sys; print(sys.path)"])
    assert where in r.stdout, "%s reads %s, not %s" % (PY, r.stdout, where)
    env = dict(os.environ, PYTHONPATH=stage.root + where,
               FELIX_LIBRARY=stage.path("lib", "libfelix.so.0"))
    out = run([PY, "-c", "import felix; print(felix.__file__, felix.__version__)"],
              env=env, cwd="/").stdout
    assert out.startswith(stage.root + where), out


def test_install_keeps_an_edited_configuration(tmp_path):
    root = tmp_path / "root"
    conf = root / "opt/fx/etc/felix/broker.yaml"
    conf.parent.mkdir(parents=True)
    conf.write_text("quic_bind: 0.0.0.0:7000\n")
    install(root, "/opt/fx")
    assert conf.read_text() == "quic_bind: 0.0.0.0:7000\n"
    assert (root / "opt/fx/etc/felix/broker.yaml.new").read_text() == open(
        os.path.join(SRC, "packaging", "broker.yaml")).read()
    assert (root / "opt/fx/lib/libfelix.so.0").exists()
    unit = (root / "opt/fx/lib/systemd/system/felix-broker.service").read_text()
    assert "ExecStart=/opt/fx/bin/felix-broker --config /opt/fx/etc/felix/broker.yaml" in unit


def test_prefix_usr_uses_the_debian_layout(tmp_path):
    root = install(tmp_path / "root", "/usr")
    arch = run(["gcc", "-print-multiarch"]).stdout.strip()
    for rel in ("usr/lib/%s/libfelix.so.0" % arch, "usr/lib/%s/pkgconfig/felix.pc" % arch,
                "etc/felix/broker.yaml", "lib/systemd/system/felix-broker.service",
                "usr/lib/sysusers.d/felix.conf", "usr/lib/python3/dist-packages/felix/client.py"):
        assert os.path.lexists(os.path.join(root, rel)), rel
    pc = open(os.path.join(root, "usr/lib/%s/pkgconfig/felix.pc" % arch)).read()
    assert "libdir=/usr/lib/%s\n" % arch in pc, pc


def test_pip_installs_the_package_into_a_venv_without_the_network(tmp_path):
    if subprocess.run([PY, "-c", "import ensurepip, setuptools"]).returncode != 0:
        pytest.skip("%s has no venv/ensurepip or setuptools (python3-venv, python3-setuptools)"
                    % PY)
    src = tmp_path / "python"
    shutil.copytree(os.path.join(SRC, "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "tests"))
    v = tmp_path / "v"
    run([PY, "-m", "venv", "--system-site-packages", str(v)])
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    run([str(v / "bin" / "pip"), "install", "-q", "--no-build-isolation", str(src)], env=env,
        cwd=str(tmp_path), timeout=120)
    env["FELIX_LIBRARY"] = os.path.join(BIN, "lib", "libfelix.so.0")
    out = run([str(v / "bin" / "python"), "-c", "import felix; print(felix.__file__)"],
              env=env, cwd=str(tmp_path)).stdout
    assert out.startswith(str(v)), out
