#!/usr/bin/env python3
"""Load benchmark for an OpenAI-compatible server (qwen35_server, llama-server, vLLM, ...).

Reproduces the three service scenarios of issue 21 against a running server, streaming every request
with the official `openai` client (asyncio), and reports per scenario: requests/s, output tokens/s,
P50/P95 time to first token (TTFT: request sent -> first streamed text) and inter-token latency (ITL:
gaps between streamed chunks after the first).

  A  short questions: --requests-a (default 1000) chat requests, --concurrency-a (default 64) in flight
  B  ~1024-token documents to summarize, 8 in flight (--requests-b, default 32)
  C  ~4096-token contexts, 4 in flight (--requests-c, default 16)
  P  prefix reuse (not in the default set): a ~2048-token system prompt new to the server, asked once
     (cold), then --requests-p (default 8) other questions after the same system prompt one at a time
     (warm); reports both TTFTs and warm/cold (issue 21's goal: <= 10 %)
  D  decode scaling (not in the default set): short questions one at a time (--requests-d, default 4),
     then --concurrency-d (default 32) at once; reports the aggregate output tokens/s of the second over
     the first (issue 21's goal at 32 sequences: >= 10x)

Document lengths are aimed at with filler text and reported as the server counted them (usage).
--scale shrinks every length and count (e.g. 0.02 for a smoke run on the sim's tiny models).

  scripts/bench_server.py --base-url http://127.0.0.1:8080/v1 [--api-key KEY] [--scenarios ABC]
                          [--ignore-eos] [--json out.json]
"""
import argparse
import asyncio
import json
import random
import statistics
import sys
import time

import openai

WORDS = ("the of and to in is that for it as with was on be by this are from at or an which have not "
         "system memory model token layer cache page batch request server kernel weight value state").split()


def filler(n_words, seed):
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


IGNORE_EOS = False  # --ignore-eos: every request generates max_tokens (same output lengths run to run)


async def one_request(client, model, messages, max_tokens, seed):
    """Streams one chat completion: (ttft_s, [itl_s], completion_tokens, prompt_tokens, error)."""
    t0 = time.perf_counter()
    first, last, gaps, usage = None, None, [], None
    try:
        stream = await client.chat.completions.create(
            model=model, messages=messages, max_tokens=max_tokens, temperature=0.7, seed=seed, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True} if IGNORE_EOS else None)
        async for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for c in chunk.choices:
                text = (c.delta.content or "") + (getattr(c.delta, "reasoning_content", None) or "")
                if not text:
                    continue
                now = time.perf_counter()
                if first is None:
                    first = now
                else:
                    gaps.append(now - last)
                last = now
    except openai.APIError as e:
        return None, [], 0, 0, str(e)
    ttft = (first - t0) if first is not None else None
    return ttft, gaps, usage.completion_tokens if usage else 0, usage.prompt_tokens if usage else 0, None


async def scenario(client, model, name, n_requests, concurrency, make_messages, max_tokens):
    sem = asyncio.Semaphore(concurrency)

    async def run(i):
        async with sem:
            return await one_request(client, model, make_messages(i), max_tokens, 1000 + i)

    t0 = time.perf_counter()
    results = await asyncio.gather(*(run(i) for i in range(n_requests)))
    wall = time.perf_counter() - t0
    ok = [r for r in results if r[4] is None]
    ttft = [r[0] for r in ok if r[0] is not None]
    itl = [g for r in ok for g in r[1]]
    out_tokens = sum(r[2] for r in ok)
    report = {
        "scenario": name, "requests": n_requests, "concurrency": concurrency, "errors": len(results) - len(ok),
        "wall_s": wall, "requests_per_s": len(ok) / wall, "output_tokens_per_s": out_tokens / wall,
        "prompt_tokens_mean": statistics.mean(r[3] for r in ok) if ok else 0,
        "completion_tokens_mean": out_tokens / len(ok) if ok else 0,
        "ttft_p50_ms": 1e3 * percentile(ttft, 50), "ttft_p95_ms": 1e3 * percentile(ttft, 95),
        "itl_p50_ms": 1e3 * percentile(itl, 50), "itl_p95_ms": 1e3 * percentile(itl, 95),
    }
    if len(ok) < len(results):
        report["first_error"] = next(r[4] for r in results if r[4] is not None)
    return report


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--model", default=None, help="default: the server's first model")
    ap.add_argument("--scenarios", default="ABC")
    ap.add_argument("--requests-a", type=int, default=1000)
    ap.add_argument("--concurrency-a", type=int, default=64)
    ap.add_argument("--requests-b", type=int, default=32)
    ap.add_argument("--requests-c", type=int, default=16)
    ap.add_argument("--requests-p", type=int, default=8)
    ap.add_argument("--requests-d", type=int, default=4)
    ap.add_argument("--concurrency-d", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--ignore-eos", action="store_true",
                    help="send ignore_eos (qwen35_server, llama-server, vLLM): outputs of exactly max_tokens")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies lengths and counts (smoke runs)")
    ap.add_argument("--json", default=None, help="write the reports here")
    a = ap.parse_args()
    global IGNORE_EOS
    IGNORE_EOS = a.ignore_eos
    if not 0 < a.scale <= 1:
        sys.exit("--scale must be in (0, 1]")

    def sc(n):
        return max(1, int(round(n * a.scale)))

    client = openai.AsyncOpenAI(base_url=a.base_url, api_key=a.api_key, max_retries=0, timeout=3600)
    model = a.model or (await client.models.list()).data[0].id
    max_tokens = sc(a.max_tokens)
    # ~0.75 words per token for English-like filler
    doc = {n: sc(int(n * 0.75)) for n in (1024, 4096)}
    plans = {
        "A": ("A: short questions", sc(a.requests_a), min(a.concurrency_a, sc(a.requests_a)),
              lambda i: [{"role": "user", "content": f"Question {i}: what is a {random.Random(i).choice(WORDS)}?"}]),
        "B": ("B: 1024-token documents", sc(a.requests_b), 8,
              lambda i: [{"role": "user", "content": "Summarize:\n" + filler(doc[1024], i)}]),
        "C": ("C: 4096-token contexts", sc(a.requests_c), 4,
              lambda i: [{"role": "user", "content": "Answer from this context:\n" + filler(doc[4096], i)}]),
    }
    # P: a system prompt no earlier run has sent (a random session number first), so the first is cold
    nonce = random.randrange(1 << 30)
    system = {"role": "system", "content": f"Session {nonce}. Use this reference:\n" + filler(sc(1536), nonce)}

    def ask_after_system(i):
        return [system, {"role": "user", "content": f"Question {i}: what is a {WORDS[i % len(WORDS)]}?"}]

    reports = []
    for key in a.scenarios:
        if key not in plans and key not in "PD":
            sys.exit(f"unknown scenario '{key}' (A, B, C, P, D)")
        if key == "P":
            cold = await scenario(client, model, "P: 2k system prompt, cold", 1, 1, ask_after_system, max_tokens)
            warm = await scenario(client, model, "P: same prompt, reused", sc(a.requests_p), 1,
                                  lambda i: ask_after_system(i + 1), max_tokens)
            warm["ttft_warm_over_cold"] = warm["ttft_p50_ms"] / cold["ttft_p50_ms"]
            new = [cold, warm]
        elif key == "D":
            short = plans["A"][3]
            one = await scenario(client, model, "D: one at a time", sc(a.requests_d), 1, short, max_tokens)
            many = await scenario(client, model, f"D: {a.concurrency_d} at once", a.concurrency_d, a.concurrency_d,
                                  lambda i: short(i + 10000), max_tokens)
            many["tokens_per_s_over_single"] = many["output_tokens_per_s"] / one["output_tokens_per_s"]
            new = [one, many]
        else:
            name, n, conc, make = plans[key]
            new = [await scenario(client, model, name, n, conc, make, max_tokens)]
        reports += new
        for r in new:
            print(f"{r['scenario']:<26} {r['requests']:>5} req x{r['concurrency']:<3} {r['errors']} err  "
                  f"{r['requests_per_s']:8.2f} req/s {r['output_tokens_per_s']:9.1f} tok/s  "
                  f"TTFT p50 {r['ttft_p50_ms']:8.1f} p95 {r['ttft_p95_ms']:8.1f} ms  "
                  f"ITL p50 {r['itl_p50_ms']:7.1f} p95 {r['itl_p95_ms']:7.1f} ms  "
                  f"(prompt ~{r['prompt_tokens_mean']:.0f} tok)", flush=True)
            if "ttft_warm_over_cold" in r:
                print(f"{'':<26} TTFT reused / cold: {100 * r['ttft_warm_over_cold']:.1f} %", flush=True)
            if "tokens_per_s_over_single" in r:
                print(f"{'':<26} aggregate tok/s over one at a time: {r['tokens_per_s_over_single']:.1f}x", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"base_url": a.base_url, "model": model, "reports": reports}, f, indent=1)
    return 0 if all(r["errors"] == 0 for r in reports) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
