# --bench on the sim, run as `cmake -DQ35_CLI=... -DQ35_TEST_DATA_DIR=... -DQ35_WORK_DIR=... -P test_bench.cmake`:
# the synthetic tiny dense and MoE models and the tiny fixture file go through the whole benchmark path;
# every run must exit 0, print the table with its sim label, and write JSON that parses, with a
# decode row per context, finite logits and a positive step split. Bad --bench flags exit 1.
cmake_minimum_required(VERSION 3.24)

include("${CMAKE_CURRENT_LIST_DIR}/test_fail.cmake")  # fail(), finish()

# Synthetic models (the sim defaults: tiny-dense and tiny-moe, contexts 0 and 48, pp32, tg4).
set(json "${Q35_WORK_DIR}/bench_sim_test.json")
file(REMOVE "${json}")
execute_process(COMMAND "${Q35_CLI}" --bench --bench-json "${json}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  fail("--bench exited with ${rc}: ${err}")
endif()
foreach(want "q35 --bench" "mean nothing for GPUs" "tiny-dense (test fixture)" "tiny-moe (test fixture)" "step @ ctx 48")
  string(FIND "${out}" "${want}" pos)
  if(pos EQUAL -1)
    fail("--bench output lacks '${want}':\n${out}")
  endif()
endforeach()
if(NOT EXISTS "${json}")
  fail("--bench did not write ${json}")
else()
  file(READ "${json}" j)
  string(JSON backend GET "${j}" backend)
  string(JSON n_models LENGTH "${j}" models)
  if(NOT backend STREQUAL "sim" OR NOT n_models EQUAL 2)
    fail("JSON: backend '${backend}', ${n_models} models (expected sim, 2)")
  endif()
  foreach(m 0 1)
    string(JSON n_dec LENGTH "${j}" models ${m} decode)
    string(JSON n_pp LENGTH "${j}" models ${m} prefill)
    if(NOT n_dec EQUAL 2 OR NOT n_pp EQUAL 1)
      fail("JSON model ${m}: ${n_dec} decode rows, ${n_pp} prefill rows (expected 2, 1)")
    endif()
    foreach(d 0 1)
      string(JSON finite GET "${j}" models ${m} decode ${d} finite_logits)
      string(JSON fwd GET "${j}" models ${m} decode ${d} step_ms eager_forward)
      string(JSON bpt GET "${j}" models ${m} decode ${d} bytes_per_token)
      if(NOT finite STREQUAL "ON" AND NOT finite STREQUAL "true")
        fail("JSON model ${m} decode ${d}: non-finite logits")
      endif()
      if(NOT fwd GREATER 0 OR NOT bpt GREATER 0)
        fail("JSON model ${m} decode ${d}: eager forward ${fwd} ms, ${bpt} bytes per token")
      endif()
    endforeach()
  endforeach()
  string(JSON whole_moe_bytes GET "${j}" models 1 weight_bytes)  # against --bench-layers below
  string(JSON moe_ms GET "${j}" models 1 decode 0 step_ms moe_ffn)
  string(JSON attn_ms GET "${j}" models 0 decode 0 step_ms attention_layers)
  if(NOT moe_ms GREATER 0 OR NOT attn_ms GREATER 0)
    fail("JSON: the step split has no MoE (${moe_ms}) or attention (${attn_ms}) time")
  endif()
endif()

# A file (-m), one context, custom lengths.
set(json2 "${Q35_WORK_DIR}/bench_sim_file.json")
execute_process(COMMAND "${Q35_CLI}" --bench -m "${Q35_TEST_DATA_DIR}/tiny_moe_q4km.gguf" --bench-ctx 16
                        --bench-pp 8 -n 2 --bench-json "${json2}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  fail("--bench -m exited with ${rc}: ${err}")
else()
  file(READ "${json2}" j)
  string(JSON source GET "${j}" models 0 source)
  string(JSON ctx GET "${j}" models 0 decode 0 context)
  string(JSON tg GET "${j}" tg_tokens)
  if(NOT source MATCHES "tiny_moe_q4km.gguf$" OR NOT ctx EQUAL 16 OR NOT tg EQUAL 2)
    fail("--bench -m JSON: source '${source}', context ${ctx}, tg ${tg}")
  endif()
endif()

# --bench-layers: the synthetic tiny MoE model cut to its first 2 of 4 layers runs, under its name, with
# fewer weight bytes than the whole model above; a cut past the model's
# layers is skipped, naming both counts.
set(json4 "${Q35_WORK_DIR}/bench_sim_layers.json")
execute_process(COMMAND "${Q35_CLI}" --bench --bench-model tiny-moe --bench-model tiny-dense --bench-layers 2
                        --bench-ctx 0 --bench-pp 8 -n 2 --bench-json "${json4}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                        ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  fail("--bench --bench-layers 2 exited with ${rc}: ${err}")
else()
  file(READ "${json4}" j4)
  string(JSON name GET "${j4}" models 0 name)
  string(JSON cut_bytes GET "${j4}" models 0 weight_bytes)
  string(JSON finite GET "${j4}" models 0 decode 0 finite_logits)
  if(NOT name STREQUAL "tiny-moe (test fixture) (first 2 of 4 layers)" OR NOT cut_bytes LESS whole_moe_bytes
     OR NOT cut_bytes GREATER 0 OR NOT finite)
    fail("--bench-layers 2 JSON: name '${name}', ${cut_bytes} weight bytes (whole: ${whole_moe_bytes}), finite ${finite}")
  endif()
  string(FIND "${out}" "model: tiny-dense (test fixture) (first 2 of 4 layers)" pos)
  if(pos EQUAL -1)
    fail("--bench-layers 2: the table does not name the cut model:\n${out}")
  endif()
endif()
execute_process(COMMAND "${Q35_CLI}" --bench --bench-model tiny-moe --bench-layers 5 --bench-json "${json4}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${out}" "skipped (--bench-layers: tiny-moe (test fixture) has 4 layers: it cannot be cut to 5)" pos)
if(NOT rc EQUAL 0 OR pos EQUAL -1)
  fail("--bench-layers 5: rc ${rc}, output ${out}")
endif()

# Bad flags: one error line, exit 1.
# (--vram: a bad size in a list, an empty list, a list outside --bench)
foreach(args "--bench;--bench-ctx;1,x" "--bench;--bench-pp;0" "--bench;--bench-model;tiny-moe;-m;${Q35_TEST_DATA_DIR}/tiny_moe_q4km.gguf"
             "--bench;--vram;24G,x" "--bench;--vram;," "-m;${Q35_TEST_DATA_DIR}/tiny_moe_q4km.gguf;-p;hi;--vram;1G,2G"
             "--bench;--bench-layers;0" "--bench;-m;${Q35_TEST_DATA_DIR}/tiny_moe_q4km.gguf;--bench-layers;2"
             "-m;${Q35_TEST_DATA_DIR}/tiny_moe_q4km.gguf;-p;hi;--bench-layers;2")
  execute_process(COMMAND "${Q35_CLI}" ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 1 OR NOT err MATCHES "error:")
    fail("'${args}' should exit 1 with an error line, got ${rc}: ${err}")
  endif()
endforeach()
# An unknown synthetic model is reported as skipped, not run.
execute_process(COMMAND "${Q35_CLI}" --bench --bench-model nonesuch --bench-json "${Q35_WORK_DIR}/bench_skip.json"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${out}" "skipped (no such synthetic model" pos)
if(NOT rc EQUAL 0 OR pos EQUAL -1)
  fail("--bench-model nonesuch: rc ${rc}, output ${out}")
endif()

# --vram budgets: one row per budget. 6.5M holds the tiny MoE model's non-expert part and a slot per
# layer (its experts in host memory: a hit rate and host bytes per token); 1G holds everything (no
# expert fields); 200K is below the non-expert part (skipped, naming both numbers). The same with a
# file (-m) and with a fixed --expert-cache. The 20-token prompt takes the grouped path (its experts
# staged), the 8-token one the decode kernels (reading through the index).
set(json3 "${Q35_WORK_DIR}/bench_sim_vram.json")
execute_process(COMMAND "${Q35_CLI}" --bench --bench-model tiny-moe --vram 6.5M,1G,200K --bench-ctx 0 --bench-pp 8,20 -n 24
                        --bench-json "${json3}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  fail("--bench --vram exited with ${rc}: ${err}")
else()
  file(READ "${json3}" j)
  string(JSON n_models LENGTH "${j}" models)
  string(JSON s0 GET "${j}" models 0 expert_slots)
  string(JSON b0 GET "${j}" models 0 vram_budget)
  string(JSON host0 GET "${j}" models 0 host_expert_bytes)
  string(JSON hit ERROR_VARIABLE no_hit GET "${j}" models 0 decode 0 expert_hit_rate)
  string(JSON hb GET "${j}" models 0 decode 0 host_bytes_per_token)
  string(JSON s1 GET "${j}" models 1 expert_slots)
  string(JSON hit1 ERROR_VARIABLE no_hit1 GET "${j}" models 1 decode 0 expert_hit_rate)
  string(JSON skip2 GET "${j}" models 2 skipped)
  string(JSON b2 GET "${j}" models 2 vram_budget)  # a skipped row still names its budget
  if(NOT n_models EQUAL 3 OR NOT s0 GREATER 0 OR NOT s0 LESS 8 OR NOT b0 EQUAL 6815744 OR NOT host0 GREATER 0)
    fail("--vram JSON: ${n_models} models, slots ${s0}, budget ${b0}, host bytes ${host0}")
  endif()
  if(no_hit OR hit LESS 0 OR hit GREATER 1 OR NOT hb GREATER 0)
    fail("--vram JSON: hit rate '${hit}' (${no_hit}), host bytes per token '${hb}'")
  endif()
  if(NOT s1 EQUAL -1 OR NOT no_hit1)
    fail("--vram 1G: slots ${s1}, hit rate '${hit1}' (every expert should be on the device)")
  endif()
  if(NOT skip2 MATCHES "below the .* of device memory" OR NOT b2 EQUAL 204800)
    fail("--vram 200K: skipped '${skip2}', budget ${b2}")
  endif()
  string(FIND "${out}" "per MoE layer on the device" pos)
  if(pos EQUAL -1)
    fail("--bench --vram: the table has no expert line:\n${out}")
  endif()
  # the 6.5M row (experts in host memory, promotions over 24 steps) against the 1G row (all resident):
  # the same decode inputs, so the same logits bit for bit, digest included in the JSON
  string(JSON dig0 GET "${j}" models 0 decode 0 logits_digest)
  string(JSON dig1 GET "${j}" models 1 decode 0 logits_digest)
  string(FIND "${out}" "@ 6.50 MiB, ctx 0: logits after tg bit-identical to the all-resident row @ 1.00 GiB" pos)
  if(pos EQUAL -1 OR NOT dig0 STREQUAL dig1 OR NOT dig0 MATCHES "^[0-9a-f]+$")
    fail("--bench --vram: host-resident logits against all-resident: digests '${dig0}', '${dig1}':\n${out}")
  endif()
  # ... and after each prompt
  foreach(k 0 1)
    string(JSON n GET "${j}" models 0 prefill ${k} tokens)
    string(JSON pd0 GET "${j}" models 0 prefill ${k} logits_digest)
    string(JSON pd1 GET "${j}" models 1 prefill ${k} logits_digest)
    string(FIND "${out}" "@ 6.50 MiB, pp${n}: logits after the prompt bit-identical to the all-resident row @ 1.00 GiB"
           pos)
    if(pos EQUAL -1 OR NOT pd0 STREQUAL pd1 OR NOT pd0 MATCHES "^[0-9a-f]+$" OR pd0 STREQUAL dig0)
      fail("--bench --vram: pp${n} host-resident logits against all-resident: '${pd0}', '${pd1}':\n${out}")
    endif()
  endforeach()
endif()
execute_process(COMMAND "${Q35_CLI}" --bench -m "${Q35_TEST_DATA_DIR}/tiny_moe_q4km.gguf" --expert-cache 2 --bench-ctx 0
                        --bench-pp 8 -n 4 --bench-json "${json3}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  fail("--bench -m --expert-cache 2 exited with ${rc}: ${err}")
else()
  file(READ "${json3}" j)
  string(JSON s0 GET "${j}" models 0 expert_slots)
  string(JSON hit GET "${j}" models 0 decode 0 expert_hit_rate)
  if(NOT s0 EQUAL 2 OR hit LESS 0 OR hit GREATER 1)
    fail("--bench -m --expert-cache 2: slots ${s0}, hit rate ${hit}")
  endif()
endif()

finish("--bench")
