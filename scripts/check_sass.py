#!/usr/bin/env python3
"""Static evidence for the GEMV engine from SASS: per gemv_kernel and MoE decode kernel instance (sm_90 by default), the
issued instructions per weight in the hot loop, the 16-byte loads in flight per lane, registers,
local memory and theoretical occupancy. Exits 1 when a 1-token Q4_K, Q6_K or Q8_0 integer-path
instance (gemv_kernel, moe_gate_up_kernel, moe_down_kernel) is over its instruction budget, or when
any of them spills or touches local memory.

usage: check_sass.py BINARY [--arch sm_90] [--cuobjdump PATH] [--all]

How it counts (see docs/benchmarks.md):
- hot loop: the backward branch (BRA to a lower address) whose body [target, branch] holds the most
  IDP.2A (dp2a; integer path) or FFMA (float path) instructions; its static instruction count is what one
  trip issues (the body is straight-line apart from the per-token `t < n_tok` exits).
- weights per trip: integer path 2 * IDP.2A / NTokens (each is two multiply-adds of one token);
  float path FFMA / NTokens.
- loads in flight: walking the loop body in order, the most 16-byte units of global loads (an LDG.128
  is one, an LDG.64 half, an LDG.32 a quarter) whose destination registers have not yet been read by
  a later instruction.
- occupancy (sm_90: 64K registers, 2048 threads, 32 blocks per SM; registers allocated per warp in
  units of 256): resident warps / 64.
Budget: <= 1.5 issued instructions per Q4_K weight (4.5 bits), others in proportion to their bits
per weight: Q6_K 1.5 * 6.5625 / 4.5, Q8_0 1.5 * 8.5 / 4.5. Q6_K items of 8- or 4-byte loads (rows of
1024 n / 512 n weights, only that aligned) have that budget plus the weight loads their width adds
(narrow_load_extra: +0.051 / +0.154 per weight); the rest of the item is the same code.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

BITS = {"q4_k": 4.5, "q5_k": 5.5, "q6_k": 6.5625, "q8_0": 8.5, "q4_0": 4.5}
BUDGET_Q4K = 1.5
ENFORCED = ("q4_k", "q6_k", "q8_0")
INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
FUNC = re.compile(r"Function : (\S+)")
RES = re.compile(r"Function (\S+):\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")
REG = re.compile(r"\bR(\d+)\b")
# the last argument: the width of the integer path's loads (its item; Q6_K: 16, 8 or 4)
GEMV = re.compile(
    r"gemv_kernel<q35::quant::(\w+)_format, [^>]*>, (\d+), \(q35::ops::epilogue\)(\d), (true|false), (true|false), (\d+)>")
# The MoE decode kernels stream their experts through the same engine (one token per pair).
MOE = re.compile(r"(moe_gate_up_kernel|moe_down_kernel)<q35::quant::(\w+)_format, (true|false), ")
EPILOGUES = ["store", "residual", "swiglu"]
# The tensor-core prompt GEMMs: kernels/gemm_i8.hpp (GGUF integer formats, IMMA) and
# kernels/gemm_mma_float.hpp (F32 / F16 / BF16 weights, HMMA): format, epilogue and rows (dense, or
# the MoE grouped GEMM's gate_up / down, kernels/gemm_rows.hpp).
ROWS = r"(?:, \(q35::kernels::gemm_rows\)(\d))?"
# the int8 GEMM's token tile (kernels::gemm_i8_policy): 64, or 32 / 16 for dense calls of few tokens
I8_TILE = r"(?:, q35::kernels::gemm_i8_policy<(\d+)> )?"
TENSOR_CORE = [
    ("gemm_i8", re.compile(r"gemm_i8_kernel<q35::quant::(\w+)_format, \(q35::ops::epilogue\)(\d)" + ROWS + I8_TILE),
     "IMMA"),
    ("gemm_mma_float", re.compile(r"gemm_mma_float_kernel<q35::quant::(\w+)_format, \(q35::ops::epilogue\)(\d)" + ROWS),
     "HMMA"),
]
GEMM_ROWS = ["dense", "moe_gate_up", "moe_down"]
# The chunked Gated DeltaNet kernels (kernels/gdn_chunk.hpp, gdn_chunk_state.hpp): their products
# run through ops::mma_split_product (3 bf16 planes per fp32 operand, 6 HMMA per 16 columns), a loop
# per product inside the chunk loop, so the innermost HMMA loop is what is counted; staging (the
# split of each operand into planes) is outside it (docs/gdn.md estimates it per mma).
GDN_TC = re.compile(r"(gdn_chunk_kernel|gdn_chunk_state_kernel)<(\d+), \d+>")
GDN_THREADS = 256
# measured sm_80 / sm_90: 1.44-2.33 (gdn_chunk), 1.83-2.67 (gdn_chunk_state), rounded up
GDN_BUDGET = {"gdn_chunk": 3.0, "gdn_chunk_state": 3.0}
# Issued instructions per issued m16n8k16-equivalent mma in the hot loop (IMMA.16832 and HMMA.16816
# count one, IMMA.16816 and HMMA.1688 half), every epilogue: regression budgets, the measured sm_80 /
# sm_90 values rounded up (docs/benchmarks.md, "Tensor-core GEMMs", has the derivation). gemm_i8
# needs 5 full-rate instructions per output and 32-element group (2 FADD + 1 FFMA for the exact
# float of 256 S_hi + S_lo, then the weight and activation scales), i.e. 10 per IMMA pair of
# 4 outputs per lane, before fragment loads and staging; Q6_K's 16-element groups double that (its
# rolled group loop is what is counted). The split float kernels issue 2 (F16) or 3 (BF16) mma
# per product, 6 for F32.
TC_BUDGET = {("gemm_i8", "q4_k"): 18.5, ("gemm_i8", "q5_k"): 19.5, ("gemm_i8", "q8_0"): 17.5,
             ("gemm_i8", "q4_0"): 18.0, ("gemm_i8", "q6_k"): 23.0, ("gemm_mma_float", "bf16"): 5.5,
             ("gemm_mma_float", "f16"): 8.5, ("gemm_mma_float", "f32"): 10.0}
# The dense int8 GEMM's narrow token tiles (kernels::gemm_i8_policy<32> / <16>, dense calls of at most 32 / 16
# tokens): the same weight staging and fragment loads serve half / a quarter of the mma, so more issued
# instructions per mma but fewer per weight (per weight = per mma x tile / 64: Q4_K sm_90 18.5 at 64, 10.2 at 32,
# 6.4 at 16). Measured sm_80 / sm_90, rounded up.
TC_NARROW_BUDGET = {("q4_k", 32): 21.0, ("q4_k", 16): 26.0, ("q5_k", 32): 22.5, ("q5_k", 16): 29.5,
                    ("q8_0", 32): 20.5, ("q8_0", 16): 28.0, ("q4_0", 32): 21.0, ("q4_0", 16): 29.5,
                    ("q6_k", 32): 24.5, ("q6_k", 16): 28.0}
# The MoE grouped GEMM (tiles of 32 sorted pairs, kernels/gemm_rows.hpp): the int8 kernel stages
# each weight tile for half the mma of the dense 64-token tile (+1.3-2 per mma, measured sm_80 /
# sm_90 rounded up); the float kernels' tile is 32 tokens in both forms.
TC_GROUPED_BUDGET = {("gemm_i8", "q4_k"): 20.0, ("gemm_i8", "q5_k"): 22.0, ("gemm_i8", "q8_0"): 20.0,
                     ("gemm_i8", "q4_0"): 21.0, ("gemm_i8", "q6_k"): 24.0, ("gemm_mma_float", "bf16"): 5.5,
                     ("gemm_mma_float", "f16"): 8.5, ("gemm_mma_float", "f32"): 10.0}


def narrow_load_extra(load):
    """Issued weight loads per weight that a Q6_K item of `load`-byte loads adds to the 16-byte item.

    A Q6_K item is always 105 loads (load / 2 blocks of 210 bytes): 105 per 2048 weights with 16-byte
    loads, 105 per 1024 / 512 weights with 8- / 4-byte loads, the only loads rows of 1024 n / 512 n
    weights (210 n bytes) are aligned for. Every other instruction of the item is the same per weight.
    """
    return 105 / (128 * load) - 105 / 2048


def find_tool(name, given):
    if given:
        return given
    found = shutil.which(name)
    if found:
        return found
    try:  # the PyPI wheel (nvidia-cuda-cuobjdump) installs it under site-packages/nvidia/cu*/bin
        import nvidia  # noqa: F401

        for root in nvidia.__path__:
            for sub in sorted(os.listdir(root)):
                cand = os.path.join(root, sub, "bin", name)
                if os.path.exists(cand):
                    return cand
    except ImportError:
        pass
    sys.exit(f"check_sass: {name} not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, as .ci/run does)")


def run_tool(cmd, env):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"check_sass: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip() or r.stdout.strip()[-500:]}")
    return r.stdout


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines()))


def parse_sass(text):
    funcs, cur = {}, None
    for line in text.splitlines():
        m = FUNC.search(line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
            continue
        m = INSTR.search(line)
        if m and cur:
            funcs[cur].append((int(m.group(1), 16), m.group(3), m.group(4).strip()))
    return funcs


def is_back_branch(instr):
    addr, op, args = instr
    t = re.search(r"0x([0-9a-f]+)", args) if op == "BRA" else None
    return bool(t) and int(t.group(1), 16) < addr


def hot_loop(instrs, key_op, innermost=False):
    """The backward branch whose body holds the most key_op instructions (innermost: among bodies
    holding no other backward branch)."""
    best = None
    for i, (addr, op, args) in enumerate(instrs):
        if op != "BRA":
            continue
        t = re.search(r"0x([0-9a-f]+)", args)
        if not t or int(t.group(1), 16) >= addr:
            continue
        target = int(t.group(1), 16)
        body = [x for x in instrs[: i + 1] if x[0] >= target]
        if innermost and any(is_back_branch(x) for x in body[:-1]):
            continue
        n_key = sum(1 for x in body if x[1].startswith(key_op))
        if n_key and (best is None or n_key > best[1]):
            best = (body, n_key)
    return best


def regs_of(args, width=1):
    out = set()
    for m in REG.finditer(args):
        out.update(range(int(m.group(1)), int(m.group(1)) + width))
    return out


def loads_in_flight(body):
    pending, most = [], 0
    for _, op, args in body:
        ops = [a.strip() for a in args.split(",")]
        reads = set()
        for a in ops[1:] if not op.startswith(("ST", "RED", "BRA")) else ops:
            reads |= regs_of(a)
        pending = [p for p in pending if not (p[0] & reads)]
        if op.startswith("LDG") and ops:  # 16-byte units: LDG.128 one, LDG.64 a half, LDG.32 a quarter
            width = 4 if ".128" in op else 2 if ".64" in op else 1
            pending.append((regs_of(ops[0], width), width / 4))
            most = max(most, sum(w for _, w in pending))
    return most


def occupancy(regs, threads):
    warps_per_block = threads // 32
    regs_per_warp = -(-regs * 32 // 256) * 256
    warps_by_regs = 65536 // regs_per_warp if regs_per_warp else 64
    blocks = min(32, warps_by_regs // warps_per_block, 2048 // threads)
    return blocks * warps_per_block / 64.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--cuobjdump")
    ap.add_argument("--all", action="store_true", help="also list float-path instances")
    ap.add_argument("--threads", type=int, default=128, help="threads per GEMV block (ops::gemv_policy)")
    ap.add_argument("--moe-threads", type=int, default=256, help="threads per MoE decode block (moe_policy_decode)")
    ap.add_argument("--known", help="open, documented spills (scripts/ptxas_known_spills.txt): reported, not failed")
    a = ap.parse_args()
    tool = find_tool("cuobjdump", a.cuobjdump)
    # cuobjdump -sass runs nvdisasm from PATH or its own folder; the wheels may put it in another folder
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(find_tool("nvdisasm", None)) + os.pathsep + env.get("PATH", "")
    sass = run_tool([tool, "-sass", "-arch", a.arch, a.binary], env)
    res_text = run_tool([tool, "-res-usage", "-arch", a.arch, a.binary], env)
    res = {m.group(1): tuple(int(m.group(k)) for k in range(2, 6)) for m in RES.finditer(res_text)}
    funcs = parse_sass(sass)
    names = demangle(list(funcs))
    known = []
    if a.known:
        with open(a.known, encoding="utf-8") as fh:
            for line in fh:
                line = line.split("#", 1)[0].strip()
                if line:
                    arch, sub = line.split(None, 1)
                    known.append((arch, sub.strip()))
    rows, failures = [], []
    for mangled, instrs in funcs.items():
        m = GEMV.search(names[mangled])
        mm = MOE.search(names[mangled]) if not m else None
        if not m and not mm:
            continue
        if m:
            fmt, ntok, epi, indexed, act16 = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4) == "true", m.group(5) == "true"
            load = int(m.group(6))
            kind = f"{EPILOGUES[epi]}{' experts' if indexed else ''}{f' ldg{8 * load}' if load != 16 else ''}"
            threads = a.threads
        else:
            fmt, ntok, act16 = mm.group(2), 1, mm.group(3) == "true"
            kind, threads = ("moe gate_up" if mm.group(1) == "moe_gate_up_kernel" else "moe down"), a.moe_threads
        if not act16 and not a.all:
            continue
        reg, stack, _, local = res.get(mangled, (0, 0, 0, 0))
        local_ops = sum(1 for x in instrs if x[1].startswith(("LDL", "STL")))
        loop = hot_loop(instrs, "IDP.2A" if act16 else "FFMA")
        if loop:
            body, n_key = loop
            weights = (2 * n_key if act16 else n_key) / ntok
            per_weight = len(body) / weights
            in_flight = loads_in_flight(body)
        else:
            per_weight, in_flight, body = float("nan"), 0, []
        label = f"{fmt} {'int16' if act16 else 'float'} {ntok} tok {kind}"
        budget = BUDGET_Q4K * BITS[fmt] / BITS["q4_k"] if act16 and fmt in BITS else None
        if budget and m and load != 16:
            budget += narrow_load_extra(load)
        rows.append((label, len(body), per_weight, budget, in_flight, reg, stack + local, local_ops,
                     occupancy(reg, threads)))
        if stack or local or local_ops:
            what = f"{label}: {stack} B stack, {local} B local, {local_ops} local-memory instructions"
            if any(k[0] == a.arch and k[1] in names[mangled] for k in known):
                print("known open spill (" + a.known + "): " + what)
            else:
                failures.append(what)
        if act16 and ntok == 1 and fmt in ENFORCED:
            if not per_weight <= budget:
                failures.append(f"{label}: {per_weight:.2f} instructions per weight > budget {budget:.2f}")
    rows.sort()
    tc_rows = []
    for mangled, instrs in funcs.items():
        hit = next(((kind, m, key) for kind, rx, key in TENSOR_CORE for m in [rx.search(names[mangled])] if m), None)
        g = GDN_TC.search(names[mangled]) if not hit else None
        if not hit and not g:
            continue
        reg, stack, _, local = res.get(mangled, (0, 0, 0, 0))
        local_ops = sum(1 for x in instrs if x[1].startswith(("LDL", "STL")))
        if g:
            kind, key, threads, per_weight = g.group(1).removesuffix("_kernel"), "HMMA", GDN_THREADS, None
            label, budget = f"{kind} d {g.group(2)}", GDN_BUDGET[kind]
            loop = hot_loop(instrs, key, innermost=True)
        else:
            kind, m, key = hit
            fmt, epi = m.group(1), EPILOGUES[int(m.group(2))]
            rows_kind = GEMM_ROWS[int(m.group(3) or 0)]
            tile = int(m.group(4)) if m.re.groups >= 4 and m.group(4) else 64
            loop = hot_loop(instrs, key)
            label = f"{kind} {fmt} {epi}" + ("" if rows_kind == "dense" else f" {rows_kind}")
            if rows_kind != "dense":
                budget = TC_GROUPED_BUDGET.get((kind, fmt))
            elif tile != 64:
                label += f" t{tile}"
                budget = TC_NARROW_BUDGET.get((fmt, tile))
            else:
                budget = TC_BUDGET.get((kind, fmt))
            threads = 128
        if not loop:
            failures.append(f"{label}: no loop with {key} instructions")
            continue
        body = loop[0]
        mma = sum(0.5 if (".16816" in op and op.startswith("IMMA")) or ".1688" in op else 1.0
                  for _, op, _ in body if op.startswith(key))
        per_mma = len(body) / mma
        # gemm_i8: a block's 128-column step reads 64 x 128 weights, and each of its 4 warps issues
        # 2 x (tile / 16) x 4 x 2 m16n8k32 (hi and lo planes): lane-instructions per weight = per mma x tile / 64
        if not g:
            per_weight = per_mma * tile / 64 if kind == "gemm_i8" else None
        ldsm = sum(1 for _, op, _ in body if op.startswith("LDSM"))
        tc_rows.append((label, len(body), mma, per_mma, budget, per_weight, ldsm, reg, stack + local + local_ops,
                        occupancy(reg, threads)))
        if stack or local or local_ops:
            failures.append(f"{label}: {stack} B stack, {local} B local, {local_ops} local-memory instructions")
        if budget and not per_mma <= budget:
            failures.append(f"{label}: {per_mma:.2f} instructions per mma > budget {budget:.2f}")
    # instr/w: per weight streamed (all tokens of the pass); /w/tok: per weight and token
    print(f"{'instance (' + a.arch + ')':44} {'loop':>5} {'instr/w':>7} {'/w/tok':>6} {'budget':>6} {'16B ld':>6} "
          f"{'regs':>4} {'local':>5} {'occ':>5}")
    for label, n, pw, budget, fl, reg, loc, lops, occ in rows:
        b = f"{budget:.2f}" if budget else "-"
        ntok = int(label.split()[2])
        print(f"{label:44} {n:5d} {pw:7.2f} {pw / ntok:6.2f} {b:>6} {fl:6.1f} {reg:4d} {loc + lops:5d} {occ:5.2f}")
    if tc_rows:
        tc_rows.sort()
        print(f"\n{'tensor-core instance (' + a.arch + ')':44} {'loop':>5} {'mma':>5} {'i/mma':>6} {'budget':>6} "
              f"{'i/w':>5} {'ldsm':>4} {'regs':>4} {'local':>5} {'occ<=':>5}")
        for label, n, mma, pm, budget, pw, ldsm, reg, loc, occ in tc_rows:
            b = f"{budget:.2f}" if budget else "-"
            w = f"{pw:.2f}" if pw else "-"
            print(f"{label:44} {n:5d} {mma:5.1f} {pm:6.2f} {b:>6} {w:>5} {ldsm:4d} {reg:4d} {loc:5d} {occ:5.2f}")
    if not rows:
        failures.append("no gemv_kernel instance found in " + a.binary)
    for f in failures:
        print("FAIL:", f)
    print(f"check_sass: {len(rows)} GEMV-engine instances, {len(tc_rows)} tensor-core GEMM instances, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
