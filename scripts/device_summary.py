#!/usr/bin/env python3
"""Prints the short tables of a scripts/device_check.sh run from the JSON files in its log folder:
kernel benchmarks (bench.json), end to end (e2e.json), experts in host memory (e2e_vram.json) and
serving (server_bench.json, server_bench_fast.json). A missing or broken file is one line, not an error.
    python3 scripts/device_summary.py LOG_DIR
"""
import json
import os
import sys


def load(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception as e:  # a stage that did not run or broke off
        print(f"\nno {what}: {e}")
        return None


def kernels(data):
    print(f"\nkernel benchmarks (%copy: of the copy bandwidth measured in the same run; "
          f"{data.get('context', {}).get('host_name', '')}):")
    print(f"{'benchmark':60s} {'time_us':>10s} {'GB/s':>9s} {'%copy':>7s} {'TFLOPS':>7s}")
    for b in data.get("benchmarks", []):
        if b.get("error_occurred"):
            print(f"{b['name'][:60]:60s} skipped: {b.get('error_message', '')}")
            continue
        t = b.get("real_time", 0.0)
        unit = b.get("time_unit", "ns")
        us = t / 1000.0 if unit == "ns" else t * 1000.0 if unit == "ms" else t
        gbps = b.get('GB/s', b.get('expert_GB/s', 0.0))  # bm_moe_indexed: the experts' bytes
        print(f"{b['name'][:60]:60s} {us:10.2f} {gbps:9.1f} {b.get('%copy_bw', 0.0):7.1f} "
              f"{b.get('TFLOPS', 0.0):7.1f}")


def e2e(data):
    print(f"\nend to end ({data.get('device')}, copy {data.get('copy_gbps')} GB/s, tg{data.get('tg_tokens')}, "
          f"greedy, decode step as run):")
    print(f"{'model':26s} {'pp tok/s':>18s} {'ctx':>6s} {'tg tok/s':>9s} {'GB/tok':>7s} {'%roof':>6s}  "
          f"step us: eager fwd / as run / gap")
    for m in data.get("models", []):
        if "skipped" in m:
            print(f"{m['name'][:26]:26s} skipped: {m['skipped']}")
            continue
        pp = " ".join(f"{p['tokens']}:{p['tok_s']:.0f}" for p in m.get("prefill", []))
        for i, d in enumerate(m.get("decode", [])):
            s = d["step_ms"]
            print(f"{(m['name'] if i == 0 else '')[:26]:26s} {(pp if i == 0 else '')[:18]:>18s} {d['context']:6d} "
                  f"{d['tok_s']:9.1f} {d['bytes_per_token'] / 1e9:7.3f} {d['roofline_pct'] or 0:6.1f}  "
                  f"{1e3 * s['eager_forward']:.0f} / {1e3 * s['graph_forward']:.0f} / {1e3 * s['eager_minus_graph']:.0f}")


def vram(data):
    print(f"\nexperts in host memory (zero-copy read {data.get('zero_copy_gbps')} GB/s, "
          f"copy {data.get('copy_gbps')} GB/s):")
    print(f"{'model':26s} {'budget GiB':>10s} {'slots':>9s} {'pp tok/s':>9s} {'tg tok/s':>9s} {'hit %':>6s} "
          f"{'host MB/tok':>11s} {'%roof':>6s}  logits")
    # the all-resident row of each model, per context and prompt length: a budget row must have its
    # logits digests (after the tg run; after each prompt, the staged path)
    rows = [m for m in data.get("models", []) if "skipped" not in m and m.get("expert_slots", -1) < 0]
    resident = {(m["name"], d["context"]): d.get("logits_digest") for m in rows for d in m.get("decode", [])}
    resident_pp = {(m["name"], p["tokens"]): p.get("logits_digest") for m in rows for p in m.get("prefill", [])}
    for m in data.get("models", []):
        gib = m.get("vram_budget", 0) / 2**30
        if "skipped" in m:
            print(f"{m['name'][:26]:26s} {gib:10.1f} skipped: {m['skipped'][:200]}")
            continue
        pp = m["prefill"][0]["tok_s"] if m.get("prefill") else 0
        pp_differ = [p["tokens"] for p in m.get("prefill", [])
                     if resident_pp.get((m["name"], p["tokens"]), p.get("logits_digest")) != p.get("logits_digest")]
        for d in m.get("decode", []):
            ref = resident.get((m["name"], d["context"]))
            same = ("resident" if m["expert_slots"] < 0 else "no resident row" if ref is None
                    else "= resident" if ref == d.get("logits_digest") else "DIFFER")
            if m["expert_slots"] >= 0 and pp_differ:
                same += ", prompts DIFFER (pp" + ",".join(str(t) for t in pp_differ) + ")"
            print(f"{m['name'][:26]:26s} {gib:10.1f} {m['expert_slots']:4d}/{m['n_experts']:<4d} {pp:9.0f} "
                  f"{d['tok_s']:9.1f} {100 * d.get('expert_hit_rate', 1):6.1f} "
                  f"{d.get('host_bytes_per_token', 0) / 1e6:11.1f} {d['roofline_pct'] or 0:6.1f}  {same}")


def server(data, label=""):
    print(f"\nserving ({data.get('model')}{label}):")
    print(f"{'scenario':26s} {'req':>5s} {'conc':>4s} {'err':>3s} {'req/s':>8s} {'tok/s':>9s} "
          f"{'TTFT p50':>9s} {'p95 ms':>8s} {'ITL p50':>8s} {'p95 ms':>7s}")
    for r in data.get("reports", []):
        print(f"{r['scenario'][:26]:26s} {r['requests']:5d} {r['concurrency']:4d} {r['errors']:3d} "
              f"{r['requests_per_s']:8.2f} {r['output_tokens_per_s']:9.1f} {r['ttft_p50_ms']:9.1f} "
              f"{r['ttft_p95_ms']:8.1f} {r['itl_p50_ms']:8.1f} {r['itl_p95_ms']:7.1f}")
        if "ttft_warm_over_cold" in r:
            print(f"{'':26s} TTFT reused / cold: {100 * r['ttft_warm_over_cold']:.1f} % (goal <= 10 %)")
        if "tokens_per_s_over_single" in r:
            print(f"{'':26s} aggregate tok/s over one at a time: {r['tokens_per_s_over_single']:.1f}x (goal >= 10x)")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    logs = sys.argv[1]
    for name, what, show in (("bench.json", "kernel benchmark results", kernels),
                             ("e2e.json", "end-to-end results", e2e),
                             ("e2e_vram.json", "--vram results", vram),
                             ("server_bench.json", "serving results", server),
                             ("server_bench_gemm.json", "serving results, batch invariance on the GEMM",
                              lambda d: server(d, ", --batch-invariant-gemm")),
                             ("server_bench_fast.json", "serving results without batch invariance",
                              lambda d: server(d, ", --no-batch-invariant"))):
        data = load(os.path.join(logs, name), what)
        if data is not None:
            try:
                show(data)
            except (KeyError, TypeError, ValueError) as e:
                print(f"\n{what}: unexpected content in {name}: {e!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
