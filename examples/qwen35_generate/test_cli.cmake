# CLI checks for qwen35_generate, run as `cmake -DQ35_CLI=... -DQ35_TEST_DATA_DIR=... -DQ35_WORK_DIR=...
# -DQ35_CHECK=tokenize_refs|bad_usage -P test_cli.cmake`.
#   tokenize_refs: every prompt of every ref_*.json (llama.cpp's ids) and of tokenizer_corpus.json through
#                  --tokenize, compared with the ids; then the ids through --detokenize, compared with the prompt.
#   bad_usage:     bad command lines exit 2 with the usage text; bad files and ids exit 1 with one error line;
#                  never a signal.
cmake_minimum_required(VERSION 3.24)

set(model "${Q35_TEST_DATA_DIR}/tiny_dense_q4km.gguf")
set(failures 0)

function(fail msg)
  message(SEND_ERROR "${msg}")
  math(EXPR n "${failures} + 1")
  set(failures ${n} PARENT_SCOPE)
endfunction()

# run(<out> <err> <rc> args...): runs the CLI; a result that is not a number means it died by a signal.
function(run out_var err_var rc_var)
  execute_process(COMMAND "${Q35_CLI}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${err_var} "${err}" PARENT_SCOPE)
  set(${rc_var} "${rc}" PARENT_SCOPE)
endfunction()

if(Q35_CHECK STREQUAL "tokenize_refs")
  file(GLOB refs "${Q35_TEST_DATA_DIR}/ref_*.json")
  list(APPEND refs "${Q35_TEST_DATA_DIR}/tokenizer_corpus.json")
  list(LENGTH refs n_refs)
  if(n_refs LESS 8)
    message(FATAL_ERROR "expected the 7 ref_*.json files and tokenizer_corpus.json in ${Q35_TEST_DATA_DIR}")
  endif()
  set(n_checked 0)
  foreach(ref IN LISTS refs)
    file(READ "${ref}" json)
    string(JSON n_cases LENGTH "${json}" cases)
    math(EXPR last "${n_cases} - 1")
    foreach(i RANGE ${last})
      string(JSON prompt GET "${json}" cases ${i} prompt)
      string(JSON n_ids LENGTH "${json}" cases ${i} tokens)
      set(expected "")
      math(EXPR last_id "${n_ids} - 1")
      foreach(j RANGE ${last_id})
        string(JSON id GET "${json}" cases ${i} tokens ${j})
        string(APPEND expected " ${id}")
      endforeach()
      string(STRIP "${expected}" expected)

      # execute_process directly: passing the prompt through a function's ARGN would split it at ';'
      execute_process(COMMAND "${Q35_CLI}" -m "${model}" --tokenize "${prompt}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                      ERROR_VARIABLE err)
      if(NOT rc EQUAL 0 OR NOT out STREQUAL "${expected}\n")
        fail("${ref} case ${i}: --tokenize gave rc=${rc} '${out}' (stderr '${err}'), expected '${expected}'")
      endif()
      # through a file read as hex: execute_process's OUTPUT_VARIABLE and a text file(READ) turn \r\n into \n
      execute_process(COMMAND "${Q35_CLI}" -m "${model}" --detokenize "${expected}" RESULT_VARIABLE rc
                      OUTPUT_FILE "${Q35_WORK_DIR}/detokenized.txt" ERROR_VARIABLE err)
      file(READ "${Q35_WORK_DIR}/detokenized.txt" out_hex HEX)
      string(HEX "${prompt}\n" expected_hex)
      if(NOT rc EQUAL 0 OR NOT out_hex STREQUAL expected_hex)
        file(READ "${Q35_WORK_DIR}/detokenized.txt" out)
        fail("${ref} case ${i}: --detokenize gave rc=${rc} '${out}' (stderr '${err}'), expected '${prompt}'")
      endif()
      math(EXPR n_checked "${n_checked} + 1")
    endforeach()
  endforeach()
  message(STATUS "${n_checked} prompts tokenized and detokenized through the CLI")

  foreach(gguf tiny_dense_q4km tiny_moe_q4km tiny_interleaved_q4km)
    run(out err rc -m "${Q35_TEST_DATA_DIR}/${gguf}.gguf" --info -c 8192)
    if(NOT rc EQUAL 0
       OR NOT out MATCHES "\narch: qwen35"
       OR NOT out MATCHES "\nmodel: [^\n]+"
       OR NOT out MATCHES "\ntensors: [1-9]"
       OR NOT out MATCHES "\ncontext: 8192 tokens"
       OR NOT out MATCHES "\ntotal \\(weights \\+ state\\): "
       OR NOT out MATCHES "\ntokenizer: gpt2 / qwen35, 512 tokens")
      fail("--info on ${gguf}: rc=${rc} stdout '${out}' stderr '${err}'")
    endif()
  endforeach()
elseif(Q35_CHECK STREQUAL "bad_usage")
  # expect_usage(args...): exit code 2 and the usage text on stderr
  function(expect_usage)
    run(out err rc ${ARGN})
    if(NOT rc STREQUAL "2" OR NOT err MATCHES "usage: ")
      fail("'${ARGN}': expected exit 2 with usage on stderr, got rc=${rc} stderr '${err}'")
    endif()
    set(failures ${failures} PARENT_SCOPE)
  endfunction()
  # expect_error(<regex> args...): exit code 1 and one line on stderr matching regex, no usage text
  function(expect_error regex)
    run(out err rc ${ARGN})
    string(REGEX MATCHALL "\n" lines "${err}")
    list(LENGTH lines n_lines)
    if(NOT rc STREQUAL "1" OR NOT n_lines EQUAL 1 OR NOT err MATCHES "${regex}" OR err MATCHES "usage: ")
      fail("'${ARGN}': expected exit 1 and one error line matching '${regex}', got rc=${rc} stderr '${err}'")
    endif()
    set(failures ${failures} PARENT_SCOPE)
  endfunction()

  expect_usage()
  expect_usage(--bogus)
  expect_usage(-m "${model}" --info --bogus)
  expect_usage(-m "${model}")
  expect_usage(-m "${model}" --tokenize)
  expect_usage(--tokenize hello)
  expect_usage(-m "${model}" --info --tokenize hello)
  expect_usage(-m "${model}" -c -5 --info)
  expect_usage(-m "${model}" -c 0 --info)
  expect_usage(-m "${model}" -c abc --info)
  expect_usage(-m "${model}" -c 12x --info)
  expect_usage(-m "${model}" --detokenize "12 x3")
  expect_usage(-m "${model}" --detokenize "-1")
  expect_usage(-m "${model}" --detokenize "1.5")
  expect_usage(-m "${Q35_WORK_DIR}/no_such_model.gguf" --info)
  expect_usage(-m "${Q35_WORK_DIR}" --info)

  file(WRITE "${Q35_WORK_DIR}/not_a_gguf.gguf" "this is not a GGUF file, just text\n")
  expect_error("not_a_gguf.gguf" -m "${Q35_WORK_DIR}/not_a_gguf.gguf" --info)
  expect_error("not_a_gguf.gguf" -m "${Q35_WORK_DIR}/not_a_gguf.gguf" --tokenize hi)
  file(WRITE "${Q35_WORK_DIR}/empty.gguf" "")
  expect_error("empty.gguf" -m "${Q35_WORK_DIR}/empty.gguf" --info)
  expect_error("token id 600 .*512 tokens" -m "${model}" --detokenize "1 600")

  run(out err rc --help)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "usage: ")
    fail("--help: rc=${rc} stdout '${out}'")
  endif()
else()
  message(FATAL_ERROR "unknown Q35_CHECK '${Q35_CHECK}'")
endif()

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} CLI check(s) failed")
endif()
