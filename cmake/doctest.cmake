# doctest: the Debian package's config, or a single doctest.h carried to a bare
# machine (AGENTQ_DOCTEST_DIR=<dir containing doctest/doctest.h>).
find_package(doctest QUIET)
if(NOT TARGET doctest::doctest)
  find_path(AGENTQ_DOCTEST_INCLUDE doctest/doctest.h
    HINTS ${AGENTQ_DOCTEST_DIR} $ENV{AGENTQ_DOCTEST_DIR} ${CMAKE_SOURCE_DIR}/.deps/include)
  if(NOT AGENTQ_DOCTEST_INCLUDE)
    message(FATAL_ERROR "doctest not found: apt-get install doctest-dev, or set AGENTQ_DOCTEST_DIR")
  endif()
  add_library(doctest::doctest INTERFACE IMPORTED)
  target_include_directories(doctest::doctest INTERFACE ${AGENTQ_DOCTEST_INCLUDE})
endif()
