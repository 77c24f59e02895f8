# CLI checks for qwen35_generate, run as `cmake -DQ35_CLI=... -DQ35_TEST_DATA_DIR=... -DQ35_WORK_DIR=...
# -DQ35_CHECK=tokenize_refs|bad_usage -P test_cli.cmake`.
#   tokenize_refs: every prompt of every ref_*.json (llama.cpp's ids) and of tokenizer_corpus.json through
#                  --tokenize, compared with the ids; then the ids through --detokenize, compared with the prompt.
#   bad_usage:     bad command lines, bad files and ids exit 1 with one error line; never a signal.
#   perplexity:    --perplexity against llama.cpp's logits of the fixtures, chunking and its errors.
#   generate:      greedy generation against the fixtures' continuations, --dump-logits rows, -n 0, a full
#                  context, the prompt cache round trip, conversation mode, and the error cases.
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

# expect_fail(<regex> args...): exit 1 and exactly one line on stderr matching regex
function(expect_fail regex)
  run(out err rc ${ARGN})
  string(REGEX MATCHALL "\n" lines "${err}")
  list(LENGTH lines n_lines)
  if(NOT rc STREQUAL "1" OR NOT n_lines EQUAL 1 OR NOT err MATCHES "${regex}")
    fail("'${ARGN}': expected exit 1 and one line matching '${regex}', got rc=${rc} stderr '${err}'")
  endif()
  set(failures ${failures} PARENT_SCOPE)
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

  run(out err rc -m "${Q35_TEST_DATA_DIR}/tiny_var_dense_q8.gguf" --info)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "\nmodel: none of the known models" OR NOT out MATCHES "embeddings: tied")
    fail("--info on a shape no known model has: rc=${rc} stdout '${out}' stderr '${err}'")
  endif()
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
  # expect_usage(args...): a bad command line, pointing to --help
  function(expect_usage)
    expect_fail("error: .*\\(see --help\\)" ${ARGN})
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
  expect_fail("not_a_gguf.gguf" -m "${Q35_WORK_DIR}/not_a_gguf.gguf" --info)
  expect_fail("not_a_gguf.gguf" -m "${Q35_WORK_DIR}/not_a_gguf.gguf" --tokenize hi)
  file(WRITE "${Q35_WORK_DIR}/empty.gguf" "")
  expect_fail("empty.gguf" -m "${Q35_WORK_DIR}/empty.gguf" --info)
  expect_fail("token id 600 .*512 tokens" -m "${model}" --detokenize "1 600")

  run(out err rc --help)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "usage: ")
    fail("--help: rc=${rc} stdout '${out}'")
  endif()
elseif(Q35_CHECK STREQUAL "generate")
  # ids_of(<out> <stderr> <what>): the ids printed by --print-token-ids as "[<what> ids: ...]"
  function(ids_of out_var err what)
    string(REGEX MATCH "\\[${what} ids:([ 0-9]*)\\]" m "${err}")
    string(STRIP "${CMAKE_MATCH_1}" ids)
    set(${out_var} "${ids}" PARENT_SCOPE)
  endfunction()

  file(READ "${Q35_TEST_DATA_DIR}/ref_tiny_dense_q4km_deq.json" json)
  string(JSON prompt GET "${json}" cases 0 prompt)
  string(JSON n_prompt LENGTH "${json}" cases 0 tokens)
  set(greedy "")
  foreach(j RANGE 15)
    string(JSON id GET "${json}" cases 0 greedy ${j})
    string(APPEND greedy " ${id}")
  endforeach()
  string(STRIP "${greedy}" greedy)

  # greedy continuation and logits rows
  set(dump "${Q35_WORK_DIR}/logits.f32")
  execute_process(COMMAND "${Q35_CLI}" -m "${model}" -p "${prompt}" -n 16 --temp 0 -ctk f32 -ctv f32 --seed 1
                          --print-token-ids --dump-logits "${dump}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  ids_of(got "${err}" generated)
  if(NOT rc EQUAL 0 OR NOT got STREQUAL greedy OR NOT out MATCHES "^The quick brown fox")
    fail("greedy generation: rc=${rc} ids '${got}' (expected '${greedy}') stdout '${out}' stderr '${err}'")
  endif()
  if(NOT err MATCHES "prompt eval +=.*tokens per second" OR NOT err MATCHES "generation +=.*tokens per second"
     OR NOT err MATCHES "memory: weights")
    fail("greedy generation: no timings on stderr: '${err}'")
  endif()
  file(SIZE "${dump}" dump_bytes)
  math(EXPR want_bytes "(${n_prompt} + 16) * 512 * 4")
  if(NOT dump_bytes EQUAL want_bytes)
    fail("--dump-logits wrote ${dump_bytes} bytes, expected ${want_bytes} (one row per prompt token and per generated token)")
  endif()

  # -n 0 evaluates the prompt only; sampling with a seed is repeatable
  run(out err rc -m "${model}" -p "hello" -n 0)
  if(NOT rc EQUAL 0 OR NOT out STREQUAL "hello")
    fail("-n 0: rc=${rc} stdout '${out}' stderr '${err}'")
  endif()
  run(out1 err1 rc1 -m "${model}" -p "hello" -n 12 --temp 1.0 --top-k 0 --top-p 0.9 --min-p 0.02 --repeat-penalty 1.1
      --seed 7 --print-token-ids)
  run(out2 err2 rc2 -m "${model}" -p "hello" -n 12 --temp 1.0 --top-k 0 --top-p 0.9 --min-p 0.02 --repeat-penalty 1.1
      --seed 7 --print-token-ids)
  ids_of(a "${err1}" generated)
  ids_of(b "${err2}" generated)
  if(NOT rc1 EQUAL 0 OR NOT rc2 EQUAL 0 OR NOT a STREQUAL b OR a STREQUAL "")
    fail("same seed, same tokens: '${a}' vs '${b}' (rc ${rc1} ${rc2}, stderr '${err1}')")
  endif()

  # a presence penalty far beyond the logits' spread: at +100 greedy never picks a token of the last 8
  # (prompt included), at -100 it always does
  foreach(pp -100 100)
    run(out err rc -m "${model}" -p "${prompt}" -n 24 --temp 0 --presence-penalty ${pp} --frequency-penalty 0.5
        --repeat-last-n 8 --print-token-ids)
    ids_of(p_ids "${err}" prompt)
    ids_of(g_ids "${err}" generated)
    if(NOT rc EQUAL 0 OR g_ids STREQUAL "")
      fail("--presence-penalty ${pp}: rc=${rc} stderr '${err}'")
    endif()
    string(REPLACE " " ";" hist "${p_ids}")
    string(REPLACE " " ";" gen "${g_ids}")
    list(LENGTH gen n_gen)
    set(repeats 0)
    foreach(id IN LISTS gen)
      list(LENGTH hist n)
      set(from 0)
      if(n GREATER 8)
        math(EXPR from "${n} - 8")
      endif()
      list(SUBLIST hist ${from} 8 window)
      if(id IN_LIST window)
        math(EXPR repeats "${repeats} + 1")
      endif()
      list(APPEND hist ${id})
    endforeach()
    if((pp EQUAL 100 AND NOT repeats EQUAL 0) OR (pp EQUAL -100 AND NOT repeats EQUAL n_gen))
      fail("--presence-penalty ${pp}: ${repeats} of ${n_gen} generated tokens repeat one of the last 8: ${p_ids} | ${g_ids}")
    endif()
  endforeach()

  # --logit-bias: +100 makes one token the only choice, greedy or sampled; -inf bans the greedy first
  # token, so the first token changes (the bias reaches the sampler, before the filters)
  run(out err rc -m "${model}" -p "${prompt}" -n 4 --temp 0 --print-token-ids)
  ids_of(plain_ids "${err}" generated)
  string(REGEX MATCH "^[0-9]+" first "${plain_ids}")
  run(out err rc -m "${model}" -p "${prompt}" -n 4 --temp 0 --print-token-ids -l ${first}-inf)
  ids_of(banned_ids "${err}" generated)
  string(REGEX MATCH "^[0-9]+" banned_first "${banned_ids}")
  if(NOT rc EQUAL 0 OR first STREQUAL "" OR banned_first STREQUAL "" OR banned_first STREQUAL first)
    fail("--logit-bias ${first}-inf: rc=${rc}, first tokens '${plain_ids}' then '${banned_ids}' (stderr '${err}')")
  endif()
  foreach(temp 0 0.8)
    run(out err rc -m "${model}" -p "${prompt}" -n 5 --temp ${temp} --seed 3 --print-token-ids --logit-bias 321+60
        --logit-bias 321+40)
    ids_of(forced_ids "${err}" generated)
    if(NOT rc EQUAL 0 OR NOT forced_ids STREQUAL "321 321 321 321 321")
      fail("--logit-bias 321+60 321+40 --temp ${temp}: rc=${rc}, generated '${forced_ids}' (stderr '${err}')")
    endif()
  endforeach()

  # --ignore-eos: <|im_end|> at +100 ends the generation at once; with --ignore-eos it is never drawn
  # (its -inf comes after the user's biases), so -n tokens come
  run(out err rc -m "${model}" --tokenize "<|im_end|>")
  string(STRIP "${out}" im_end)
  run(out err rc -m "${model}" -p "${prompt}" -n 4 --temp 0 --print-token-ids -l ${im_end}+100)
  ids_of(ended "${err}" generated)
  run(out err rc -m "${model}" -p "${prompt}" -n 4 --temp 0.8 --seed 5 --print-token-ids -l ${im_end}+100 --ignore-eos)
  ids_of(kept_on "${err}" generated)
  string(REPLACE " " ";" kept_list "${kept_on}")
  list(LENGTH kept_list n_kept)
  list(FIND kept_list "${im_end}" at)
  if(NOT ended STREQUAL "${im_end}" OR NOT n_kept EQUAL 4 OR NOT at EQUAL -1)
    fail("--ignore-eos: '<|im_end|>' = '${im_end}', generated '${ended}' without and '${kept_on}' with (stderr '${err}')")
  endif()

  # a full context stops generation with a message, keeps the text, exits 0
  run(out err rc -m "${model}" -p "${prompt}" -c 14 -n -1 --temp 0)
  if(NOT rc EQUAL 0 OR NOT err MATCHES "context full" OR NOT out MATCHES "^The quick brown fox")
    fail("full context: rc=${rc} stdout '${out}' stderr '${err}'")
  endif()

  # prompt cache: saved after the prompt, resumed by the same prompt and by one that extends it, with
  # the same continuation as without the cache
  set(cache "${Q35_WORK_DIR}/prompt.cache")
  file(REMOVE "${cache}")
  foreach(pass first again)
    execute_process(COMMAND "${Q35_CLI}" -m "${model}" -p "${prompt}" -n 16 --temp 0 -ctk f32 -ctv f32
                            --print-token-ids --prompt-cache "${cache}"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    ids_of(got "${err}" generated)
    if(NOT rc EQUAL 0 OR NOT got STREQUAL greedy OR NOT err MATCHES "saved the checkpoint at position ${n_prompt}")
      fail("prompt cache (${pass}): rc=${rc} ids '${got}' stderr '${err}'")
    endif()
    if(pass STREQUAL "again" AND NOT err MATCHES "resumed from the checkpoint at position ${n_prompt}")
      fail("prompt cache: the second run did not resume: '${err}'")
    endif()
  endforeach()
  execute_process(COMMAND "${Q35_CLI}" -m "${model}" -p "${prompt} And more." -n 2 --temp 0 --prompt-cache "${cache}"
                          -ctk f32 -ctv f32
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT err MATCHES "resumed from the checkpoint at position ${n_prompt} of")
    fail("prompt cache, extended prompt: rc=${rc} stderr '${err}'")
  endif()
  run(out err rc -m "${model}" -p "Another prompt" -n 2 --temp 0 --prompt-cache "${cache}" -ctk f32 -ctv f32)
  if(NOT rc EQUAL 0 OR NOT err MATCHES "does not start with the cached")
    fail("prompt cache, other prompt: rc=${rc} stderr '${err}'")
  endif()

  # conversation mode: the template, user turns from stdin
  file(WRITE "${Q35_WORK_DIR}/turns.txt" "And then?\n")
  execute_process(COMMAND "${Q35_CLI}" -m "${model}" -cnv -sys "Be brief." -p "Hello" -n 6 --temp 0 --no-think
                          --print-token-ids INPUT_FILE "${Q35_WORK_DIR}/turns.txt"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  # the first prompt is the rendered template: <|im_start|>system ... <|im_start|>assistant <think> </think>
  if(NOT rc EQUAL 0 OR NOT err MATCHES "\\[prompt ids: 508 ")
    fail("conversation: rc=${rc} stdout '${out}' stderr '${err}'")
  endif()
  string(REGEX MATCHALL "prompt ids:" turns "${err}")
  list(LENGTH turns n_turns)
  if(NOT n_turns EQUAL 2)
    fail("conversation: expected 2 turns, saw ${n_turns}: '${err}'")
  endif()

  # errors: one line, exit 1
  expect_fail("-n must be in -1" -m "${model}" -p hi -n -2)
  expect_fail("--temp expects a number" -m "${model}" -p hi --temp warm)
  expect_fail("--top-p must be in" -m "${model}" -p hi --top-p 1.5)
  expect_fail("--min-p must be in" -m "${model}" -p hi --min-p -0.1)
  expect_fail("--top-k must be in" -m "${model}" -p hi --top-k -1)
  expect_fail("--presence-penalty must be in" -m "${model}" -p hi --presence-penalty 1e9)
  expect_fail("--frequency-penalty expects a number" -m "${model}" -p hi --frequency-penalty lots)
  expect_fail("--repeat-last-n must be in" -m "${model}" -p hi --repeat-last-n 5000)
  expect_fail("--logit-bias expects TOKEN_ID\\+BIAS or TOKEN_ID-BIAS" -m "${model}" -p hi --logit-bias 15)
  expect_fail("-l expects TOKEN_ID\\+BIAS" -m "${model}" -p hi -l 15+inf)
  expect_fail("-l '15-200': the bias is beyond 100" -m "${model}" -p hi -l 15-200)
  expect_fail("--logit-bias: token id 99999999 is outside the model's vocabulary of [0-9]+ tokens" -m "${model}"
              -p hi -l 99999999+1)
  expect_fail("-ctk expects f32, f16 or bf16" -m "${model}" -p hi -ctk q8_0)
  expect_fail("-c must be in" -m "${model}" -p hi -c 0)
  expect_fail("-c 100000 exceeds the model's context length 4096" -m "${model}" -p hi -c 100000)
  expect_fail("the prompt has [0-9]+ tokens, which is more than the context of 4 tokens" -m "${model}" -p "${prompt}" -c 4)
  expect_fail("--dump-logits: cannot write" -m "${model}" -p hi --dump-logits "${Q35_WORK_DIR}/no/such/dir/x.f32")
  expect_fail("--prompt-cache: cannot write" -m "${model}" -p hi -n 1 --prompt-cache "${Q35_WORK_DIR}/no/such/dir/c")
  expect_fail("-f: cannot read" -m "${model}" -f "${Q35_WORK_DIR}/no_such_prompt.txt")
  expect_fail("-sys is used by the chat template" -m "${model}" -p hi -sys "x")
  expect_fail("does not exist" -m "${Q35_WORK_DIR}/no_such_model.gguf" -p hi)
  file(WRITE "${Q35_WORK_DIR}/bad.cache" "garbage garbage garbage garbage garbage garbage garbage garbage garbage")
  expect_fail("bad.cache: not a q35 prompt cache" -m "${model}" -p hi -n 1 --prompt-cache "${Q35_WORK_DIR}/bad.cache")
elseif(Q35_CHECK STREQUAL "perplexity")
  # --perplexity against llama.cpp: ref_tiny_{dense,moe}.json case 1 (31 tokens) as one chunk of -c 31
  # (tokens 16..30 scored). The expected PPL is exp(mean NLL) of llama.cpp's logits rows 15..29 of the
  # F32 models, taken through a float64 log-softmax (tests/data/README.md's files; computed once):
  # 236584.283081 (dense), 343019.846010 (MoE). Our log-probabilities agree within ~1.4e-5 on these
  # models (test_decoder_score.cpp), so the PPL within 1e-4 relative: the bounds below.
  file(READ "${Q35_TEST_DATA_DIR}/ref_tiny_dense.json" json)
  string(JSON text GET "${json}" cases 1 prompt)
  set(text_file "${Q35_WORK_DIR}/ppl_case1.txt")
  file(WRITE "${text_file}" "${text}")
  foreach(m "tiny_dense.gguf;236560.62;236607.94" "tiny_moe.gguf;342985.54;343054.15")
    list(GET m 0 gguf)
    list(GET m 1 lo)
    list(GET m 2 hi)
    run(out err rc -m "${Q35_TEST_DATA_DIR}/${gguf}" -f "${text_file}" --perplexity -c 31 -ctk f32 -ctv f32)
    if(NOT rc STREQUAL "0" OR NOT out MATCHES "1 chunk\\(s\\) of 31 tokens, scoring the last 15 of each\n\\[1\\][0-9.]+,\nFinal estimate: PPL = ([0-9.]+) \\+/- [0-9.]+\n")
      fail("--perplexity on ${gguf}: rc=${rc} stdout '${out}' stderr '${err}'")
    else()
      set(ppl "${CMAKE_MATCH_1}")
      if(ppl LESS lo OR ppl GREATER hi)
        fail("--perplexity on ${gguf}: PPL ${ppl} outside [${lo}, ${hi}] (llama.cpp's logits)")
      endif()
    endif()
  endforeach()
  # chunks: 31 tokens make 3 of -c 10 (the last token left out); --chunks 2 takes the first two, which
  # report what the first two of all three reported; the final estimate is the last running one
  run(out err rc -m "${Q35_TEST_DATA_DIR}/tiny_moe.gguf" -f "${text_file}" --perplexity -c 10)
  if(NOT out MATCHES "3 chunk\\(s\\) of 10 tokens, scoring the last 4 of each\n(\\[1\\][0-9.]+,\\[2\\][0-9.]+,)\\[3\\]([0-9.]+),\nFinal estimate: PPL = ([0-9.]+) ")
    fail("--perplexity -c 10: '${out}' '${err}'")
  else()
    set(two "${CMAKE_MATCH_1}")
    if(NOT CMAKE_MATCH_2 STREQUAL CMAKE_MATCH_3)
      fail("--perplexity: the final estimate ${CMAKE_MATCH_3} is not the last running one ${CMAKE_MATCH_2}")
    endif()
    run(out err rc -m "${Q35_TEST_DATA_DIR}/tiny_moe.gguf" -f "${text_file}" --perplexity -c 10 --chunks 2)
    string(FIND "${out}" "2 chunk(s) of 10 tokens" at)
    string(FIND "${out}" "${two}\nFinal" at2)
    if(at LESS 0 OR at2 LESS 0)
      fail("--perplexity --chunks 2: '${out}', expected the first two of '${two}'")
    endif()
  endif()
  set(model "${Q35_TEST_DATA_DIR}/tiny_moe.gguf")
  expect_fail("--perplexity: the text has 31 tokens, fewer than one chunk of -c 64 tokens" -m "${model}" -f "${text_file}" --perplexity -c 64)
  expect_fail("--perplexity needs a text" -m "${model}" --perplexity --info)
  expect_fail("--perplexity measures a text: it cannot be combined with -cnv" -m "${model}" -f "${text_file}" --perplexity -cnv)
  expect_fail("--chunks counts the chunks of --perplexity" -m "${model}" -f "${text_file}" --chunks 2)
  expect_fail("--chunks" -m "${model}" -f "${text_file}" --perplexity --chunks 0)
  expect_fail("--perplexity cannot be combined with --prompt-cache" -m "${model}" -f "${text_file}" --perplexity --prompt-cache "${Q35_WORK_DIR}/c")
else()
  message(FATAL_ERROR "unknown Q35_CHECK '${Q35_CHECK}'")
endif()

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} CLI check(s) failed")
endif()
