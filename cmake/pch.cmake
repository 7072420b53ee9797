# Precompiled headers for the tests (AGENTQ_PCH): each test file is its own executable and parses
# the same system headers again; tests/CMakeLists.txt has one holder target per library the tests
# link, which owns the PCH the tests reuse (REUSE_FROM: the flags must match, so one per link kind).
# NOTE: only the tests. On the libraries it saved ~10% of their CPU time at -O3 (codegen dominates
# there) and, with gcc 12, brought out false -Warray-bounds/-Wstringop-overflow reports from
# libstdc++'s std::string in two engine files; test code is built at -O1, where parsing dominates.
# Off by default under a ccache launcher: ccache needs CCACHE_SLOPPINESS=pch_defines,time_macros
# for PCH, and a warm ccache beats the PCH anyway.
set(agentq_pch_default ON)
if(CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache")
  set(agentq_pch_default OFF)
endif()
option(AGENTQ_PCH "Precompiled headers for the tests (default: on, off under a ccache launcher)" ${agentq_pch_default})
message(STATUS "agentq: precompiled test headers ${AGENTQ_PCH}")

set(AGENTQ_PCH_STD <algorithm> <chrono> <cmath> <cstdint> <cstdio> <cstring> <filesystem> <fstream>
  <functional> <map> <memory> <mutex> <optional> <span> <sstream> <stdexcept> <string> <string_view>
  <thread> <unordered_map> <vector>)
