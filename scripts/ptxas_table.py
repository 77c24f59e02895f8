#!/usr/bin/env python3
"""Turns the -Xptxas=-v lines of a CUDA build log into a markdown table per kernel instance.

usage: python3 scripts/ptxas_table.py BUILD_LOG[,BUILD_LOG...] [NAME_FILTER]
  (several logs of incremental builds: a later log's report of a kernel replaces an earlier one's;
   filter: substring of the demangled name)
"""
import re
import subprocess
import sys


def main() -> int:
    log = [line for path in sys.argv[1].split(",") for line in open(path, errors="replace").read().splitlines()]
    flt = sys.argv[2] if len(sys.argv) > 2 else ""
    rows, entry, arch = {}, None, None
    for line in log:
        m = re.search(r"Compiling entry function '(\S+)' for '(sm_\d+)'", line)
        if m:
            entry, arch = m.group(1), m.group(2)
            rows.setdefault(entry, {})[arch] = {}
            continue
        if entry is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            rows.setdefault(entry, {}).setdefault(arch, {})["stack"] = m.groups()
        m = re.search(r"Used (\d+) registers", line)
        if m:
            rows.setdefault(entry, {}).setdefault(arch, {})["regs"] = m.group(1)
    names = list(rows)
    dem = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    out = []
    for mangled, d in zip(names, dem):
        if flt not in d:
            continue
        d = re.sub(r"^void q35::launch::kernel_entry<q35::kernels::(.*)>\(.*$", r"\1", d)
        d = d.replace("q35::quant::", "").replace("q35::ops::", "").replace("q35::kernels::", "")
        for i, e in enumerate(("store", "residual", "swiglu")):
            d = d.replace(f"(epilogue){i}", e).replace(f"(gemv_epilogue){i}", e)
        d = re.sub(r", gemv_policy<\w+>", "", d).replace(", true>", ", experts>").replace(", false>", ", plain>")
        d = d.strip()
        cells = []
        for a in ("sm_80", "sm_90"):
            e = rows[mangled].get(a, {})
            st = e.get("stack", ("?", "?", "?"))
            cells.append(f"{e.get('regs', '?')} / {st[0]} / {st[1]}+{st[2]}")
        out.append(f"| `{d}` | {cells[0]} | {cells[1]} |")
    print("| kernel instance | sm_80 regs / stack B / spill st+ld B | sm_90 regs / stack B / spill st+ld B |")
    print("|---|---|---|")
    print("\n".join(sorted(set(out))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
