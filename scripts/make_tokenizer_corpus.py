#!/usr/bin/env python3
"""Writes tests/data/tokenizer_corpus.json: a multilingual corpus with the token ids that the
independent Python tokenizer in ../shared/fixtures/qwen35_reference.py (which agrees with llama.cpp's
ids on every fixture prompt) gives with the fixtures' vocabulary. A one-off tool for making test
data: the tests read the committed JSON and never run this.

Usage: scripts/make_tokenizer_corpus.py [FIXTURES_DIR] > tests/data/tokenizer_corpus.json
Needs the `gguf`, `numpy` and `regex` Python packages.
"""
import json, os, sys

fixtures = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "shared", "fixtures")
sys.path.insert(0, fixtures)
import qwen35_reference as ref  # noqa: E402

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Crème brûlée, naïve façade, São Paulo, Ærøskøbing, Łódź, İstanbul, straße",
    "cafe\u0301 vs café (combining acute vs precomposed), a\u030a\u0301 stacked marks",
    "北京欢迎你。東京都は日本の首都です。서울특별시",
    "مرحبا بالعالم، كيف حالك؟ שלום עולם",
    "हिन्दी में लिखा गया पाठ और ภาษาไทยไม่มีช่องว่าง",
    "Emoji: 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🇯🇵🇫🇷 ❤️ 😀😃😄",
    "Numbers: 0 7 42 3.14159 1234567890123456789012345678901234567890 -17 1e-9 ١٢٣ ௫",
    "   leading spaces, trailing spaces   ",
    "tabs\t\tand\tmixed \t whitespace runs          end",
    "line one\nline two\r\nline three\n\n\nfour\r\r\n",
    "don't I'LL we've they're she'd it's 'quoted' WON'T y'all",
    "int main() { return 12345; } // code: a->b, x += 0x1F;",
    "Mixed: English, Deutsch (Größe), русский текст, ελληνικά, 中文, 日本語, 한국어!",
    "\u200b zero width space, \u00a0non-breaking space, \u3000ideographic space",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n",
    "<|im_start|>assistant\n<think>\nreasoning here\n</think>\n\nThe answer.<|im_end|><|endoftext|>",
    "<think></think><|im_end|>x<|im_start|>",
    "not special: <|im_start |> <think > <|endoftext|",
    "whitespace edge cases: a\u0085b a\u2028b a\u2029b a\x1cb a\x1f b x\u180ey \u1680 \u202f\u205f end",
    "marks after non-letters: 1\u0301 !\u0301 \u0301start  \u0301 e\u0301\u0302\u0303 \u0915\u094d\u0937",
    "digits of other scripts: \u0661\u0662 \u0967\u0968 \u2460 \u00bd \u2167 \U0001d7d8",
    "symbols: \u20ac100 \u00a9\u00ae \u2192\u2190 <=> ~^$ \u3001\u3002 \uff01\uff1f",
    "apostrophes: 's's 'S'T 'Re'VE 'm'LL'd ''' ' \u2019s",
    " ",
    "\n",
    "a",
]

def main():
    _, _, _, tok = ref.load(os.path.join(fixtures, "tiny_dense_q4km.gguf"))
    cases = [{"prompt": text, "tokens": ref.tokenize(tok, text)} for text in CORPUS]
    out = ['{', '  "model": "tiny_dense_q4km.gguf",',
           '  "producer": "scripts/make_tokenizer_corpus.py with ../shared/fixtures/qwen35_reference.py tokenize()",',
           '  "cases": [']
    out.append(",\n".join("    " + json.dumps(c, ensure_ascii=False) for c in cases))
    out += ['  ]', '}']
    print("\n".join(out))

if __name__ == "__main__":
    main()
