"""counter_rng.py - the engine's counter-based random numbers and synthetic data in plain Python.

A bit-exact twin of engine/nn/counter_rng.cpp and engine/train/synthetic_data.cpp, so a PyTorch
reference script can start from exactly the engine's parameters and see exactly its batches:

    import counter_rng as rng
    w = [rng.normal_at(seed, rng.stream_key("h.0.attn.c_attn.weight"), i, 0.0, 0.02) for i in range(n)]

Integers are Python ints masked to 32/64 bits; float32 arithmetic is emulated by rounding every
double result to float32 (struct 'f'), which is exact for +, -, *: double has more than twice
float's precision, so rounding twice gives the correctly rounded float result. Only `math` and
`struct` are used, no numpy. Run it to print the values tests/unit/test_counter_rng.cpp and
tests/unit/test_synthetic_data.cpp check the C++ against.
"""
import math
import struct

MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF

# Philox4x32 multipliers and Weyl key increments (Salmon et al. 2011, Random123's philox.h).
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85


def philox4x32_10(counter, key):
    """Ten Philox rounds of a 4-word counter under a 2-word key; returns 4 words."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_index in range(10):
        if round_index:
            k0 = (k0 + PHILOX_W0) & MASK32
            k1 = (k1 + PHILOX_W1) & MASK32
        p0 = PHILOX_M0 * c0
        p1 = PHILOX_M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32)
    return (c0, c1, c2, c3)


def stream_key(name):
    """FNV-1a 64 of the UTF-8 bytes of a dotted name."""
    h = 0xCBF29CE484222325
    for byte in name.encode("utf-8"):
        h = ((h ^ byte) * 0x100000001B3) & MASK64
    return h


def philox_at(seed, key, index):
    """The 4 words for element `index` of stream `key`: key = seed, counter = (index, stream key)."""
    return philox4x32_10(
        (index & MASK32, (index >> 32) & MASK32, key & MASK32, (key >> 32) & MASK32),
        (seed & MASK32, (seed >> 32) & MASK32),
    )


def f32(x):
    """x rounded to the nearest float32 (ties to even)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _f32_below(x):
    """The largest float32 below x."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if x > 0:
        bits -= 1
    elif x == 0:
        bits = 0x80000001
    else:
        bits += 1
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def uniform_at(seed, key, index, lo, hi):
    """U[lo, hi) as float32: the top 24 bits of word 0 are u = m / 2^24 in [0, 1), exact in float;
    then d = hi - lo, p = d * u, r = lo + p, each rounded to float32; r rounding up to hi becomes
    the float just below hi."""
    lo, hi = f32(lo), f32(hi)
    u = (philox_at(seed, key, index)[0] >> 8) * 2.0**-24
    d = f32(hi - lo)
    r = f32(lo + f32(d * u))
    return _f32_below(hi) if r >= hi else r


def normal_at(seed, key, index, mean, std):
    """N(mean, std^2) as float32 by Box-Muller in double from the 4 words of one Philox call:
    u1 = ((w0:w1 >> 11) + 1) / 2^53 in (0, 1], u2 = (w2:w3 >> 11) / 2^53 in [0, 1),
    z = sqrt(-2 ln u1) cos(2 pi u2), result float32(mean + std * z); the sine half is dropped
    so element i depends on counter i alone."""
    w0, w1, w2, w3 = philox_at(seed, key, index)
    u1 = ((((w0 << 32) | w1) >> 11) + 1) * 2.0**-53
    u2 = (((w2 << 32) | w3) >> 11) * 2.0**-53
    z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
    return f32(f32(mean) + f32(std) * z)


# ---- synthetic data (engine/train/synthetic_data.cpp) ------------------------------------------

TOKEN_PERIOD = 8  # a row repeats a random motif of this many tokens
TOKEN_NOISE_SHIFT = 28  # a token is replaced by a random one when word 0 >> 28 == 0: p = 1/16
REGRESSION_NOISE_STD = 0.01


def _token(word, vocab):
    """A word mapped onto [0, vocab) by multiply-shift: floor(word * vocab / 2^32)."""
    return (word * vocab) >> 32


def synthetic_token_row(seed, step, batch, seq, vocab, row):
    """The seq + 1 tokens of global row `row` of step `step`: sample n = step * batch + row; its
    token t comes from Philox call n * (seq + 1) + t of stream "synthetic.tokens"."""
    key = stream_key("synthetic.tokens")
    base = (step * batch + row) * (seq + 1)
    words = [philox_at(seed, key, base + t) for t in range(seq + 1)]
    motif = [_token(w[2], vocab) for w in words[:TOKEN_PERIOD]]
    return [
        _token(w[1], vocab) if (w[0] >> TOKEN_NOISE_SHIFT) == 0 else motif[t % TOKEN_PERIOD]
        for t, w in enumerate(words)
    ]


def synthetic_tokens(seed, step, batch, seq, vocab, row_begin, row_end):
    """(inputs, targets) of rows [row_begin, row_end), each a flat list of (rows * seq) tokens."""
    inputs, targets = [], []
    for row in range(row_begin, row_end):
        tokens = synthetic_token_row(seed, step, batch, seq, vocab, row)
        inputs += tokens[:-1]
        targets += tokens[1:]
    return inputs, targets


def synthetic_regression_map(seed, in_features, out_features):
    """The fixed map A [out, in]: A[o][i] ~ N(0, 1/in), stream "synthetic.regression.map"."""
    key = stream_key("synthetic.regression.map")
    std = f32(1.0 / math.sqrt(in_features))
    return [[normal_at(seed, key, o * in_features + i, 0.0, std) for i in range(in_features)]
            for o in range(out_features)]


def synthetic_regression(seed, step, batch, in_features, out_features, row_begin, row_end):
    """(x, y) of rows [row_begin, row_end), flat: x ~ N(0, 1), y = A x + N(0, 0.01^2), the sum in
    double in order i = 0, 1, ... and rounded to float32 once."""
    key_x = stream_key("synthetic.regression.x")
    key_noise = stream_key("synthetic.regression.noise")
    a = synthetic_regression_map(seed, in_features, out_features)
    xs, ys = [], []
    for row in range(row_begin, row_end):
        n = step * batch + row
        x = [normal_at(seed, key_x, n * in_features + i, 0.0, 1.0) for i in range(in_features)]
        for o in range(out_features):
            acc = 0.0
            for i in range(in_features):
                acc += a[o][i] * x[i]
            noise = normal_at(seed, key_noise, n * out_features + o, 0.0, REGRESSION_NOISE_STD)
            ys.append(f32(acc + noise))
        xs += x
    return xs, ys


def token_file_batch(path, step, batch, seq, row_begin, row_end):
    """Rows [row_begin, row_end) of step `step` of a header-less little-endian uint16 token file:
    the step reads the batch * seq + 1 tokens from step * batch * seq on, wrapping at the end."""
    with open(path, "rb") as f:
        data = f.read()
    n = len(data) // 2
    start = step * batch * seq + row_begin * seq
    count = (row_end - row_begin) * seq + 1
    tokens = [int.from_bytes(data[2 * ((start + k) % n):2 * ((start + k) % n) + 2], "little")
              for k in range(count)]
    inputs, targets = [], []
    for r in range(row_end - row_begin):
        inputs += tokens[r * seq:(r + 1) * seq]
        targets += tokens[r * seq + 1:(r + 1) * seq + 1]
    return inputs, targets


if __name__ == "__main__":
    print("philox4x32_10(0, 0)     ", " ".join(f"{w:08x}" for w in philox4x32_10((0, 0, 0, 0), (0, 0))))
    name = "h.0.attn.c_attn.weight"
    key = stream_key(name)
    print(f"stream_key({name!r}) = 0x{key:016x}")
    seed = 1234
    print("philox_at(1234, key, 5) ", " ".join(f"{w:08x}" for w in philox_at(seed, key, 5)))
    print("uniform_at(1234, key, i, -0.125, 0.25), i = 0, 1, 2, 3, 2^32 + 7:")
    for i in (0, 1, 2, 3, 2**32 + 7):
        print(f"  {uniform_at(seed, key, i, -0.125, 0.25):.9g}")
    print("normal_at(1234, key, i, 0, 0.02), i = 0, 1, 2, 3, 2^32 + 7:")
    for i in (0, 1, 2, 3, 2**32 + 7):
        print(f"  {normal_at(seed, key, i, 0.0, 0.02):.9g}")
    print("normal_at(1234, key, 1000003, 1.5, 3):", f"{normal_at(seed, key, 1000003, 1.5, 3.0):.9g}")
    inputs, targets = synthetic_tokens(seed, 3, 4, 12, 50257, 1, 3)
    print("synthetic_tokens(1234, step 3, B 4, T 12, V 50257, rows [1, 3)):")
    print("  inputs ", inputs)
    print("  targets", targets)
    xs, ys = synthetic_regression(seed, 2, 6, 10, 5, 4, 5)
    print("synthetic_regression(1234, step 2, B 6, in 10, out 5, rows [4, 5)):")
    print("  x", ", ".join(f"{v:.9g}" for v in xs))
    print("  y", ", ".join(f"{v:.9g}" for v in ys))
