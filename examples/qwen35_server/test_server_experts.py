#!/usr/bin/env python3
"""The server with the routed experts in host memory: qwen35_server on the tiny MoE fixture with
--expert-cache 2 --expert-policy lru --expert-rebalance 1 --expert-window 1 (and with --vram at the smallest
budget the plan accepts: 0 slots, every expert read from host memory) answers 4 concurrent greedy completions, prompts longer than 8 tokens among them (the staged
grouped path) and one-token decode steps of several sequences at once, with the same text as the server
with every expert on the device, and /metrics counts the expert cache's selections (tokens fed x k x layers);
a budget below that floor, or a bad --vram, stops it with one line; a traced workload (--expert-plan) places
slots under a budget where no uniform slot fits, with the same text. --bench-model tiny-moe serves a
synthetic model of that shape with the file's tokenizer (the load benchmark's model on a GPU): its requests
run to max_tokens; an unknown name is one line naming the known ones. --expert-stats / --expert-heatmap
write the served workload's trace when the server stops (k selections per layer for every token fed, as
/metrics counts them), and that trace is the --expert-plan of the traced run.

usage: test_server_experts.py SERVER_BINARY MOE_MODEL.gguf
"""
import concurrent.futures
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

binary, model = sys.argv[1:3]
failures = []
PROMPTS = ["The quick brown fox jumps over the lazy dog again and again", "Hello", "Once upon a time there was",
           "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12"]
BASE = ["-m", model, "--port", "0", "-np", "4", "-c", "512", "-b", "16", "--prefix-cache", "0"]


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def serve(extra):
    """Starts the server; returns (process, port, the lines it printed before listening)."""
    proc = subprocess.Popen([binary] + BASE + extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            return proc, int(m.group(1)), lines
    proc.wait()
    return None, None, lines


def completion(port, prompt):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", "/v1/completions", body=json.dumps({"prompt": prompt, "max_tokens": 10, "temperature": 0}),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    body = json.loads(r.read())
    conn.close()
    return body


def complete(port, prompt):
    return completion(port, prompt)["choices"][0]["text"]


def metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def check_metrics(extra, port, slots):
    """/metrics after the requests: the expert cache's selections (slot + host + staged) equal the tokens
    fed (prompts + generated ids but each request's last) x k (2) x MoE layers (4); host bytes > 0."""
    def selections(m):
        return sum(m.get(f'q35_expert_selections_total{{source="{s}"}}', 0) for s in ("slot", "host", "staged"))

    def fed_of(m):
        return m.get("q35_prompt_tokens_total", 0) + m.get("q35_generated_tokens_total", 0) - len(PROMPTS)

    # The record is refreshed when the scheduler runs out of work, which may come after the responses
    # (and an earlier refresh may be on show): wait up to 5 s for the expected total, then compare.
    m = metrics(port)
    for _ in range(50):
        total = selections(m)
        if total > 0 and (slots is None or total == fed_of(m) * 2 * 4):
            break
        time.sleep(0.1)
        m = metrics(port)
    if slots is None:
        fed_tokens.append(fed_of(m))
        if any(k.startswith("q35_expert") for k in m):
            fail(f"{extra}: every expert on the device, yet /metrics has expert lines")
        return
    fed = fed_of(m)
    fed_tokens.append(fed)
    if m.get("q35_expert_cache_slots") != slots or total != fed * 2 * 4:
        fail(f"{extra}: /metrics slots {m.get('q35_expert_cache_slots')} (want {slots}), selections {total} "
             f"(want {fed} tokens x 2 x 4)")
    if not m.get("q35_expert_host_bytes_total", 0) > 0:
        fail(f"{extra}: /metrics shows no bytes read from host memory")
    if not m.get("q35_generated_tokens_per_second", 0) > 0:
        fail(f"{extra}: /metrics tokens per second over the last 10 s is not positive right after generating")


def answers(extra, slots=None):
    proc, port, lines = serve(extra)
    if not proc:
        fail(f"{extra}: the server did not start: {''.join(lines)!r}")
        return None, lines
    try:
        with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as ex:
            texts = list(ex.map(lambda p: complete(port, p), PROMPTS))
        check_metrics(extra, port, slots)
        return texts, lines
    finally:
        proc.terminate()
        proc.wait(timeout=60)


fed_tokens = []  # tokens fed to the decoder by each answers() run, from /metrics
work = tempfile.mkdtemp()
trace, heatmap = os.path.join(work, "trace.json"), os.path.join(work, "trace.svg")
resident, lines = answers(["--expert-stats", trace, "--expert-heatmap", heatmap])
# the served workload's trace, written when the server stops: every layer routed k = 2 experts for each
# token fed, as many tokens as /metrics counted; the heat map has a cell per layer and expert
try:
    with open(trace) as f:
        t = json.load(f)
    totals = [sum(l["tokens_per_expert"]) for l in t["layers"]]
    if ([l["layer"] for l in t["layers"]], t["n_experts"], t["tokens"]) != ([0, 1, 2, 3], 8, fed_tokens[0]) or \
            totals != [2 * fed_tokens[0]] * 4:
        fail(f"--expert-stats: layers {[l['layer'] for l in t['layers']]}, tokens {t['tokens']} (fed "
             f"{fed_tokens[0]}), totals {totals}")
    svg = ET.parse(heatmap).getroot()
    cells = [e for e in svg.iter("{http://www.w3.org/2000/svg}rect") if e.get("class") == "cell"]
    if len(cells) != 4 * 8:
        fail(f"--expert-heatmap: {len(cells)} cells, expected 4 layers x 8 experts")
except (OSError, ValueError, KeyError, ET.ParseError) as e:
    fail(f"--expert-stats / --expert-heatmap: {e!r}")
# 2 slots under lru, rebalanced every step, prompts staged one expert at a time
cached, lines = answers(["--expert-cache", "2", "--expert-policy", "lru", "--expert-rebalance", "1", "--expert-window",
                         "1"], slots=2)
if not any("2 of 8 experts" in l for l in lines):
    fail(f"--expert-cache 2: no plan line naming 2 of 8 experts: {lines!r}")
if resident is not None and cached != resident:
    fail(f"--expert-cache 2 changed the answers: {cached!r} vs {resident!r}")

# the floor: the budget below it is refused with both numbers, exactly it gives 0 slots
r = subprocess.run([binary] + BASE + ["--vram", "1M"], capture_output=True, text=True, timeout=120)
need = re.search(r"below the [0-9.]+ MiB \((\d+) bytes\)", r.stderr)
if r.returncode == 0 or not need or len(r.stderr.strip().splitlines()) != 1:
    fail(f"--vram 1M: expected one line naming the floor, got rc={r.returncode} {r.stderr!r}")
else:
    floor, lines = answers(["--vram", need.group(1)], slots=0)
    if not any("0 of 8 experts" in l for l in lines):
        fail(f"--vram {need.group(1)}: no plan line naming 0 of 8 experts: {lines!r}")
    if resident is not None and floor != resident:
        fail(f"--vram at the floor changed the answers: {floor!r} vs {resident!r}")
    # a traced workload (--expert-plan, the --expert-stats JSON): under the floor plus 360 kB (no uniform
    # slot fits) the layers its counts favour get slots, and the answers stay the resident ones
    traced, lines = answers(["--vram", str(int(need.group(1)) + 360000), "--expert-plan", trace], slots=0)
    if not any("traced" in l for l in lines):
        fail(f"--expert-plan: no plan line with traced slots: {lines!r}")
    if resident is not None and traced != resident:
        fail(f"--expert-plan changed the answers: {traced!r} vs {resident!r}")
r = subprocess.run([binary] + BASE + ["--bench-model", "tiny-moe", "--expert-plan", "x.json"], capture_output=True,
                   text=True, timeout=60)
if r.returncode == 0 or "--expert-plan places a traced model file's experts, not --bench-model's" not in r.stderr:
    fail(f"--expert-plan with --bench-model: rc={r.returncode} {r.stderr!r}")
r = subprocess.run([binary] + BASE + ["--expert-stats", os.path.join(work, "no", "dir", "t.json")], capture_output=True,
                   text=True, timeout=60)
if r.returncode == 0 or "--expert-stats: cannot write" not in r.stderr:
    fail(f"--expert-stats into a missing directory: rc={r.returncode} {r.stderr!r}")
r = subprocess.run([binary] + BASE + ["--expert-window", "0"], capture_output=True, text=True, timeout=60)
if r.returncode == 0 or "--expert-window: 0 is outside 1..65536" not in r.stderr:
    fail(f"--expert-window 0: rc={r.returncode} {r.stderr!r}")
r = subprocess.run([binary] + BASE + ["--vram", "lots"], capture_output=True, text=True, timeout=60)
if r.returncode == 0 or "--vram: 'lots' is not a size" not in r.stderr:
    fail(f"--vram lots: rc={r.returncode} {r.stderr!r}")

# a synthetic model of the fixture's shape, with its tokenizer: no end-of-generation ids, so max_tokens
proc, port, lines = serve(["--bench-model", "tiny-moe"])
if not proc:
    fail(f"--bench-model tiny-moe: the server did not start: {''.join(lines)!r}")
else:
    try:
        if not any("synthetic" in l for l in lines):
            fail(f"--bench-model tiny-moe: the start line does not say the model is synthetic: {lines!r}")
        body = completion(port, PROMPTS[0])
        got = (body.get("model"), body["usage"]["completion_tokens"], body["choices"][0]["finish_reason"])
        if got != ("tiny-moe", 10, "length"):
            fail(f"--bench-model tiny-moe: (model, completion_tokens, finish_reason) = {got}, want ('tiny-moe', 10, 'length')")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
r = subprocess.run([binary] + BASE + ["--bench-model", "70B"], capture_output=True, text=True, timeout=60)
if r.returncode == 0 or "--bench-model: '70B' is not a synthetic model (9B, 35B-A3B" not in r.stderr:
    fail(f"--bench-model 70B: rc={r.returncode} {r.stderr!r}")

shutil.rmtree(work, ignore_errors=True)
print("server experts: " + ("all checks passed" if not failures else f"{len(failures)} check(s) failed"))
sys.exit(1 if failures else 0)
