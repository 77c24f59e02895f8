# qwen35_generate --dump-tensor against gguf-py: each line of tests/data/quant/dump_tensor.sha256
# ("FILE TENSOR N_VALUES SHA256", from scripts/make_quant_goldens.py) names a fixture tensor and the
# SHA-256 of gguf.quants.dequantize's float32 output; the CLI's file must hash the same.
# Run as `cmake -DQ35_CLI=... -DQ35_TEST_DATA_DIR=... -DQ35_WORK_DIR=... -P test_dump_tensor.cmake`.
cmake_minimum_required(VERSION 3.24)

set(failures 0)
file(STRINGS "${Q35_TEST_DATA_DIR}/quant/dump_tensor.sha256" cases)
list(LENGTH cases n_cases)
if(n_cases LESS 6)
  message(FATAL_ERROR "expected 6 cases in ${Q35_TEST_DATA_DIR}/quant/dump_tensor.sha256")
endif()
foreach(line IN LISTS cases)
  string(REPLACE " " ";" f "${line}")
  list(GET f 0 gguf_name)
  list(GET f 1 tensor)
  list(GET f 2 n_values)
  list(GET f 3 want)
  set(out "${Q35_WORK_DIR}/dump_${tensor}.f32")
  file(REMOVE "${out}")
  execute_process(COMMAND "${Q35_CLI}" -m "${Q35_TEST_DATA_DIR}/${gguf_name}" --dump-tensor "${tensor}" --out "${out}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
  if(NOT rc EQUAL 0)
    message(SEND_ERROR "${tensor}: exit ${rc}: ${stderr}")
    math(EXPR failures "${failures} + 1")
    continue()
  endif()
  file(SIZE "${out}" size)
  math(EXPR want_size "${n_values} * 4")
  file(SHA256 "${out}" got)
  if(NOT size EQUAL want_size OR NOT got STREQUAL want)
    message(SEND_ERROR "${gguf_name} ${tensor}: ${size} bytes, sha256 ${got}; gguf-py: ${want_size} bytes, ${want}")
    math(EXPR failures "${failures} + 1")
  endif()
endforeach()

# Errors: an unknown tensor exits 1 naming it; --dump-tensor without --out is a usage error (2).
execute_process(COMMAND "${Q35_CLI}" -m "${Q35_TEST_DATA_DIR}/tiny_dense_q4km.gguf" --dump-tensor no.such.tensor
                        --out "${Q35_WORK_DIR}/none.f32" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "no tensor named 'no.such.tensor'")
  message(SEND_ERROR "unknown tensor: exit ${rc}, '${err}'")
  math(EXPR failures "${failures} + 1")
endif()
execute_process(COMMAND "${Q35_CLI}" -m "${Q35_TEST_DATA_DIR}/tiny_dense_q4km.gguf" --dump-tensor output.weight
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "--dump-tensor needs --out PATH")
  message(SEND_ERROR "missing --out: exit ${rc}, '${err}'")
  math(EXPR failures "${failures} + 1")
endif()

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} --dump-tensor check(s) failed")
endif()
message(STATUS "--dump-tensor: ${n_cases} tensors bit-exact with gguf-py")
