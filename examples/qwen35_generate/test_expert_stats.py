#!/usr/bin/env python3
"""--expert-stats / --expert-heatmap end to end on the sim: qwen35_generate on the tiny MoE fixtures (a
prompt with generation, and a two-turn -cnv chat), the JSON's per-layer totals against the tokens the
session fed (from --print-token-ids) times k, the SVG parsed as XML with one cell per layer and expert;
bad paths and a model without MoE layers exit 1 with one line.

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


def check_session(name, model, args, n_moe_layers, stdin=None):
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
    for l in j["layers"]:
        c = l["tokens_per_expert"]
        if len(c) != n_e or sum(c) != l["total"] or l["total"] != tokens * k:
            fail(f"{name}: layer {l['layer']}: {len(c)} counts summing to {sum(c)}, total {l['total']}, "
                 f"expected {n_e} counts summing to tokens x k = {tokens} x {k}")
        cache = l["cache"]
        if cache != {"policy": "all resident", "hits": l["total"], "misses": 0, "bytes_from_host": 0}:
            fail(f"{name}: layer {l['layer']}: cache block {cache}")
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

if failures:
    sys.exit(f"{len(failures)} expert-stats check(s) failed")
print("expert stats: all checks passed")
