# Warnings, release tuning and sanitizers, applied to every agentq target.
add_library(agentq_flags INTERFACE)
target_compile_options(agentq_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # NOTE: GCC 12 reports false -Wrestrict and -Wmaybe-uninitialized positives inside libstdc++'s
  # std::string at -O3 (GCC bugs 105329, 107138); both point into system headers, not our code.
  target_compile_options(agentq_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict -Wno-maybe-uninitialized>)
endif()
# NOTE: tuned for the build host; kernels also carry scalar fallbacks. AGENTQ_MARCH picks another
# target: x86-64-v3 builds the AVX2 kernels on an AVX-512 host (scripts/test.sh's sanitizer
# build does, so one run tests both kernel families there).
set(AGENTQ_MARCH "native" CACHE STRING "-march value for agentq code (unless AGENTQ_PORTABLE)")
if(NOT AGENTQ_PORTABLE)
  target_compile_options(agentq_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=${AGENTQ_MARCH}>)
endif()
if(CMAKE_BUILD_TYPE STREQUAL "Release")
  # NOTE: test code (targets with the AGENTQ_TEST_CODE property, tests/CMakeLists.txt) at -O1: the
  # libraries under test keep -O3, and -O3 on doctest/json-heavy test files only cost build time
  # (api_e2e.cpp: 30.5 s CPU at -O3, 15.8 s at -O1; FP results are the same without -ffast-math).
  target_compile_options(agentq_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:$<IF:$<BOOL:$<TARGET_PROPERTY:AGENTQ_TEST_CODE>>,-O1,-O3>>)
endif()
if(AGENTQ_SANITIZE)
  target_compile_options(agentq_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  # NOTE: -O1 -g1 (line tables only) after the build type's flags: reports keep file:line, and the
  # Beast/Asio-heavy service compiles about twice as fast as with -O2 -g under ASan.
  target_compile_options(agentq_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-O1 -g1>)
  target_link_options(agentq_flags INTERFACE -fsanitize=address,undefined)
endif()
if(AGENTQ_FUZZ)
  # Coverage instrumentation everywhere; only the fuzz targets link libFuzzer's main.
  target_compile_options(agentq_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -g>)
  target_link_options(agentq_flags INTERFACE -fsanitize=address,undefined)
endif()
