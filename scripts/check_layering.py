#!/usr/bin/env python3
"""Fails when a q35 header includes a higher layer, or a kernel-side header includes a model header.

Layers (docs/architecture.md): core < sim < arch < quant, kv < warp, block < ops < kernels < launch.
models/ holds traits only and may include core/ and models/; io/ is host-only and may include core,
models, quant and io. Nothing below io may include models/ or io/.

usage: check_layering.py [ROOT]      check ROOT/include/q35 (default: the repository)
       check_layering.py --self-test  prove the check catches violations
"""
import os
import re
import sys
import tempfile

RANK = {"core": 0, "sim": 1, "arch": 2, "quant": 3, "kv": 3, "warp": 4, "block": 4, "ops": 5, "kernels": 6,
        "launch": 7}
EXTRA = {"models": {"core", "models"}, "io": {"core", "models", "quant", "io"}}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]q35/([a-z_0-9]+)/[^>"]+[>"]', re.M)


def allowed(src, dst):
    if src in EXTRA:
        return dst in EXTRA[src]
    if dst in EXTRA or src not in RANK or dst not in RANK:
        return False
    return RANK[dst] <= RANK[src]


def check(root):
    base = os.path.join(root, "include", "q35")
    errors = []
    for dirpath, _, files in os.walk(base):
        for f in sorted(files):
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, base)
            layer = rel.split(os.sep)[0]
            if layer not in RANK and layer not in EXTRA:
                errors.append(f"{rel}: unknown layer directory '{layer}'")
                continue
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            for m in INCLUDE.finditer(text):
                dst = m.group(1)
                if not allowed(layer, dst):
                    line = text[: m.start()].count("\n") + 1
                    errors.append(f"include/q35/{rel}:{line}: layer '{layer}' must not include 'q35/{dst}/'")
    return errors


def self_test():
    cases = {"kernels/k.hpp": ('#include "q35/models/qwen.hpp"\n', True),
             "warp/w.hpp": ('#include "q35/ops/x.hpp"\n', True),
             "core/c.hpp": ('#include <q35/arch/thread.hpp>\n', True),
             "launch/l.hpp": ('#include "q35/kernels/k2.hpp"\n#include "q35/core/x.hpp"\n', False),
             "io/i.hpp": ('#include "q35/models/m.hpp"\n', False)}
    with tempfile.TemporaryDirectory() as tmp:
        for rel, (text, _) in cases.items():
            p = os.path.join(tmp, "include", "q35", rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as fh:
                fh.write(text)
        errors = check(tmp)
    for rel, (_, bad) in cases.items():
        hit = any(e.startswith(f"include/q35/{rel}:") for e in errors)
        if hit != bad:
            print(f"self-test FAILED for {rel}: expected {'an error' if bad else 'no error'}; got {errors}")
            return 1
    print(f"layering self-test passed ({len(errors)} planted violations caught)")
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    errors = check(root)
    for e in errors:
        print(e)
    if errors:
        print(f"layering check: {len(errors)} violation(s)")
        return 1
    print("layering check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
