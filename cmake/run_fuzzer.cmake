# Runs one libFuzzer target for SECONDS from a fresh copy of its seed corpus and prints the
# executions it made (libFuzzer's own "Done N runs in S second(s)" line).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/artifacts)
foreach(seed_dir ${SEEDS})
  file(GLOB seeds ${seed_dir}/*)
  file(COPY ${seeds} DESTINATION ${WORK}/corpus)
endforeach()
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -print_final_stats=1 -rss_limit_mb=4096
          -timeout=20 -artifact_prefix=${WORK}/artifacts/ ${WORK}/corpus
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX MATCH "Done [0-9]+ runs in [0-9]+ second" done "${err}")
string(REGEX MATCH "stat::number_of_executed_units: *[0-9]+" units "${err}")
string(REGEX MATCH "stat::average_exec_per_sec: *[0-9]+" eps "${err}")
message("${done}; ${units}; ${eps}")
if(NOT rc EQUAL 0)
  message("${err}")
  message(FATAL_ERROR "fuzzer failed (exit ${rc}); crashing inputs are in ${WORK}/artifacts")
endif()
