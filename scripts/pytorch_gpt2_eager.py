#!/usr/bin/env python3
"""GPT-2 training steps in PyTorch eager on a CUDA GPU: the reference `fsdplab bench --what train --device cuda`
is compared with (scripts/bench_gpu.sh runs both in one go).

The same model and step as fsdplab's single-rank baseline: GPT-2 (tied embeddings, pre-LayerNorm blocks, tanh
GELU, causal attention), AdamW at lr 1e-3 with PyTorch's defaults, f32 everywhere and TF32 off (PyTorch's
default for matmul, and what fsdplab's cuBLAS GEMMs compute), random tokens. Attention is PyTorch's
scaled_dot_product_attention, as an eager user writes it today. Prints the mean step time and tokens/s over
the measured steps, each step timed by the host after torch.cuda.synchronize(), as fsdplab's are.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {  # (layers, heads, width), as fsdplab's gpt2 presets (engine/nn/gpt2_model.cpp)
    "gpt2": (12, 12, 768),
    "gpt2-medium": (24, 16, 1024),
    "gpt2-large": (36, 20, 1280),
    "gpt2-xl": (48, 25, 1600),
}


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, layers, heads, width, vocab=50257, context=1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpt2", choices=sorted(SIZES))
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("pytorch_gpt2_eager.py: no CUDA GPU visible to PyTorch; run it on the GPU machine")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    layers, heads, width = SIZES[args.preset]
    model = GPT2(layers, heads, width).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 50257, (args.micro_batch, args.seq), device="cuda")
    targets = torch.randint(0, 50257, (args.micro_batch, args.seq), device="cuda")
    times = []
    for step in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        begin = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model(idx, targets)
        loss.backward()
        optimizer.step()
        loss_value = loss.item()  # the host reads the loss, as fsdplab's step loop does
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - begin)
        if not math.isfinite(loss_value):
            raise SystemExit(f"loss is {loss_value} at step {step}")
    step_s = sum(times) / len(times)
    tokens = args.micro_batch * args.seq
    print(f"pytorch eager {torch.__version__} on {torch.cuda.get_device_name()}: gpt2 {args.preset}, "
          f"{args.micro_batch} x {args.seq} tokens, f32 (TF32 off)")
    print(f"step {step_s * 1e3:.3f} ms, tokens/s {tokens / step_s:.0f}")


if __name__ == "__main__":
    main()
