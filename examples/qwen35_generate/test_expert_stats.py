#!/usr/bin/env python3
"""--expert-stats / --expert-heatmap end to end on the sim: qwen35_generate on the tiny MoE fixtures (a
prompt with generation, and a two-turn -cnv chat), the JSON's per-layer totals against the tokens the
session fed (from --print-token-ids) times k, the SVG parsed as XML with one cell per layer and expert;
bad paths and a model without MoE layers exit 1 with one line; --moe-adaptive-k: the JSON's adaptive_k block,
each layer's total between tokens x the smallest and the largest k value, and its bad values; --expert-cache:
the same greedy text as all resident, each layer's cache block (hits + misses + staged = total), bad values;
--vram: below the floor (one line, both numbers), at the floor (0 slots, the same text), roomy (all resident);
--expert-plan: a trace of the resident session places slots where a uniform plan has none, the same text; its errors;
--expert-window 1: a lower floor with the same text; --expert-rebalance 0 (no promotions) and 1 (promotions): the same text.

usage: test_expert_stats.py QWEN35_GENERATE TEST_DATA_DIR WORK_DIR
"""
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

cli, data, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
failures = []
SVG = "{http://www.w3.org/2000/svg}"


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, file=sys.stderr)


def run(args, stdin=None):
    return subprocess.run([cli] + args, input=stdin, capture_output=True, text=True, errors="replace", timeout=300)


def fed_tokens(stderr):
    """Prompt and generated ids of every turn (--print-token-ids); all are fed to the decoder unless the
    last generated id of a turn ended it (then the turn has fewer than -n ids)."""
    n = 0
    for kind, ids in re.findall(r"\[(prompt|generated) ids:([^\]]*)\]", stderr):
        n += len(ids.split())
    return n


def check_session(name, model, args, n_moe_layers, stdin=None, adaptive=None, cache_slots=None, policy="frequency"):
    """adaptive: (entropy thresholds, k values) given with --moe-adaptive-k / --moe-adaptive-entropy."""
    js, svg = os.path.join(work, name + ".json"), os.path.join(work, name + ".svg")
    for f in (js, svg):
        if os.path.exists(f):
            os.remove(f)
    r = run(["-m", model] + args + ["--temp", "0", "--print-token-ids", "--expert-stats", js, "--expert-heatmap", svg],
            stdin)
    if r.returncode != 0:
        return fail(f"{name}: rc={r.returncode} stderr {r.stderr!r}")
    tokens = fed_tokens(r.stderr)
    with open(js) as f:
        j = json.load(f)
    k, n_e = j["n_experts_used"], j["n_experts"]
    if j["tokens"] != tokens:
        fail(f"{name}: JSON tokens {j['tokens']}, the session fed {tokens}")
    if len(j["layers"]) != n_moe_layers:
        fail(f"{name}: {len(j['layers'])} layers in the JSON, the model has {n_moe_layers} MoE layers")
    want_adaptive = None if adaptive is None else {"entropy_below": adaptive[0], "k_values": adaptive[1]}
    if j["adaptive_k"] != want_adaptive:
        fail(f"{name}: adaptive_k {j['adaptive_k']}, expected {want_adaptive}")
    for l in j["layers"]:
        c = l["tokens_per_expert"]
        if abs(l["experts_per_token"] - l["total"] / tokens) > 1e-9:
            fail(f"{name}: layer {l['layer']}: experts_per_token {l['experts_per_token']}, total / tokens = "
                 f"{l['total'] / tokens}")
        if adaptive is not None:  # between the smallest and the largest k value per token
            lo, hi = min(adaptive[1]), max(adaptive[1])
            if len(c) != n_e or sum(c) != l["total"] or not tokens * lo <= l["total"] <= tokens * hi:
                fail(f"{name}: layer {l['layer']}: {len(c)} counts summing to {sum(c)}, total {l['total']}, "
                     f"expected {n_e} counts summing to between {tokens} x {lo} and x {hi}")
        elif len(c) != n_e or sum(c) != l["total"] or l["total"] != tokens * k:
            fail(f"{name}: layer {l['layer']}: {len(c)} counts summing to {sum(c)}, total {l['total']}, "
                 f"expected {n_e} counts summing to tokens x k = {tokens} x {k}")
        cache = l["cache"]
        if cache_slots is None:
            if cache != {"policy": "all resident", "hits": l["total"], "misses": 0, "bytes_from_host": 0}:
                fail(f"{name}: layer {l['layer']}: cache block {cache}")
        elif (cache["hits"] + cache["misses"] + cache["staged"] != l["total"] or
              cache["bytes_from_host"] <= 0 or not cache["policy"].startswith(policy) or
              abs(cache["hit_rate"] - cache["hits"] / max(1, cache["hits"] + cache["misses"])) > 1e-9):
            fail(f"{name}: layer {l['layer']}: cache block {cache} (total {l['total']})")
    if cache_slots is not None and j.get("cache_slots") != cache_slots:
        fail(f"{name}: cache_slots {j.get('cache_slots')}, expected {cache_slots}")
    j["_stdout"] = r.stdout
    root = ET.parse(svg).getroot()  # raises on malformed XML
    if root.tag != SVG + "svg":
        fail(f"{name}: the SVG's root is {root.tag}")
    cells = [e for e in root.iter(SVG + "rect") if e.get("class") == "cell"]
    if len(cells) != n_moe_layers * n_e:
        fail(f"{name}: {len(cells)} cells, expected {n_moe_layers} layers x {n_e} experts")
    text = " ".join("".join(t.itertext()) for t in root.iter(SVG + "text"))
    if f"{tokens} tokens" not in text or j["model"] not in text:
        fail(f"{name}: the title does not name the model and the token count: {text[:200]!r}")
    rates = [t for t in root.iter(SVG + "text") if t.get("class") == "hit-rate"]
    if len(rates) != n_moe_layers:
        fail(f"{name}: {len(rates)} hit rates, expected {n_moe_layers}")
    return j


moe = os.path.join(data, "tiny_moe_q4km.gguf")
inter = os.path.join(data, "tiny_interleaved_q4km.gguf")
dense = os.path.join(data, "tiny_dense_q4km.gguf")

j = check_session("moe", moe, ["-p", "Hello", "-n", "4"], 4)
if j and (j["n_experts"], j["n_experts_used"], [l["layer"] for l in j["layers"]]) != (8, 2, [0, 1, 2, 3]):
    fail(f"moe: n_experts {j['n_experts']}, k {j['n_experts_used']}, layers {[l['layer'] for l in j['layers']]}")
# a prompt longer than 8 tokens (the grouped MoE path) in two batches, and a chat of two turns
check_session("moe_batches", moe, ["-p", "The quick brown fox jumps over the lazy dog again", "-b", "9", "-n", "3"], 4)
check_session("interleaved_chat", inter, ["-cnv", "-p", "Hello", "-n", "3", "--no-think"], 2, stdin="And then?\n")

# adaptive top-k: 1 expert below 1.0 nats, else 2 (the fixture's k; ln 8 = 2.08 is the most)
check_session("moe_adaptive", moe,
              ["-p", "The quick brown fox jumps over the lazy dog again", "-n", "4", "--moe-adaptive-k", "1,1,2",
               "--moe-adaptive-entropy", "1,1.8"], 4, adaptive=([1.0, 1.8], [1, 1, 2]))

# experts in host memory behind 2 device slots per layer (a prompt chunk of more than 8 tokens is staged):
# the same greedy text as all resident, and a cache block per layer
long_prompt = ["-p", "The quick brown fox jumps over the lazy dog again", "-n", "6", "-b", "12"]
resident = check_session("moe_resident", moe, long_prompt, 4)
cached = check_session("moe_cache", moe, long_prompt + ["--expert-cache", "2"], 4, cache_slots=2)
if resident and cached and resident["_stdout"] != cached["_stdout"]:
    fail(f"--expert-cache 2 changed the text: {cached['_stdout']!r} vs {resident['_stdout']!r}")
lru = check_session("moe_cache_lru", moe, long_prompt + ["--expert-cache", "2", "--expert-policy", "lru"], 4,
                    cache_slots=2, policy="lru")
if resident and lru and resident["_stdout"] != lru["_stdout"]:
    fail(f"--expert-policy lru changed the text: {lru['_stdout']!r} vs {resident['_stdout']!r}")
# a three-turn chat (the cache's slots and scores carry across turns) with 1 slot per layer
chat = ["-cnv", "-p", "Hello", "-n", "4", "--no-think", "-b", "12"]
chat_in = "And then what happened next?\nWhy?\n"
chat_resident = check_session("inter_chat_resident", inter, chat, 2, stdin=chat_in)
chat_cached = check_session("inter_chat_cache", inter, chat + ["--expert-cache", "1"], 2, stdin=chat_in, cache_slots=1)
if chat_resident and chat_cached and chat_resident["_stdout"] != chat_cached["_stdout"]:
    fail(f"-cnv with --expert-cache 1 changed the text: {chat_cached['_stdout']!r} vs {chat_resident['_stdout']!r}")

# --vram: a budget below what the model needs with every routed expert in host memory is one line naming
# both byte counts; exactly that much gives 0 slots (every expert read from host memory) and the resident
# text; a budget that holds everything keeps every expert on the device
stats_args = ["--temp", "0", "--expert-stats", os.path.join(work, "vram.json")]
r = run(["-m", moe] + long_prompt + stats_args + ["--vram", "1M"])
need = re.search(r"budget of 1\.00 MiB \(1048576 bytes\) is below the [0-9.]+ MiB \((\d+) bytes\)", r.stderr)
if r.returncode != 1 or len(r.stderr.splitlines()) != 1 or not need:
    fail(f"--vram 1M: expected exit 1 and one line naming both numbers, got rc={r.returncode} {r.stderr!r}")
else:
    floor = check_session("moe_vram_floor", moe, long_prompt + ["--vram", need.group(1)], 4, cache_slots=0)
    if resident and floor and resident["_stdout"] != floor["_stdout"]:
        fail(f"--vram {need.group(1)} changed the text: {floor['_stdout']!r} vs {resident['_stdout']!r}")
    r = run(["-m", moe] + long_prompt + stats_args + ["--vram", str(int(need.group(1)) - 1)])
    if r.returncode != 1 or "is below the" not in r.stderr:
        fail(f"--vram one byte below the floor: rc={r.returncode} {r.stderr!r}")
# --expert-plan: the resident session's trace places the slots. Under the floor plus 360 kB (a third of a
# slot in every layer, so no uniform slot fits) the layers whose traced experts save the most get slots;
# the text stays the resident one and each layer's cache block reports its own slots
if resident and need:
    budget = str(int(need.group(1)) + 360000)
    uniform = check_session("moe_plan_uniform", moe, long_prompt + ["--vram", budget], 4, cache_slots=0)
    plan_args = long_prompt + ["--vram", budget, "--expert-plan", os.path.join(work, "moe_resident.json")]
    traced = check_session("moe_plan_traced", moe, plan_args, 4, cache_slots=0)
    if traced:
        slots = [l["cache"]["slots"] for l in traced["layers"]]
        if sum(slots) < 2 or not all(l["cache"]["slots"] == 0 for l in uniform["layers"]):
            fail(f"--expert-plan: slots per layer {slots}, expected 2 or more where the uniform plan has none")
        if traced["_stdout"] != resident["_stdout"]:
            fail(f"--expert-plan changed the text: {traced['_stdout']!r} vs {resident['_stdout']!r}")
        r = run(["-m", moe] + plan_args)
        if "traced" not in r.stderr or ",".join(map(str, slots)) + " of 8 experts" not in r.stderr:
            fail(f"--expert-plan: the plan line does not list the traced slots {slots}: {r.stderr!r}")
# --expert-window 1: a staging area of one expert instead of all 8 lowers the floor; at that floor the
# text stays the resident one, and without the flag the same budget is refused
if resident and need:
    r = run(["-m", moe] + long_prompt + stats_args + ["--vram", "1M", "--expert-window", "1"])
    need1 = re.search(r"is below the [0-9.]+ MiB \((\d+) bytes\)", r.stderr)
    if r.returncode != 1 or not need1 or not int(need1.group(1)) < int(need.group(1)):
        fail(f"--expert-window 1: expected a floor below {need.group(1)} bytes, got rc={r.returncode} {r.stderr!r}")
    else:
        w1 = check_session("moe_window1", moe, long_prompt + ["--vram", need1.group(1), "--expert-window", "1"], 4,
                           cache_slots=0)
        if w1 and w1["_stdout"] != resident["_stdout"]:
            fail(f"--expert-window 1 changed the text: {w1['_stdout']!r} vs {resident['_stdout']!r}")
        r = run(["-m", moe] + long_prompt + ["--vram", need1.group(1)])
        if r.returncode != 1 or "is below the" not in r.stderr:
            fail(f"--vram {need1.group(1)} without --expert-window 1: rc={r.returncode} {r.stderr!r}")
# --expert-rebalance 0: the slots keep their first experts (no promotions); 1: a rebalance every step
# (promotions); both keep the resident text
if resident:
    still = check_session("moe_rebalance0", moe, long_prompt + ["--expert-cache", "2", "--expert-rebalance", "0"], 4,
                          cache_slots=2)
    if still and (any(l["cache"]["promotions"] != 0 for l in still["layers"]) or
                  "never rebalanced" not in still["layers"][0]["cache"]["policy"] or
                  still["_stdout"] != resident["_stdout"]):
        fail(f"--expert-rebalance 0: promotions {[l['cache']['promotions'] for l in still['layers']]}, policy "
             f"{still['layers'][0]['cache']['policy']!r}, text {still['_stdout']!r}")
    busy = check_session("moe_rebalance1", moe, long_prompt + ["--expert-cache", "2", "--expert-rebalance", "1"], 4,
                         cache_slots=2)
    if busy and (sum(l["cache"]["promotions"] for l in busy["layers"]) == 0 or
                 "rebalanced every 1 steps" not in busy["layers"][0]["cache"]["policy"] or
                 busy["_stdout"] != resident["_stdout"]):
        fail(f"--expert-rebalance 1: promotions {[l['cache']['promotions'] for l in busy['layers']]}, text "
             f"{busy['_stdout']!r}")
roomy = check_session("moe_vram_all", moe, long_prompt + ["--vram", "1G"], 4)
if resident and roomy and resident["_stdout"] != roomy["_stdout"]:
    fail("--vram 1G changed the text")


def expect_fail(pattern, args):
    r = run(args)
    lines = r.stderr.splitlines()
    if r.returncode != 1 or len(lines) != 1 or not re.search(pattern, r.stderr):
        fail(f"{args}: expected exit 1 and one line matching {pattern!r}, got rc={r.returncode} stderr {r.stderr!r}")


missing = os.path.join(work, "no", "such", "dir", "x.json")
expect_fail(r"--expert-stats: empty path", ["-m", moe, "-p", "hi", "--expert-stats", ""])
expect_fail(r"--expert-heatmap: empty path", ["-m", moe, "-p", "hi", "--expert-heatmap", ""])
expect_fail(r"--expert-stats: cannot write '" + re.escape(missing) + "'", ["-m", moe, "-p", "hi", "--expert-stats", missing])
expect_fail(r"--expert-heatmap: '.*' is a directory", ["-m", moe, "-p", "hi", "--expert-heatmap", work])
expect_fail(r"--expert-stats: .*tiny_dense_q4km.gguf has no MoE layers",
            ["-m", dense, "-p", "hi", "--expert-stats", os.path.join(work, "dense.json")])
expect_fail(r"--expert-stats traces a generation session", ["-m", moe, "--info", "--expert-stats", os.path.join(work, "i.json")])
expect_fail(r"--expert-cache must be in 0\.\.65536", ["-m", moe, "-p", "hi", "--expert-cache", "-1"])
expect_fail(r"--expert-cache expects an integer", ["-m", moe, "-p", "hi", "--expert-cache", "two"])
expect_fail(r"--expert-cache: .*tiny_dense_q4km.gguf has no MoE layers", ["-m", dense, "-p", "hi", "--expert-cache", "1"])
expect_fail(r"--expert-cache applies to generation", ["-m", moe, "--info", "--expert-cache", "1"])
expect_fail(r"--expert-policy expects frequency or lru, got 'mru'", ["-m", moe, "-p", "hi", "--expert-policy", "mru"])
expect_fail(r"--expert-policy: .*tiny_dense_q4km.gguf has no MoE layers", ["-m", dense, "-p", "hi", "--expert-policy", "lru"])
expect_fail(r"--expert-window must be in 1\.\.65536", ["-m", moe, "-p", "hi", "--expert-window", "0"])
expect_fail(r"--expert-rebalance must be in 0\.\.1048576", ["-m", moe, "-p", "hi", "--expert-rebalance", "-1"])
expect_fail(r"--expert-window: .*tiny_dense_q4km.gguf has no MoE layers", ["-m", dense, "-p", "hi", "--expert-window", "4"])
expect_fail(r"--expert-rebalance: .*tiny_dense_q4km.gguf has no MoE layers",
            ["-m", dense, "-p", "hi", "--expert-rebalance", "4"])
expect_fail(r"--expert-window applies to generation", ["-m", moe, "--info", "--expert-window", "4"])
expect_fail(r"--vram expects a size in bytes .*got '0'", ["-m", moe, "-p", "hi", "--vram", "0"])
expect_fail(r"--vram expects a size in bytes .*got '24X'", ["-m", moe, "-p", "hi", "--vram", "24X"])
expect_fail(r"--vram applies to generation", ["-m", moe, "--info", "--vram", "24G"])
expect_fail(r"--vram 1\.00 MiB: memory plan: the model \(no MoE layers.*needs .* bytes\) of device memory, above the budget",
            ["-m", dense, "-p", "hi", "--vram", "1M"])
inter_trace = os.path.join(work, "interleaved_chat.json")
expect_fail(r"--expert-plan " + re.escape(inter_trace) + ": traced with n_experts = 16, the model has 8",
            ["-m", moe, "-p", "hi", "--expert-plan", inter_trace])
expect_fail(r"--expert-plan " + re.escape(missing) + ": cannot be read", ["-m", moe, "-p", "hi", "--expert-plan", missing])
expect_fail(r"--expert-plan: empty path", ["-m", moe, "-p", "hi", "--expert-plan", ""])
expect_fail(r"--expert-plan applies to generation", ["-m", moe, "--info", "--expert-plan", inter_trace])
expect_fail(r"--expert-plan: .*tiny_dense_q4km.gguf has no MoE layers", ["-m", dense, "-p", "hi", "--expert-plan", inter_trace])
expect_fail(r"--moe-adaptive-k: k value 3 exceeds the model's qwen35moe.expert_used_count = 2",
            ["-m", moe, "-p", "hi", "--moe-adaptive-k", "1,2,3"])
expect_fail(r"--moe-adaptive-k: .*tiny_dense_q4km.gguf has no MoE layers", ["-m", dense, "-p", "hi", "--moe-adaptive-k", "1,1,1"])
expect_fail(r"--moe-adaptive-k expects three k values", ["-m", moe, "-p", "hi", "--moe-adaptive-k", "1,2"])
expect_fail(r"--moe-adaptive-k must be in 1\.\.", ["-m", moe, "-p", "hi", "--moe-adaptive-k", "0,1,2"])
expect_fail(r"--moe-adaptive-entropy thresholds must ascend", ["-m", moe, "-p", "hi", "--moe-adaptive-k", "1,1,2",
                                                               "--moe-adaptive-entropy", "2,1"])
expect_fail(r"--moe-adaptive-entropy expects a number", ["-m", moe, "-p", "hi", "--moe-adaptive-k", "1,1,2",
                                                         "--moe-adaptive-entropy", "a,1"])
expect_fail(r"--moe-adaptive-entropy sets the thresholds of --moe-adaptive-k",
            ["-m", moe, "-p", "hi", "--moe-adaptive-entropy", "1,2"])

if failures:
    sys.exit(f"{len(failures)} expert-stats check(s) failed")
print("expert stats: all checks passed")
