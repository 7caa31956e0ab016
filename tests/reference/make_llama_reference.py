"""make_llama_reference.py - Llama test-tiny in plain PyTorch (float64), for tests/unit/test_llama_model.cpp.

Written from Hugging Face's modeling_llama.py (transformers 4.36: LlamaRMSNorm, LlamaRotaryEmbedding,
rotate_half / apply_rotary_pos_emb, repeat_kv, LlamaAttention's eager path, LlamaMLP, LlamaDecoderLayer,
LlamaForCausalLM) with only torch, so it runs on Debian's python3-torch (1.13) without transformers.
The rotary cos/sin are computed in float32 as Hugging Face computes them, then widened.

Every parameter is normal(m, 0.3) from the engine's counter-based RNG under seed 2024 and its name
(m = 1 for RMSNorm weights), so both sides start equal without a file. Prints the loss and a sample of
gradients as C++ initialisers:

    python3 tests/reference/make_llama_reference.py
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import counter_rng as rng  # noqa: E402

V, C, F, L, H, KV, CTX, EPS, THETA = 64, 32, 64, 2, 4, 2, 16, 1e-5, 10000.0
HD = C // H
SEED = 2024
INPUTS = [3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32, 38, 46, 26, 43]
TARGETS = [14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32, 38, 46, 26, 43, 3]
B, T = 2, 8


def shapes():
    out = [("model.embed_tokens.weight", (V, C))]
    for i in range(L):
        p = "model.layers.%d." % i
        out += [(p + "self_attn.q_proj.weight", (H * HD, C)), (p + "self_attn.k_proj.weight", (KV * HD, C)),
                (p + "self_attn.v_proj.weight", (KV * HD, C)), (p + "self_attn.o_proj.weight", (C, H * HD)),
                (p + "mlp.gate_proj.weight", (F, C)), (p + "mlp.up_proj.weight", (F, C)),
                (p + "mlp.down_proj.weight", (C, F)), (p + "input_layernorm.weight", (C,)),
                (p + "post_attention_layernorm.weight", (C,))]
    out += [("model.norm.weight", (C,)), ("lm_head.weight", (V, C))]
    return out


def param(name, shape):
    mean = 1.0 if name.endswith("layernorm.weight") or name == "model.norm.weight" else 0.0
    n = math.prod(shape)
    values = [rng.normal_at(SEED, rng.stream_key(name), i, mean, 0.3) for i in range(n)]
    return torch.tensor(values, dtype=torch.float64).view(*shape).requires_grad_()


def rms_norm(x, w):
    variance = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + EPS))


def rotary(seq_len):
    inv_freq = 1.0 / (THETA ** (torch.arange(0, HD, 2).float() / HD))
    t = torch.arange(seq_len, dtype=inv_freq.dtype)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().double(), emb.sin().double()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    b, kv, s, d = x.shape
    return x[:, :, None, :, :].expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d)


def forward(p, ids):
    x = p["model.embed_tokens.weight"][ids]
    cos, sin = rotary(T)
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for i in range(L):
        pre = "model.layers.%d." % i
        h = rms_norm(x, p[pre + "input_layernorm.weight"])
        q = (h @ p[pre + "self_attn.q_proj.weight"].T).view(B, T, H, HD).transpose(1, 2)
        k = (h @ p[pre + "self_attn.k_proj.weight"].T).view(B, T, KV, HD).transpose(1, 2)
        v = (h @ p[pre + "self_attn.v_proj.weight"].T).view(B, T, KV, HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
        att = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(HD) + mask, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[pre + "self_attn.o_proj.weight"].T
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"])
        gate = h @ p[pre + "mlp.gate_proj.weight"].T
        up = h @ p[pre + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ p[pre + "mlp.down_proj.weight"].T
    x = rms_norm(x, p["model.norm.weight"])
    return x @ p["lm_head.weight"].T


def main():
    params = {name: param(name, shape) for name, shape in shapes()}
    ids = torch.tensor(INPUTS).view(B, T)
    targets = torch.tensor(TARGETS)
    loss = torch.nn.functional.cross_entropy(forward(params, ids).view(-1, V), targets)
    loss.backward()
    print("loss %.10f" % loss.item())
    for name, _ in shapes():
        g = params[name].grad.flatten()
        for index in (g.numel() // 7, (g.numel() * 5) // 8):
            print('      {"%s", %d, %.9g},' % (name, index, g[index].item()))


if __name__ == "__main__":
    main()
