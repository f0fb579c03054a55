# Helpers shared by every module's CMakeLists.

# tlr_test(NAME LABEL src... LIBS lib...): one gtest executable per module, registered with
# CTest under LABEL. Test binaries get the shared-data and testdata paths as definitions.
function(tlr_test name label)
  cmake_parse_arguments(T "" "" "LIBS;PROPERTIES" ${ARGN})
  if(NOT TLR_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${T_UNPARSED_ARGUMENTS})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  # The test's own code (assertions, fixtures) at -O1: a third less compile time than -O3; the
  # code under test keeps its libraries' flags.
  target_compile_options(${name} PRIVATE -O1)
  target_compile_definitions(${name} PRIVATE
      TLR_SHARED_DIR="${TLR_SHARED_DIR}" TLR_TESTDATA_DIR="${TLR_TESTDATA_DIR}"
      TLR_BIN_DIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}" TLR_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  gtest_discover_tests(${name} PROPERTIES LABELS ${label} ${T_PROPERTIES}
                       DISCOVERY_TIMEOUT 60)
endfunction()

# tlr_fuzzer(NAME src... LIBS lib... CORPUS dir): a libFuzzer target, built only with
# TLR_FUZZ=ON. CTest runs it for TLR_FUZZ_SECONDS from its seed corpus (label fuzz).
set(TLR_FUZZ_SECONDS 20 CACHE STRING "Seconds each fuzzer runs under ctest")
function(tlr_fuzzer name)
  cmake_parse_arguments(F "" "" "LIBS;SEEDS" ${ARGN})
  if(NOT TLR_FUZZ)
    return()
  endif()
  add_executable(${name} ${F_UNPARSED_ARGUMENTS})
  target_link_libraries(${name} PRIVATE ${F_LIBS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_compile_definitions(${name} PRIVATE TLR_SHARED_DIR="${TLR_SHARED_DIR}")
  set(work ${CMAKE_BINARY_DIR}/fuzz/${name})
  add_test(NAME ${name}
           COMMAND ${CMAKE_COMMAND} -DFUZZER=$<TARGET_FILE:${name}> -DWORK=${work}
                   "-DSEEDS=${F_SEEDS}" -DSECONDS=${TLR_FUZZ_SECONDS}
                   -P ${CMAKE_SOURCE_DIR}/cmake/run_fuzzer.cmake)
  # The run itself is bounded by -max_total_time; leave room for loading the seeds.
  math(EXPR timeout "${TLR_FUZZ_SECONDS} + 300")
  set_tests_properties(${name} PROPERTIES LABELS fuzz TIMEOUT ${timeout})
endfunction()
