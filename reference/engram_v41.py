"""Engram hashing of DeepSeek-V4.1 (docs/specs/model-v41.md §2.15, §5, Appendix A), written from the spec:
bucket primes and offsets, the hash multipliers (numpy's default_rng, as the official code draws them),
the n-gram hash ids of a token sequence, and the compressed-token map (the sidecar, or derived from
tokenizer.json with Python's unicodedata: `python3 engram_v41.py token-map TOKENIZER_JSON OUT_JSON`)."""
import json
import os
import re
import sys
import unicodedata

import numpy as np


def is_prime(n):
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    d = 3
    while d * d <= n:
        if n % d == 0:
            return False
        d += 2
    return True


def bucket_primes(vocab_size, n_layers, max_ngram, n_heads):
    """primes[k][c], c = i * n_heads + h (n-gram i = 0..N-2, head h): consecutive primes >= vocab_size
    handed out in (layer, n-gram, head) order (A.1)."""
    out, nxt = [], vocab_size
    for _ in range(n_layers):
        layer = []
        for _ in range((max_ngram - 1) * n_heads):
            while not is_prime(nxt):
                nxt += 1
            layer.append(nxt)
            nxt += 1
        out.append(layer)
    return out


def offsets(primes_of_layer):
    out, s = [], 0
    for p in primes_of_layer:
        out.append(s)
        s += p
    return out


def multipliers(layer_id, compressed_vocab_size, max_ngram):
    """m_{L,j} = 2 v_j + 1, v = default_rng(10007 L).integers(0, bound, size=N, int64),
    bound = ((2^63 - 1) div C) div 2 (A.2)."""
    bound = ((2 ** 63 - 1) // compressed_vocab_size) // 2
    v = np.random.default_rng(10007 * layer_id).integers(0, bound, size=max_ngram, dtype=np.int64)
    return [2 * int(x) + 1 for x in v]


def hash_ids(cids, pad, mults, primes_of_layer, n_heads):
    """Table row ids [T, (N-1) * H] of every position of a sequence of compressed ids starting at
    position 0 (text only: pad exactly for positions before 0). Python ints: exact."""
    N = len(mults)
    offs = offsets(primes_of_layer)
    out = np.zeros((len(cids), (N - 1) * n_heads), dtype=np.int64)
    for p in range(len(cids)):
        x = [int(cids[p - j]) if p - j >= 0 else pad for j in range(N)]
        z = (x[0] * mults[0])
        for i in range(1, N):
            z ^= x[i] * mults[i]
            for h in range(n_heads):
                c = (i - 1) * n_heads + h
                out[p, c] = z % primes_of_layer[c] + offs[c]
    return out


def _byte_decoder():
    """GPT-2 byte-level alphabet, inverted: the printable stand-in character of each byte -> the byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


# Unicode White_Space (what Rust's char::is_whitespace and so HF's Strip test), not str.isspace().
_WHITE_SPACE = set("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {chr(c) for c in range(0x2000, 0x200B)}


def normalize(text):
    """Spec §5's HF normalizer sequence, as HF runs it: every combining mark (category M*) is dropped, and
    each character is lowercased on its own (no final-sigma context)."""
    s = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text))
    s = "".join(c.lower() for c in s if not unicodedata.category(c).startswith("M"))
    s = re.sub("[ \t\r\n]+", " ", s)
    if s == " ":
        s = "\ue000"
    b, e = 0, len(s)
    while b < e and s[b] in _WHITE_SPACE:
        b += 1
    while e > b and s[e - 1] in _WHITE_SPACE:
        e -= 1
    return s[b:e].replace("\ue000", " ")


def derive_token_map(tokenizer_json):
    """model-v41.md §5 from a tokenizer.json (byte-level BPE with added tokens): [compressed id] by token id."""
    with open(tokenizer_json, encoding="utf-8") as f:
        tj = json.load(f)
    raw = {i: t for t, i in tj["model"]["vocab"].items()}
    added = {a["id"]: a["content"] for a in tj.get("added_tokens", [])}
    n = max(max(raw), max(added) if added else -1) + 1
    bytes_of = _byte_decoder()
    ids, out = {}, []
    for t in range(n):
        if t in added:
            text, spelling = added[t], added[t]
        elif t in raw:
            spelling = raw[t]
            text = bytes(bytes_of[c] for c in spelling).decode("utf-8", errors="replace")
        else:
            text = spelling = ""
        if "\ufffd" in text:
            key = spelling
        else:
            key = normalize(text) or text
        out.append(ids.setdefault(key, len(ids)))
    return out


def load_token_map(model_dir, compressed_vocab_size):
    """engram_token_map.json (§5 sidecar) when present, else derived from tokenizer.json; its id count must be
    the config's compressed vocabulary size."""
    path = os.path.join(model_dir, "engram_token_map.json")
    if not os.path.exists(path):
        tokenizer_json = os.path.join(model_dir, "tokenizer.json")
        if not os.path.exists(tokenizer_json):
            raise ValueError(f"{model_dir}: neither engram_token_map.json nor tokenizer.json")
        tm = np.asarray(derive_token_map(tokenizer_json), dtype=np.int64)
        n = len(set(tm.tolist()))
        if n != compressed_vocab_size:
            raise ValueError(f"{tokenizer_json}: {n} distinct compressed ids, the config says "
                             f"engram_compressed_vocab_size = {compressed_vocab_size}")
        return tm
    with open(path) as f:
        d = json.load(f)
    tm = np.asarray(d["token_map"], dtype=np.int64)
    n = len(set(tm.tolist()))
    if d.get("compressed_vocab_size") != compressed_vocab_size or n != compressed_vocab_size:
        raise ValueError(f"{path}: {n} distinct ids (declared {d.get('compressed_vocab_size')}), the config says "
                         f"engram_compressed_vocab_size = {compressed_vocab_size}")
    return tm


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "token-map":
        sys.exit("usage: engram_v41.py token-map TOKENIZER_JSON OUT_JSON")
    m = derive_token_map(sys.argv[2])
    with open(sys.argv[3], "w") as f:
        json.dump({"compressed_vocab_size": len(set(m)), "token_map": m}, f)
    print(len(set(m)))
