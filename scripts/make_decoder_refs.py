#!/usr/bin/env python3
"""Writes decoder reference data for a tiny Qwen3.5 GGUF in the layout of the llama.cpp fixtures
(ref_<name>.json + ref_<name>.caseN.f32: logits rows for every prompt position, then 16 greedy steps),
computed by the float64 reference decoder of ../shared/fixtures/qwen35_reference.py. A developer tool:
the project's tests read the data it writes, never the script or ../shared.

usage: make_decoder_refs.py MODEL.gguf OUT_DIR NAME [--fixtures ../shared/fixtures] [--steps 16]
Prompts: the three prompts of tests/data/ref_tiny_dense.json.
"""
import argparse
import json
import os
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out_dir")
    ap.add_argument("name")
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "fixtures"))
    ap.add_argument("--steps", type=int, default=16)
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.fixtures))
    import qwen35_reference as ref  # noqa: E402  (float64 numpy, agrees with llama.cpp to 1e-6)

    prompts = [c["prompt"] for c in json.load(open(os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                                                                   "ref_tiny_dense.json")))["cases"]]
    m = ref.Model(a.model)
    cases = []
    for i, p in enumerate(prompts):
        ids = ref.tokenize(m.tok, p)
        m.reset()
        rows = [m.step(t) for t in ids]
        greedy = []
        for _ in range(a.steps):
            cur = int(np.argmax(rows[-1]))
            greedy.append(cur)
            rows.append(m.step(cur))
        f = f"ref_{a.name}.case{i}.f32"
        np.asarray(rows, dtype=np.float32).tofile(os.path.join(a.out_dir, f))
        cases.append({"prompt": p, "tokens": ids, "greedy": greedy, "logits_file": f, "logits_rows": len(rows)})
    doc = {"model": os.path.basename(a.model), "n_vocab": int(np.asarray(rows[0]).shape[0]),
           "generator": "qwen35_reference.py (float64)", "cases": cases}
    with open(os.path.join(a.out_dir, f"ref_{a.name}.json"), "w") as out:
        json.dump(doc, out, indent=1)
    print(f"wrote ref_{a.name}.json with {len(cases)} cases")


if __name__ == "__main__":
    main()
