"""Engram hashing of DeepSeek-V4.1 (docs/specs/model-v41.md §2.15, §5, Appendix A), written from the spec:
bucket primes and offsets, the hash multipliers (numpy's default_rng, as the official code draws them),
the n-gram hash ids of a token sequence, and the compressed-token map sidecar."""
import json
import os

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


def load_token_map(model_dir, compressed_vocab_size):
    """engram_token_map.json (§5 sidecar); its id count must be the config's compressed vocabulary size."""
    path = os.path.join(model_dir, "engram_token_map.json")
    if not os.path.exists(path):
        raise ValueError(f"{model_dir}: no engram_token_map.json (deriving the map from tokenizer.json is not "
                         "implemented in this reference)")
    with open(path) as f:
        d = json.load(f)
    tm = np.asarray(d["token_map"], dtype=np.int64)
    n = len(set(tm.tolist()))
    if d.get("compressed_vocab_size") != compressed_vocab_size or n != compressed_vocab_size:
        raise ValueError(f"{path}: {n} distinct ids (declared {d.get('compressed_vocab_size')}), the config says "
                         f"engram_compressed_vocab_size = {compressed_vocab_size}")
    return tm
