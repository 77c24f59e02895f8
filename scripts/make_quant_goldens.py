#!/usr/bin/env python3
"""One-off generator of the dequantization goldens in tests/data/quant/.

For every GGUF type q35 supports it writes <type>.blocks (raw GGUF block bytes) and <type>.f32
(little-endian float32, gguf.quants.dequantize of those bytes: ggml's reference dequantization).
The tests read these files and need no Python. Also dump_tensor.sha256: hashes of
gguf-py's dequantization of fixture tensors, for the qwen35_generate --dump-tensor test.
Re-run with: pip install gguf numpy; python3 scripts/make_quant_goldens.py
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "quant")

# f16 bit patterns that stress the scale path: zeros, subnormals, extremes, inf, NaN.
SPECIAL_F16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF,
               0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE00, 0x1400, 0x2E66]


def put_f16(block: np.ndarray, offset: int, bits: int) -> None:
    block[offset] = bits & 0xFF
    block[offset + 1] = bits >> 8


def quant_blocks(qtype, rng: np.random.Generator) -> np.ndarray:
    n_elems, n_bytes = GGML_QUANT_SIZES[qtype]
    blocks = []

    def rand_block():
        return rng.integers(0, 256, n_bytes, dtype=np.uint8)

    # Random bytes with a normal-range scale (the common case).
    for _ in range(48):
        b = rand_block()
        blocks.append(b)
    if qtype in (T.Q8_0, T.Q4_0):
        d_offsets = [0]
    elif qtype in (T.Q4_K, T.Q5_K):
        d_offsets = [0, 2]
    elif qtype == T.Q6_K:
        d_offsets = [208]
    else:
        d_offsets = []
    for b in blocks:  # keep the random blocks' scales finite and moderate
        for off in d_offsets:
            put_f16(b, off, int(np.float16(rng.uniform(-2, 2)).view(np.uint16)))
    # Every special f16 value in each scale slot (and both slots at once for the K-quants).
    for bits in SPECIAL_F16:
        for off in d_offsets:
            b = rand_block()
            for o in d_offsets:
                put_f16(b, o, 0x3C00)
            put_f16(b, off, bits)
            blocks.append(b)
        if len(d_offsets) == 2:
            b = rand_block()
            put_f16(b, 0, bits)
            put_f16(b, 2, bits)
            blocks.append(b)
    if qtype in (T.Q4_K, T.Q5_K):
        # The 12 packed bytes of 6-bit scales and mins: all zero, all one, only the high 2 bits,
        # only the low nibbles, and a walking single bit through all 96 bits.
        patterns = [np.zeros(12, np.uint8), np.full(12, 0xFF, np.uint8),
                    np.array([0xC0] * 8 + [0x00] * 4, np.uint8), np.array([0x3F] * 8 + [0xFF] * 4, np.uint8),
                    np.array([0x00] * 8 + [0x0F] * 4, np.uint8), np.array([0x00] * 8 + [0xF0] * 4, np.uint8)]
        for bit in range(96):
            p = np.zeros(12, np.uint8)
            p[bit // 8] = 1 << (bit % 8)
            patterns.append(p)
        for p in patterns:
            b = rand_block()
            put_f16(b, 0, 0x3C00)
            put_f16(b, 2, 0x3800)
            b[4:16] = p
            blocks.append(b)
    if qtype == T.Q6_K:
        # int8 sub-block scales at the extremes: -128, 127, 0, -1; and all-ones / all-zero quants.
        for s in (-128, 127, 0, -1):
            b = rand_block()
            b[192:208] = np.array([s] * 16, np.int8).view(np.uint8)
            put_f16(b, 208, 0x3C00)
            blocks.append(b)
        for fill in (0x00, 0xFF):
            b = rand_block()
            b[0:192] = fill
            put_f16(b, 208, 0x3C00)
            blocks.append(b)
    if qtype in (T.Q8_0, T.Q4_0):
        for fill in (0x00, 0x7F, 0x80, 0xFF):  # extreme quants
            b = rand_block()
            b[2:] = fill
            put_f16(b, 0, 0x7BFF)
            blocks.append(b)
    return np.concatenate(blocks)


def plain_data(qtype, rng: np.random.Generator) -> np.ndarray:
    if qtype in (T.F16, T.BF16):
        # Every 16-bit pattern: all normals, subnormals, zeros, infinities and NaNs.
        return np.arange(65536, dtype=np.uint16).view(np.uint8)
    vals = rng.standard_normal(4096).astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4028235e38, 1.1754944e-38],
                       np.float32)
    return np.concatenate([vals, special]).view(np.uint8)


def main() -> int:
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261130)
    for qtype, name in [(T.F32, "f32"), (T.F16, "f16"), (T.BF16, "bf16"), (T.Q8_0, "q8_0"), (T.Q4_0, "q4_0"),
                        (T.Q4_K, "q4_K"), (T.Q5_K, "q5_K"), (T.Q6_K, "q6_K")]:
        raw = plain_data(qtype, rng) if qtype in (T.F32, T.F16, T.BF16) else quant_blocks(qtype, rng)
        with np.errstate(all="ignore"):
            deq = gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(-1)
        raw.tofile(os.path.join(OUT, f"{name}.blocks"))
        deq.astype("<f4").tofile(os.path.join(OUT, f"{name}.f32"))
        print(f"{name}: {raw.size} bytes -> {deq.size} values")
    return 0




# ---- --dump-tensor goldens: SHA-256 of gguf-py's float32 dequantization of fixture tensors ----
DUMP_CASES = [("tiny_moe_q4km.gguf", "output.weight"),                 # Q6_K
              ("tiny_moe_q4km.gguf", "blk.0.attn_qkv.weight"),         # Q8_0
              ("tiny_moe_q4km.gguf", "blk.3.attn_output.weight"),      # Q5_K
              ("tiny_moe_q4km.gguf", "blk.0.ffn_gate_exps.weight"),    # Q4_K, 3-D (experts)
              ("tiny_moe_q4km.gguf", "blk.0.ssm_conv1d.weight"),       # F32
              ("tiny_dense_q4km.gguf", "blk.0.ffn_down.weight")]       # Q4_K


def dump_tensor_hashes() -> None:
    import hashlib
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
    lines = []
    for fname, tname in DUMP_CASES:
        r = gguf.GGUFReader(os.path.join(data, fname))
        t = next(t for t in r.tensors if t.name == tname)
        deq = gguf.quants.dequantize(t.data, t.tensor_type).astype("<f4").reshape(-1)
        lines.append(f"{fname} {tname} {deq.size} {hashlib.sha256(deq.tobytes()).hexdigest()}")
    with open(os.path.join(OUT, "dump_tensor.sha256"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
    dump_tensor_hashes()
