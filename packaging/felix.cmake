# libfelix for other programs, man pages, install rules and their tests.
# Included by CMakeLists.txt in release builds (not the sanitizer or fuzz ones).
#
#   lib/libfelix.so.0  shared, soname libfelix.so.0, exports exactly the
#                      functions declared in include/felix/*.h (a version
#                      script generated from the headers at build time)
#   lib/libfelix.a     static, one relocatable object whose only global
#                      symbols are those same functions
#   man/felix.1, man/felix-broker.8   help2man from --help / --version
#
# Both libraries are compiled from the client's sources (base, wire, quic,
# client) a second time, position-independent, so the broker's own archives
# stay non-PIC. `cmake --install` runs packaging/install.cmake, which places
# everything by the prefix given at install time (`make install PREFIX=...`).

find_program(FX_HELP2MAN help2man REQUIRED)
find_program(FX_OBJCOPY NAMES objcopy REQUIRED)
# The Python the SDK installs for and is tested with: Debian's, which
# python3-pytest and python3-setuptools serve (a python3 earlier in PATH may
# be another installation without them).
if(EXISTS /usr/bin/python3)
    set(_fx_py_default /usr/bin/python3)
else()
    set(_fx_py_default python3)
endif()
set(FX_PYTHON ${_fx_py_default} CACHE STRING "Python the felix package is installed for and tested with")

set(FX_LIBFELIX_LIBS PkgConfig::NGTCP2 PkgConfig::GNUTLS PkgConfig::NETTLE PkgConfig::JANSSON
    Threads::Threads m)

set(_fx_lib_srcs "")
foreach(_d src/base src/wire src/quic src/client)
    file(GLOB _s CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${_d}/*.c)
    list(APPEND _fx_lib_srcs ${_s})
endforeach()
list(FILTER _fx_lib_srcs EXCLUDE REGEX "/(main|test_hooks)\\.c$")
add_library(felix_objs OBJECT ${_fx_lib_srcs})
set_target_properties(felix_objs PROPERTIES POSITION_INDEPENDENT_CODE ON)
# Calls between the library's own functions stay direct (and inlinable).
target_compile_options(felix_objs PRIVATE -fno-semantic-interposition)
target_include_directories(felix_objs PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(felix_objs PRIVATE ${FX_LIBFELIX_LIBS})

# The public functions, from the headers: libfelix.sym (one a line) and the
# version script libfelix.map.
file(GLOB FX_PUBLIC_HEADERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/include/felix/*.h)
set(FX_SYM_FILE ${CMAKE_BINARY_DIR}/lib/libfelix.sym)
set(FX_MAP_FILE ${CMAKE_BINARY_DIR}/lib/libfelix.map)
add_custom_command(
    OUTPUT ${FX_SYM_FILE} ${FX_MAP_FILE}
    COMMAND ${CMAKE_COMMAND} -DHEADER_DIR=${CMAKE_SOURCE_DIR}/include/felix -DSYM=${FX_SYM_FILE} -DMAP=${FX_MAP_FILE}
            -P ${CMAKE_SOURCE_DIR}/packaging/symbols.cmake
    DEPENDS ${FX_PUBLIC_HEADERS} ${CMAKE_SOURCE_DIR}/packaging/symbols.cmake
    COMMENT "libfelix: public symbols from include/felix/*.h")
add_custom_target(felix_symbols DEPENDS ${FX_SYM_FILE} ${FX_MAP_FILE})

add_library(libfelix_shared SHARED $<TARGET_OBJECTS:felix_objs>)
target_link_libraries(libfelix_shared PRIVATE ${FX_LIBFELIX_LIBS})
target_link_options(libfelix_shared PRIVATE -Wl,--version-script=${FX_MAP_FILE} -Wl,--no-undefined
                    -Wl,--no-undefined-version)
set_target_properties(libfelix_shared PROPERTIES
    OUTPUT_NAME felix VERSION ${PROJECT_VERSION} SOVERSION 0
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib LINK_DEPENDS ${FX_MAP_FILE})
add_dependencies(libfelix_shared felix_symbols)

# The static archive: the objects linked into one relocatable object, every
# global symbol but the public ones made local, so a program linking it
# statically meets no fx_loop_* or fx_log_* of ours.
set(FX_STATIC_LIB ${CMAKE_BINARY_DIR}/lib/libfelix.a)
add_custom_command(
    OUTPUT ${FX_STATIC_LIB}
    COMMAND ${CMAKE_LINKER} -r -o ${CMAKE_BINARY_DIR}/lib/libfelix.o $<TARGET_OBJECTS:felix_objs>
    COMMAND ${FX_OBJCOPY} --keep-global-symbols=${FX_SYM_FILE} ${CMAKE_BINARY_DIR}/lib/libfelix.o
    COMMAND ${CMAKE_COMMAND} -E rm -f ${FX_STATIC_LIB}
    COMMAND ${CMAKE_AR} rcs ${FX_STATIC_LIB} ${CMAKE_BINARY_DIR}/lib/libfelix.o
    COMMAND ${CMAKE_COMMAND} -E rm -f ${CMAKE_BINARY_DIR}/lib/libfelix.o
    DEPENDS felix_objs $<TARGET_OBJECTS:felix_objs> ${FX_SYM_FILE}
    COMMAND_EXPAND_LISTS
    COMMENT "libfelix: static archive lib/libfelix.a")
add_custom_target(libfelix_static ALL DEPENDS ${FX_STATIC_LIB})

# ---- man pages ---------------------------------------------------------------
set(FX_MAN_DIR ${CMAKE_BINARY_DIR}/man)
if(TARGET felix AND TARGET felix-broker)
    add_custom_command(
        OUTPUT ${FX_MAN_DIR}/felix.1 ${FX_MAN_DIR}/felix-broker.8
        COMMAND ${CMAKE_COMMAND} -E make_directory ${FX_MAN_DIR}
        COMMAND ${FX_HELP2MAN} --no-info --no-discard-stderr --section=1
                "--name=command-line client of the Felix-C broker"
                "--include=${CMAKE_SOURCE_DIR}/packaging/felix.h2m" --output=${FX_MAN_DIR}/felix.1
                $<TARGET_FILE:felix>
        COMMAND ${FX_HELP2MAN} --no-info --no-discard-stderr --section=8
                "--name=Felix-C publish/subscribe broker over QUIC"
                "--include=${CMAKE_SOURCE_DIR}/packaging/felix-broker.h2m"
                --output=${FX_MAN_DIR}/felix-broker.8 $<TARGET_FILE:felix-broker>
        DEPENDS felix felix-broker ${CMAKE_SOURCE_DIR}/packaging/felix.h2m
                ${CMAKE_SOURCE_DIR}/packaging/felix-broker.h2m
        COMMENT "man pages felix(1), felix-broker(8)")
    add_custom_target(felix_man ALL DEPENDS ${FX_MAN_DIR}/felix.1 ${FX_MAN_DIR}/felix-broker.8)
endif()

# ---- install: packaging/install.cmake places everything by the install-time prefix
execute_process(COMMAND ${CMAKE_C_COMPILER} -print-multiarch OUTPUT_VARIABLE FX_MULTIARCH
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
pkg_get_variable(FX_SYSTEMD_UNIT_DIR systemd systemdsystemunitdir)
set(_fx_programs "")
foreach(_t felix felix-broker felix-bench)
    if(TARGET ${_t})
        list(APPEND _fx_programs "$<TARGET_FILE:${_t}>")
    endif()
endforeach()
install(CODE "
set(FX_SRC \"${CMAKE_SOURCE_DIR}\")
set(FX_BIN \"${CMAKE_BINARY_DIR}\")
set(FX_VERSION \"${PROJECT_VERSION}\")
set(FX_MULTIARCH \"${FX_MULTIARCH}\")
set(FX_SYSTEMD_UNIT_DIR \"${FX_SYSTEMD_UNIT_DIR}\")
set(FX_PYTHON \"${FX_PYTHON}\")
set(FX_SHARED_LIB \"$<TARGET_FILE:libfelix_shared>\")
set(FX_STATIC_LIB \"${FX_STATIC_LIB}\")
set(FX_PROGRAMS \"${_fx_programs}\")
")
install(SCRIPT ${CMAKE_SOURCE_DIR}/packaging/install.cmake)

# ---- tests (label pkg): run from this build tree by `make test` --------------
# One CTest test per `def test_<case>` of each pytest file, each with a temp
# directory of its own under pytest/ (parallel cases, and other trees' tests,
# never share one); tests/pkg's install fixture puts `cmake --install` of this
# tree under stage/ first.
set(FX_PKG_ENV
    "FX_SOURCE_DIR=${CMAKE_SOURCE_DIR}" "FX_BINARY_DIR=${CMAKE_BINARY_DIR}"
    "FELIX_LIBRARY=${CMAKE_BINARY_DIR}/lib/libfelix.so.0" "PYTHONDONTWRITEBYTECODE=1"
    "PYTHONPATH=${CMAKE_SOURCE_DIR}/python")
add_test(NAME pkg.install_tree COMMAND ${CMAKE_COMMAND} -E env DESTDIR=${CMAKE_BINARY_DIR}/stage
         ${CMAKE_COMMAND} --install ${CMAKE_BINARY_DIR} --prefix /usr/local)
set_tests_properties(pkg.install_tree PROPERTIES LABELS pkg FIXTURES_SETUP fx_stage TIMEOUT 120)
add_test(NAME pkg.install_tree_cleanup COMMAND ${CMAKE_COMMAND} -E rm -rf ${CMAKE_BINARY_DIR}/stage)
set_tests_properties(pkg.install_tree_cleanup PROPERTIES LABELS pkg FIXTURES_CLEANUP fx_stage)

# The one memtrim case that needs glibc's own allocator (the sanitizer build
# skips it) runs with the pkg cases of this unsanitised tree.
set_tests_properties(memtrim.a_thread_arena_top_goes_back_once_its_thread_frees_a_block
                     PROPERTIES LABELS "unit;pkg")

file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/pytest)
function(fx_pytest_cases prefix file needs_stage)
    file(STRINGS ${file} _lines REGEX "^def test_[a-z0-9_]+\\(")
    foreach(_l ${_lines})
        string(REGEX REPLACE "^def test_([a-z0-9_]+)\\(.*" "\\1" _case "${_l}")
        add_test(NAME ${prefix}.${_case}
                 COMMAND ${FX_PYTHON} -m pytest -q -p no:cacheprovider
                         --basetemp=${CMAKE_BINARY_DIR}/pytest/${prefix}.${_case}
                         ${file}::test_${_case})
        set_tests_properties(${prefix}.${_case} PROPERTIES
            LABELS pkg SKIP_REGULAR_EXPRESSION "[0-9]+ skipped" TIMEOUT 120
            ENVIRONMENT "${FX_PKG_ENV}")
        if(needs_stage)
            set_tests_properties(${prefix}.${_case} PROPERTIES FIXTURES_REQUIRED fx_stage)
        endif()
    endforeach()
endfunction()
fx_pytest_cases(lib ${CMAKE_SOURCE_DIR}/tests/pkg/test_lib.py FALSE)
fx_pytest_cases(install ${CMAKE_SOURCE_DIR}/tests/pkg/test_install.py TRUE)
fx_pytest_cases(examples ${CMAKE_SOURCE_DIR}/tests/pkg/test_examples.py TRUE)
fx_pytest_cases(packaging ${CMAKE_SOURCE_DIR}/tests/pkg/test_packaging.py TRUE)
file(GLOB _fx_py_tests CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/python/tests/test_*.py)
foreach(_t ${_fx_py_tests})
    fx_pytest_cases(python ${_t} FALSE)
endforeach()
