# Install step of `cmake --install` (what `make install` runs), placed by the
# prefix given at install time (CMAKE_INSTALL_PREFIX, `--prefix`) under
# $DESTDIR. FX_* come from packaging/felix.cmake. With prefix /usr the layout
# is Debian's (multiarch libdir, /etc, /lib/systemd/system,
# /usr/lib/python3/dist-packages); elsewhere it is <prefix>/lib,
# <prefix>/etc, <prefix>/lib/systemd/system and the site directory the target
# Python reads for that prefix.
set(_p "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/+$" "" _p "${_p}")
if(_p STREQUAL "")
    set(_p "/")
endif()
if(_p STREQUAL "/usr" AND FX_MULTIARCH)
    set(_libdir "${_p}/lib/${FX_MULTIARCH}")
else()
    set(_libdir "${_p}/lib")
endif()
if(_p STREQUAL "/usr")
    set(_sysconfdir "/etc")
    set(_unitdir "${FX_SYSTEMD_UNIT_DIR}")
    if(_unitdir STREQUAL "")
        set(_unitdir "/lib/systemd/system")
    endif()
else()
    set(_sysconfdir "${_p}/etc")
    set(_unitdir "${_p}/lib/systemd/system")
endif()
set(_bindir "${_p}/bin")
set(_incdir "${_p}/include")
set(_datadir "${_p}/share")
set(_docdir "${_datadir}/doc/felix")
# file(INSTALL) prefixes $DESTDIR itself; paths written directly need _d.
set(_d "$ENV{DESTDIR}")

# The Python site directory for this prefix, asked of the target Python:
# Debian's python3 reads /usr/lib/python3/dist-packages (prefix /usr) and
# /usr/local/lib/python3.X/dist-packages (prefix /usr/local).
set(_pyprobe [=[
import sys, sysconfig
p = sys.argv[1]
names = sysconfig.get_scheme_names()
if p == "/usr" and "deb_system" in names:
    scheme, base = "deb_system", "/usr"
elif p == "/usr/local" and "posix_local" in names:
    scheme, base = "posix_local", "/usr"
else:
    scheme, base = "posix_prefix", p
print(sysconfig.get_path("purelib", scheme, vars={"base": base, "platbase": base}))
]=])
execute_process(COMMAND ${FX_PYTHON} -c "${_pyprobe}" "${_p}" OUTPUT_VARIABLE _pydir
                RESULT_VARIABLE _rv OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _rv EQUAL 0 OR _pydir STREQUAL "")
    message(FATAL_ERROR "cannot ask ${FX_PYTHON} for its site directory under ${_p}")
endif()

# ---- library, headers, pkg-config ---------------------------------------------
get_filename_component(_real "${FX_SHARED_LIB}" NAME)
file(INSTALL DESTINATION "${_libdir}" TYPE SHARED_LIBRARY FILES "${FX_SHARED_LIB}")
file(CREATE_LINK "${_real}" "${_d}${_libdir}/libfelix.so.0" SYMBOLIC)
file(CREATE_LINK "libfelix.so.0" "${_d}${_libdir}/libfelix.so" SYMBOLIC)
message(STATUS "Installing: ${_d}${_libdir}/libfelix.so.0 -> ${_real}")
file(INSTALL DESTINATION "${_libdir}" TYPE STATIC_LIBRARY FILES "${FX_STATIC_LIB}")
file(INSTALL DESTINATION "${_incdir}" TYPE DIRECTORY FILES "${FX_SRC}/include/felix"
     FILES_MATCHING PATTERN "*.h")
set(prefix "${_p}")
set(libdir "${_libdir}")
set(includedir "${_incdir}")
set(version "${FX_VERSION}")
# Generated files go to a directory of their own per destination, so two
# installs from one tree at the same time do not write the same file.
string(MD5 _tag "${_d}${_p}")
set(_gen "${FX_BIN}/install-gen/${_tag}")
configure_file("${FX_SRC}/packaging/felix.pc.in" "${_gen}/felix.pc" @ONLY)
file(INSTALL DESTINATION "${_libdir}/pkgconfig" TYPE FILE FILES "${_gen}/felix.pc")

# ---- programs and man pages ------------------------------------------------------
foreach(_prog ${FX_PROGRAMS})
    file(INSTALL DESTINATION "${_bindir}" TYPE PROGRAM FILES "${_prog}")
endforeach()
file(INSTALL DESTINATION "${_datadir}/man/man1" TYPE FILE FILES "${FX_BIN}/man/felix.1")
file(INSTALL DESTINATION "${_datadir}/man/man8" TYPE FILE FILES "${FX_BIN}/man/felix-broker.8")
if(CMAKE_INSTALL_DO_STRIP)
    set(_stripped "${_d}${_libdir}/${_real}")
    foreach(_prog ${FX_PROGRAMS})
        get_filename_component(_n "${_prog}" NAME)
        list(APPEND _stripped "${_d}${_bindir}/${_n}")
    endforeach()
    foreach(_f ${_stripped})
        execute_process(COMMAND strip --strip-unneeded "${_f}" RESULT_VARIABLE _rv)
        if(NOT _rv EQUAL 0)
            message(FATAL_ERROR "strip ${_f} failed")
        endif()
    endforeach()
endif()

# ---- systemd unit, system user, configuration ------------------------------------
file(READ "${FX_SRC}/packaging/felix-broker.service" _unit)
string(REPLACE "/usr/bin/felix-broker" "${_bindir}/felix-broker" _unit "${_unit}")
string(REPLACE "/etc/felix/" "${_sysconfdir}/felix/" _unit "${_unit}")
file(WRITE "${_gen}/felix-broker.service" "${_unit}")
file(INSTALL DESTINATION "${_unitdir}" TYPE FILE FILES "${_gen}/felix-broker.service")
if(_p STREQUAL "/usr")
    set(_sysusers "/usr/lib/sysusers.d")
else()
    set(_sysusers "${_p}/lib/sysusers.d")
endif()
file(INSTALL DESTINATION "${_sysusers}" TYPE FILE FILES "${FX_SRC}/packaging/felix.sysusers"
     RENAME felix.conf)
file(INSTALL DESTINATION "${_docdir}/examples" TYPE FILE
     FILES "${FX_SRC}/packaging/broker.yaml" "${FX_SRC}/examples/publisher.c"
           "${FX_SRC}/examples/resume_subscriber.c" "${FX_SRC}/examples/acked_publisher.c"
           "${FX_SRC}/examples/Makefile")
# The configuration the unit reads: never overwrite one an operator edited.
set(_conf "${_d}${_sysconfdir}/felix/broker.yaml")
if(EXISTS "${_conf}")
    file(READ "${_conf}" _old)
    file(READ "${FX_SRC}/packaging/broker.yaml" _new)
    if(NOT _old STREQUAL _new)
        file(INSTALL DESTINATION "${_sysconfdir}/felix" TYPE FILE
             FILES "${FX_SRC}/packaging/broker.yaml" RENAME broker.yaml.new)
        message(STATUS "Kept the existing ${_conf}; the example is broker.yaml.new beside it")
    endif()
else()
    file(INSTALL DESTINATION "${_sysconfdir}/felix" TYPE FILE
         FILES "${FX_SRC}/packaging/broker.yaml")
endif()

# ---- the Python package ----------------------------------------------------------
file(INSTALL DESTINATION "${_pydir}" TYPE DIRECTORY FILES "${FX_SRC}/python/felix"
     FILES_MATCHING PATTERN "*.py" PATTERN "py.typed" PATTERN "__pycache__" EXCLUDE)
message(STATUS "Installed under ${_d}${_p}: libfelix in ${_libdir}, the felix package in ${_pydir}")
if(_d STREQUAL "" AND EXISTS /sbin/ldconfig)
    execute_process(COMMAND /sbin/ldconfig)
endif()
