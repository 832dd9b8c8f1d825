# pacheck_add_tests(): ctest tests that run `pacheck run` on a kernel plugin (installed with pacheck as
# lib/cmake/pacheck/pacheckAddTests.cmake; find_package(pacheck) includes it).
#
#   pacheck_add_tests(TARGET my_plugin SUITES gate tail-poison
#                     [DEVICE cpu|cuda|cuda:N]   # default cpu
#                     [SHARDS N]                 # tests per suite, default 2 (each runs --shard I/N)
#                     [LABELS label ...]         # added to the label "pacheck"
#                     [ARGS arg ...]             # more `pacheck run` options (--kernel K, --tolerance ...)
#                     [TIMEOUT seconds])         # per test, default 600
#
# Registers one test per (suite, shard), named pacheck.TARGET.SUITE.I_of_N, each running
#   pacheck run --plugin $<TARGET_FILE:TARGET> --suite SUITE --device DEVICE --shard I/N ARGS...
# whose pass or fail is pacheck's exit code (0 pass; 1 a cell failed; 2 usage or input error; 3 instrument
# blind), so `ctest -j` runs the shards in parallel. A shard with no cell of a kernel passes, as an empty
# GoogleTest shard does; the shards together run every cell once. The pacheck used is the imported
# executable pacheck::cli (the one find_package found).
function(pacheck_add_tests)
  cmake_parse_arguments(PARSE_ARGV 0 PA "" "TARGET;DEVICE;SHARDS;TIMEOUT" "SUITES;LABELS;ARGS")
  if(PA_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "pacheck_add_tests: unknown arguments: ${PA_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT PA_TARGET)
    message(FATAL_ERROR "pacheck_add_tests: TARGET is required (the plugin library target)")
  endif()
  if(NOT TARGET ${PA_TARGET})
    message(FATAL_ERROR "pacheck_add_tests: TARGET '${PA_TARGET}' is not a target of this project")
  endif()
  if(NOT PA_SUITES)
    message(FATAL_ERROR "pacheck_add_tests: SUITES is required (e.g. SUITES gate tail-poison)")
  endif()
  if(NOT PA_DEVICE)
    set(PA_DEVICE cpu)
  endif()
  if(NOT PA_DEVICE MATCHES "^(cpu|cuda|cuda:[0-9]+|cuda:all|hip|hip:[0-9]+|hip:all)$")
    message(FATAL_ERROR "pacheck_add_tests: DEVICE '${PA_DEVICE}': expected cpu, cuda, cuda:N, cuda:all, hip, hip:N or hip:all")
  endif()
  if(NOT DEFINED PA_SHARDS)
    set(PA_SHARDS 2)
  endif()
  if(NOT PA_SHARDS MATCHES "^[1-9][0-9]*$")
    message(FATAL_ERROR "pacheck_add_tests: SHARDS '${PA_SHARDS}': expected a whole number >= 1")
  endif()
  if(NOT PA_TIMEOUT)
    set(PA_TIMEOUT 600)
  endif()
  if(NOT TARGET pacheck::cli)
    message(FATAL_ERROR "pacheck_add_tests: pacheck::cli is not defined (call find_package(pacheck) first)")
  endif()
  math(EXPR last "${PA_SHARDS} - 1")
  foreach(suite IN LISTS PA_SUITES)
    string(REGEX REPLACE "[^A-Za-z0-9_.-]" "_" suite_tag "${suite}")
    foreach(i RANGE 0 ${last})
      set(name "pacheck.${PA_TARGET}.${suite_tag}.${i}_of_${PA_SHARDS}")
      add_test(NAME ${name}
               COMMAND pacheck::cli run --plugin $<TARGET_FILE:${PA_TARGET}> --suite ${suite} --device ${PA_DEVICE}
                       --shard ${i}/${PA_SHARDS} --quiet ${PA_ARGS})
      set_tests_properties(${name} PROPERTIES LABELS "pacheck;${PA_LABELS}" TIMEOUT ${PA_TIMEOUT})
    endforeach()
  endforeach()
endfunction()
