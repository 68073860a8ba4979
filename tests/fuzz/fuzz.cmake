# libFuzzer targets for the wire codecs (included by the root CMakeLists.txt
# when -DFX_FUZZ=ON, with clang). Every tests/fuzz/fuzz_*.c is one target; the
# wire sources are compiled into each target so libFuzzer sees their coverage
# (the fx_* libraries of this build are not instrumented). Each target runs as
# the CTest test fuzz.<target> (label "fuzz", 30 s), on a seed corpus that
# fx_fuzz_seeds writes into the build tree first.
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
file(GLOB _fx_fuzz_targets CONFIGURE_DEPENDS ${FX_FUZZ_DIR}/fuzz_*.c)
file(MAKE_DIRECTORY ${FX_FUZZ_ARTIFACTS})

# Seed corpus, rebuilt before the fuzz tests run (fixture), from the golden
# layouts and, when present, the shared vectors read in place.
add_executable(fx_fuzz_seeds ${FX_FUZZ_DIR}/seeds.c)
target_link_libraries(fx_fuzz_seeds PRIVATE fx_wire fx_base)
add_test(NAME fuzz.seeds
    COMMAND fx_fuzz_seeds ${FX_FUZZ_CORPUS} ${FX_SHARED_DIR}/vectors/felix-wire)
set_tests_properties(fuzz.seeds PROPERTIES LABELS "fuzz" FIXTURES_SETUP fx_fuzz_seeds)

foreach(_src ${_fx_fuzz_targets})
    get_filename_component(_name ${_src} NAME_WE)
    add_executable(${_name} ${_src} ${_fx_wire_srcs})
    target_include_directories(${_name} PRIVATE
        ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src ${FX_FUZZ_DIR})
    target_compile_options(${_name} PRIVATE ${_fx_fuzz_flags})
    target_link_options(${_name} PRIVATE ${_fx_fuzz_flags})
    target_link_libraries(${_name} PRIVATE fx_base PkgConfig::JANSSON PkgConfig::NETTLE)
    file(MAKE_DIRECTORY ${FX_FUZZ_CORPUS}/${_name})
    add_test(NAME fuzz.${_name}
        COMMAND ${_name} -max_total_time=${FX_FUZZ_SECONDS} -dict=${FX_FUZZ_DIR}/wire.dict
                -print_final_stats=1 -artifact_prefix=${FX_FUZZ_ARTIFACTS}/${_name}-
                ${FX_FUZZ_CORPUS}/${_name})
    set_tests_properties(fuzz.${_name} PROPERTIES
        LABELS "fuzz" FIXTURES_REQUIRED fx_fuzz_seeds
        TIMEOUT 600)
endforeach()
