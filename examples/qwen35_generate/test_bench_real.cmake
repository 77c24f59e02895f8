# --bench on the sim at real shapes, run as `cmake -DQ35_CLI=... -DQ35_WORK_DIR=... -P test_bench_real.cmake`.
# Every other test runs tiny models, where no dimension comes near what a real file holds; this one runs
# the full-size layers of two synthetic Q4_K_M models, cut to their first layers so that the sim can run
# them: index arithmetic, grid sizes, workspaces and the planner at the sizes a GPU will first see.
# - Qwen3.5-9B, first 4 layers (3 Gated DeltaNet, 1 attention: 16 query / 4 KV heads of 256, partial
#   RoPE), hidden 4096, FFN 12288, vocabulary 248320: a 16-token prompt (GEMMs, chunked GDN, prefill
#   attention) and decode steps after an 8-token context (GEMV, recurrent GDN, split-KV attention).
# - Qwen3.5-35B-A3B, first 4 layers: 256 experts of 512 x 2048, top-8, a shared expert; all experts on
#   the device, then under a budget that leaves most of them in host memory: the logits after the prompt
#   and after decoding must be bit-identical to the all-resident run (the bench's own digest check).
# Each run must exit 0 with finite logits (the bench exits 1 otherwise).
cmake_minimum_required(VERSION 3.24)

include("${CMAKE_CURRENT_LIST_DIR}/test_fail.cmake")  # fail(), finish()

function(check_finite json n_models)
  file(READ "${json}" j)
  string(JSON n LENGTH "${j}" models)
  if(NOT n EQUAL ${n_models})
    fail("${json}: ${n} models, expected ${n_models}")
    return()
  endif()
  math(EXPR last "${n_models} - 1")
  foreach(m RANGE ${last})
    string(JSON skipped ERROR_VARIABLE none GET "${j}" models ${m} skipped)
    if(NOT none)
      fail("${json}: model ${m} skipped: ${skipped}")
      continue()
    endif()
    string(JSON n_dec LENGTH "${j}" models ${m} decode)
    math(EXPR last_dec "${n_dec} - 1")
    foreach(d RANGE ${last_dec})
      string(JSON finite GET "${j}" models ${m} decode ${d} finite_logits)
      if(NOT finite STREQUAL "ON" AND NOT finite STREQUAL "true")
        fail("${json}: model ${m} decode ${d}: non-finite logits")
      endif()
    endforeach()
  endforeach()
endfunction()

set(json "${Q35_WORK_DIR}/bench_real_9b.json")
file(REMOVE "${json}")
execute_process(COMMAND "${Q35_CLI}" --bench --bench-model 9B --bench-layers 4 --bench-ctx 8 --bench-pp 16 -n 2
                        --bench-json "${json}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  fail("9B --bench exited with ${rc}: ${err}")
else()
  check_finite("${json}" 1)
  string(FIND "${out}" "model: Qwen3.5-9B (first 4 of 32 layers)" pos)
  if(pos EQUAL -1)
    fail("9B --bench: the table does not name the cut model:\n${out}")
  endif()
endif()

set(json "${Q35_WORK_DIR}/bench_real_35b.json")
file(REMOVE "${json}")
execute_process(COMMAND "${Q35_CLI}" --bench --bench-model 35B-A3B --bench-layers 4 --vram 4G,1200M --bench-ctx 0
                        --bench-pp 8,12 -n 3 --bench-json "${json}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                        ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  fail("35B-A3B --bench --vram exited with ${rc}: ${err}\n${out}")
else()
  check_finite("${json}" 2)
  file(READ "${json}" j)
  string(JSON s0 GET "${j}" models 0 expert_slots)
  string(JSON s1 GET "${j}" models 1 expert_slots)
  string(JSON hb GET "${j}" models 1 decode 0 host_bytes_per_token)
  if(NOT s0 EQUAL -1 OR NOT s1 GREATER 0 OR NOT s1 LESS 256 OR NOT hb GREATER 0)
    fail("35B-A3B --vram: slots ${s0} (4G: all resident) and ${s1} (1200M), host bytes per token ${hb}")
  endif()
  # pp8 (decode kernels through the index), pp12 (the grouped path, experts staged) and tg after ctx 0
  string(REGEX MATCHALL "bit-identical to the all-resident row" same "${out}")
  list(LENGTH same n_same)
  string(FIND "${out}" "DIFFER" differ)
  if(NOT n_same EQUAL 3 OR NOT differ EQUAL -1)
    fail("35B-A3B --vram: ${n_same} of 3 rows bit-identical to the all-resident run:\n${out}")
  endif()
endif()

finish("real-shape --bench")
