# libFuzzer targets (included by the root CMakeLists.txt when -DFX_FUZZ=ON,
# with clang). Every tests/fuzz/fuzz_*.c is one target. The code under test is
# compiled into each target so libFuzzer sees its coverage (the fx_*
# libraries of this build are not instrumented). Each target runs as the
# CTest test fuzz.<target> (label "fuzz", FX_FUZZ_SECONDS, default 30 s) on
# its corpus: the wire targets on seeds fx_fuzz_seeds writes into the build
# tree first, the others on the committed seeds in tests/fuzz/corpus/<target>
# (read only; new inputs go to the build tree's corpus).
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FX_FUZZ needs clang (-DCMAKE_C_COMPILER=clang)")
endif()

set(FX_FUZZ_DIR ${CMAKE_SOURCE_DIR}/tests/fuzz)
set(FX_FUZZ_CORPUS ${CMAKE_BINARY_DIR}/fuzz-corpus)
set(FX_FUZZ_ARTIFACTS ${CMAKE_BINARY_DIR}/fuzz-artifacts)
set(FX_FUZZ_SECONDS 30 CACHE STRING "Seconds each fuzz target runs under ctest -L fuzz")
set(_fx_fuzz_flags -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
    -fno-omit-frame-pointer -g -O1)

file(GLOB _fx_wire_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/wire/*.c)
file(GLOB _fx_auth_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/auth/*.c)
file(GLOB _fx_config_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/server/config*.c)
file(GLOB _fx_fuzz_targets CONFIGURE_DEPENDS ${FX_FUZZ_DIR}/fuzz_*.c)
file(MAKE_DIRECTORY ${FX_FUZZ_ARTIFACTS})

# Seed corpus of the wire targets, rebuilt before the fuzz tests run
# (fixture), from the golden layouts and, when present, the shared vectors
# read in place.
add_executable(fx_fuzz_seeds ${FX_FUZZ_DIR}/seeds.c)
target_link_libraries(fx_fuzz_seeds PRIVATE fx_storage fx_wire fx_base)
add_test(NAME fuzz.seeds
    COMMAND fx_fuzz_seeds ${FX_FUZZ_CORPUS} ${FX_SHARED_DIR}/vectors/felix-wire)
set_tests_properties(fuzz.seeds PROPERTIES LABELS "fuzz" FIXTURES_SETUP fx_fuzz_seeds)

# One target: fx_fuzz_target(NAME DICT file SRCS ... LIBS ... DEFS ... LINK ...).
function(fx_fuzz_target name)
    cmake_parse_arguments(F "" "DICT" "SRCS;LIBS;DEFS;LINK" ${ARGN})
    add_executable(${name} ${FX_FUZZ_DIR}/${name}.c ${F_SRCS})
    target_include_directories(${name} PRIVATE
        ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src ${FX_FUZZ_DIR})
    target_compile_options(${name} PRIVATE ${_fx_fuzz_flags})
    target_compile_definitions(${name} PRIVATE ${F_DEFS})
    target_link_options(${name} PRIVATE ${_fx_fuzz_flags} ${F_LINK})
    target_link_libraries(${name} PRIVATE ${F_LIBS})
    file(MAKE_DIRECTORY ${FX_FUZZ_CORPUS}/${name})
    set(_seeds "")
    if(IS_DIRECTORY ${FX_FUZZ_DIR}/corpus/${name})
        set(_seeds ${FX_FUZZ_DIR}/corpus/${name})
    endif()
    math(EXPR _timeout "${FX_FUZZ_SECONDS} + 300")
    add_test(NAME fuzz.${name}
        COMMAND ${name} -max_total_time=${FX_FUZZ_SECONDS} -dict=${FX_FUZZ_DIR}/${F_DICT}
                -print_final_stats=1 -artifact_prefix=${FX_FUZZ_ARTIFACTS}/${name}-
                ${FX_FUZZ_CORPUS}/${name} ${_seeds})
    set_tests_properties(fuzz.${name} PROPERTIES
        LABELS "fuzz" FIXTURES_REQUIRED fx_fuzz_seeds TIMEOUT ${_timeout})
endfunction()

# libauth, with the signature check skipped (FX_AUTH_FUZZ_SKIP_SIGNATURE,
# src/auth/auth.c): these sources are compiled with it here and nowhere else.
set(_fx_auth_fuzz SRCS ${_fx_auth_srcs} ${_fx_wire_srcs}
    DEFS FX_AUTH_FUZZ_SKIP_SIGNATURE FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    LIBS fx_base PkgConfig::JANSSON PkgConfig::NETTLE PkgConfig::HOGWEED DICT auth.dict)
set(_fx_fuzz_special fuzz_jws_verify fuzz_jwt_claims fuzz_jwks_parse fuzz_config_yaml
    fuzz_admin_bind fuzz_admin_path fuzz_bidi_input fuzz_client_events fuzz_dlog_recover
    fuzz_catalog_parse fuzz_gjournal fuzz_etcd_codec fuzz_place)
fx_fuzz_target(fuzz_jws_verify ${_fx_auth_fuzz})
fx_fuzz_target(fuzz_jwt_claims ${_fx_auth_fuzz})
fx_fuzz_target(fuzz_jwks_parse ${_fx_auth_fuzz})
# The broker configuration: file < env < --set layers and the YAML parser.
fx_fuzz_target(fuzz_config_yaml SRCS ${_fx_config_srcs} DICT config.dict
    LIBS fx_broker fx_quic fx_wire fx_base PkgConfig::YAML)
# The admin endpoint's parsers; DNS is stubbed out (--wrap).
fx_fuzz_target(fuzz_admin_bind SRCS ${CMAKE_SOURCE_DIR}/src/server/admin.c
    ${CMAKE_SOURCE_DIR}/src/server/admin_guard.c DICT admin.dict
    LINK -Wl,--wrap=getaddrinfo -Wl,--wrap=freeaddrinfo
    LIBS fx_quic fx_wire fx_base PkgConfig::MHD PkgConfig::NETTLE)
# fuzz_admin_path.c includes src/server/admin_routes.c itself.
fx_fuzz_target(fuzz_admin_path DICT admin.dict
    LIBS fx_server fx_broker fx_quic fx_wire fx_base)

# Recovery of a durable log from arbitrary segment and index files, on the
# in-memory I/O layer (seeds: seeds.c and tests/fuzz/corpus/fuzz_dlog_recover).
set(_fx_dlog_srcs dlog.c dlog_marks.c dlog_open.c format.c memio.c producers.c scan.c sio.c)
list(TRANSFORM _fx_dlog_srcs PREPEND ${CMAKE_SOURCE_DIR}/src/storage/)
fx_fuzz_target(fuzz_dlog_recover SRCS ${_fx_dlog_srcs} DICT storage.dict
    LIBS fx_base Threads::Threads PkgConfig::DEFLATE)

# The catalogue of durable streams read from arbitrary catalog.json text in
# an fx_memio root, then changed and read back (seeds: seeds.c and
# tests/fuzz/corpus/fuzz_catalog_parse).
set(_fx_catalog_srcs catalog.c format.c memio.c sio.c)
list(TRANSFORM _fx_catalog_srcs PREPEND ${CMAKE_SOURCE_DIR}/src/storage/)
fx_fuzz_target(fuzz_catalog_parse SRCS ${_fx_catalog_srcs} DICT catalog.dict
    LIBS fx_base Threads::Threads PkgConfig::JANSSON PkgConfig::DEFLATE)

# The decoders of the consumer-group journal: records and snapshots (seeds:
# tests/fuzz/corpus/fuzz_gjournal).
set(_fx_gjournal_srcs gjournal.c gjournal_state.c format.c sio.c)
list(TRANSFORM _fx_gjournal_srcs PREPEND ${CMAKE_SOURCE_DIR}/src/storage/)
fx_fuzz_target(fuzz_gjournal SRCS ${_fx_gjournal_srcs} DICT gjournal.dict
    LIBS fx_base Threads::Threads PkgConfig::DEFLATE)

# The etcd client's answer and watch-stream decoders (seeds:
# tests/fuzz/corpus/fuzz_etcd_codec, the gateway's recorded answers).
fx_fuzz_target(fuzz_etcd_codec SRCS ${CMAKE_SOURCE_DIR}/src/cluster/etcd_codec.c ${_fx_wire_srcs}
    DICT etcd.dict LIBS fx_base PkgConfig::JANSSON PkgConfig::NETTLE)

# The cluster's placement: key parsing, the node/owner/pin value decoders and
# the rendezvous order (seeds: tests/fuzz/corpus/fuzz_place).
fx_fuzz_target(fuzz_place SRCS ${CMAKE_SOURCE_DIR}/src/cluster/place.c DICT place.dict
    LIBS fx_base PkgConfig::JANSSON)

# The broker's data plane on one thread: every src/broker and src/base file
# but the real loop, over the fake transport and loops (fake_quic.c,
# fake_loop.c); no socket, no thread.
file(GLOB _fx_broker_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/broker/*.c)
file(GLOB _fx_base_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/base/*.c)
set(_fx_base_noloop ${_fx_base_srcs})
list(FILTER _fx_base_noloop EXCLUDE REGEX "/loop\\.c$")
fx_fuzz_target(fuzz_bidi_input DICT wire.dict
    SRCS ${_fx_broker_srcs} ${_fx_base_noloop} ${_fx_wire_srcs} ${FX_FUZZ_DIR}/fake_loop.c
         ${FX_FUZZ_DIR}/fake_quic.c
    LIBS fx_storage Threads::Threads m PkgConfig::JANSSON PkgConfig::NETTLE PkgConfig::SODIUM
         PkgConfig::DEFLATE)

# libfelix's subscriptions through its public API on its real loop thread,
# over the fake transport (no socket).
file(GLOB _fx_client_srcs CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/client/*.c)
fx_fuzz_target(fuzz_client_events DICT wire.dict
    SRCS ${_fx_client_srcs} ${_fx_base_srcs} ${_fx_wire_srcs} ${FX_FUZZ_DIR}/fake_quic.c
    LIBS Threads::Threads m PkgConfig::JANSSON PkgConfig::NETTLE)

foreach(_src ${_fx_fuzz_targets})
    get_filename_component(_name ${_src} NAME_WE)
    if(_name IN_LIST _fx_fuzz_special)
        continue()
    endif()
    fx_fuzz_target(${_name} SRCS ${_fx_wire_srcs} DICT wire.dict
        LIBS fx_base PkgConfig::JANSSON PkgConfig::NETTLE)
endforeach()
