#!/usr/bin/env python3
"""Reads a build log containing `nvcc -Xptxas=-v` output and fails on any register spill.

usage: check_ptxas.py BUILD_LOG [--table] [--filter SUBSTRING] [--known FILE]
Prints one line per (kernel, arch): registers, spill stores/loads, stack; exits 1 if any spill that
--known does not list. FILE holds the open, documented spills, one "ARCH SUBSTRING" per line (# comments):
they are printed as known, never hidden, and a listed entry that no longer spills is reported too.
"""
import re
import subprocess
import sys

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+)'")
PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
REGS = re.compile(r"Used (\d+) registers")


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return out.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return names


def parse(text):
    rows, cur = {}, None
    for line in text.splitlines():
        m = ENTRY.search(line)
        if m:
            cur = (m.group(1), m.group(2))
            rows.setdefault(cur, {"regs": 0, "stack": 0, "spill_st": 0, "spill_ld": 0})
            continue
        if cur is None:
            continue
        m = PROPS.search(line)
        if m:
            r = rows[cur]
            r["stack"], r["spill_st"], r["spill_ld"] = int(m.group(1)), int(m.group(2)), int(m.group(3))
        m = REGS.search(line)
        if m:
            rows[cur]["regs"] = int(m.group(1))
    return rows


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    table = "--table" in args
    flt = args[args.index("--filter") + 1] if "--filter" in args else ""
    known = []
    if "--known" in args:
        with open(args[args.index("--known") + 1], encoding="utf-8") as fh:
            for line in fh:
                line = line.split("#", 1)[0].strip()
                if line:
                    arch, sub = line.split(None, 1)
                    known.append((arch, sub.strip()))
    used = set()
    with open(args[0], encoding="utf-8", errors="replace") as fh:
        rows = parse(fh.read())
    keys = sorted(rows)
    names = demangle([k[0] for k in keys])
    spills = 0
    for (mangled, arch), name in zip(keys, names):
        if flt and flt not in name:
            continue
        r = rows[(mangled, arch)]
        bad = r["spill_st"] or r["spill_ld"]
        listed = [k for k in known if k[0] == arch and k[1] in name] if bad else []
        used.update(listed)
        spills += bool(bad) and not listed
        if table or bad:
            m = re.search(r"kernel_entry<(.*)>\(", name)
            short = re.sub(r"\(anonymous namespace\)::", "", m.group(1) if m else name)
            print(f"{arch}  regs {r['regs']:3d}  stack {r['stack']:4d}  spill st/ld {r['spill_st']}/{r['spill_ld']}"
                  f"  {short[:150]}{('  <-- known open spill' if listed else '  <-- SPILL') if bad else ''}")
    for k in known:
        if k not in used:
            print(f"ptxas: the known spill '{k[0]} {k[1]}' no longer occurs: remove it from the list")
    print(f"ptxas: {len(keys)} kernel instantiations checked, {spills} with spills not on the known list")
    if not keys:
        print("ptxas: no '-Xptxas=-v' output found in the log (was the CUDA build fresh?)")
        return 1
    return 1 if spills else 0


if __name__ == "__main__":
    sys.exit(main())
