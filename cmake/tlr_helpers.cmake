# Helpers shared by every module's CMakeLists.

# tlr_test(NAME LABEL src... LIBS lib... [PROPERTIES ...] [ALONE]): the GoogleTest tests in src...,
# registered with CTest under LABEL (and PROPERTIES). They are compiled into one executable per
# folder, <folder>_tests (unity batches of 8 files): each test translation unit parses GoogleTest,
# nlohmann-json and cpp-httplib and instantiates their templates again (~5 CPU-s), and 45
# executables of one or two files each were a third of a fresh build. NAME's tests are the suites
# its files define (TEST/TEST_F/TEST_P), picked out of the folder's executable by a gtest filter.
# ALONE: an executable of its own named NAME (scripts run it by name, or it replaces operator new).
# The test target is returned in TLR_TEST_TARGET. Test binaries get the shared-data and testdata
# paths as definitions.
function(tlr_test name label)
  cmake_parse_arguments(T "ALONE" "" "LIBS;PROPERTIES" ${ARGN})
  if(NOT TLR_BUILD_TESTS)
    return()
  endif()
  if(T_ALONE)
    set(target ${name})
  else()
    get_filename_component(folder ${CMAKE_CURRENT_SOURCE_DIR} NAME)
    set(target ${folder}_tests)
  endif()
  if(NOT TARGET ${target})
    add_executable(${target})
    target_link_libraries(${target} PRIVATE GTest::gtest GTest::gtest_main)
    # The test's own code (assertions, fixtures) at -O1: a third less compile time than -O3; the
    # code under test keeps its libraries' flags.
    target_compile_options(${target} PRIVATE -O1)
    target_compile_definitions(${target} PRIVATE
        TLR_SHARED_DIR="${TLR_SHARED_DIR}" TLR_TESTDATA_DIR="${TLR_TESTDATA_DIR}"
        TLR_BIN_DIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}" TLR_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  endif()
  target_sources(${target} PRIVATE ${T_UNPARSED_ARGUMENTS})
  target_link_libraries(${target} PRIVATE ${T_LIBS})
  set(filter)
  foreach(src IN LISTS T_UNPARSED_ARGUMENTS)
    get_filename_component(path ${src} ABSOLUTE)
    file(STRINGS ${path} lines REGEX "^(TEST|TEST_F|TEST_P)\\( *[A-Za-z0-9_]+")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^(TEST|TEST_F|TEST_P)\\( *([A-Za-z0-9_]+).*" "\\2" suite "${line}")
      list(APPEND filter "${suite}.*")
      if(line MATCHES "^TEST_P")
        list(APPEND filter "*/${suite}.*")  # Instantiation/Suite.Test/param
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES filter)
  if(NOT filter)
    message(FATAL_ERROR "tlr_test(${name}): no TEST, TEST_F or TEST_P in ${T_UNPARSED_ARGUMENTS}")
  endif()
  list(JOIN filter ":" filter)
  gtest_discover_tests(${target} TEST_FILTER "${filter}" PROPERTIES LABELS ${label} ${T_PROPERTIES}
                       DISCOVERY_TIMEOUT 60)
  set(TLR_TEST_TARGET ${target} PARENT_SCOPE)
endfunction()

# tlr_fuzzer(NAME src... LIBS lib... SEEDS dir...): a fuzz target. With TLR_FUZZ=ON (build-fuzz,
# clang) a libFuzzer binary that CTest runs for TLR_FUZZ_SECONDS from its seed corpus (label
# fuzz). In the other builds NAME_replay: the same target under src/util/fuzz_replay_main.cc,
# run by CTest over the seeds and fixed mutations of them (label unit), in `make test`.
set(TLR_FUZZ_SECONDS 20 CACHE STRING "Seconds each fuzzer runs under ctest")
function(tlr_fuzzer name)
  cmake_parse_arguments(F "" "" "LIBS;SEEDS" ${ARGN})
  if(NOT TLR_FUZZ)
    if(TLR_BUILD_TESTS)
      add_executable(${name}_replay ${F_UNPARSED_ARGUMENTS} ${CMAKE_SOURCE_DIR}/src/util/fuzz_replay_main.cc)
      target_link_libraries(${name}_replay PRIVATE ${F_LIBS})
      target_compile_definitions(${name}_replay PRIVATE TLR_SHARED_DIR="${TLR_SHARED_DIR}")
      add_test(NAME ${name}_replay COMMAND ${name}_replay ${F_SEEDS} WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
      set_tests_properties(${name}_replay PROPERTIES LABELS unit)
    endif()
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
