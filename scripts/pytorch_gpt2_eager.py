#!/usr/bin/env python3
"""GPT-2 training steps in PyTorch on a CUDA GPU: the reference `fsdplab bench --what train --device cuda`
is compared with (scripts/bench_gpu.sh runs both in one go).

The same model and step as fsdplab's single-rank baseline: GPT-2 (tied embeddings, pre-LayerNorm blocks, tanh
GELU, causal attention), AdamW at lr 1e-3, random tokens. Attention is PyTorch's scaled_dot_product_attention,
as an eager user writes it today. TF32 is off in every mode (PyTorch's default for matmul, and what fsdplab's
cuBLAS GEMMs compute in f32).
  --dtype f32   (the default) f32 everywhere, AdamW with PyTorch's defaults;
  --dtype bf16  the forward and the loss under torch.autocast(bfloat16) (the weights and the optimizer stay f32,
                as in fsdplab's bf16 mixed precision) and AdamW(fused=True), one kernel for the whole update;
  --compile     the model (forward and loss) through torch.compile; its first steps compile it, so the warmup
                steps must cover them (the default 3 do).
Prints the mean step time and tokens/s over the measured steps, each step timed by the host after
torch.cuda.synchronize(), as fsdplab's are.
  --kernels     then profiles as many steps again (torch.profiler, after the timed ones, so the timing is
                untouched) and prints where the GPU time goes, kernel by kernel, in the columns of
                `fsdplab bench --what kernels`: kernel, calls/step, ms/step, share %.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from gpt2_bench_args import CONTEXT, SIZES, VOCAB, add_step_arguments, check_step_arguments


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
    def __init__(self, layers, heads, width, vocab=VOCAB, context=CONTEXT):
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


def print_kernel_table(step, steps):
    """Runs step() `steps` times under torch.profiler and prints the CUDA kernels, copies and memsets by name."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    totals = {}  # name -> [calls, microseconds]
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        entry = totals.setdefault(event.name, [0, 0.0])
        entry[0] += 1
        entry[1] += event.time_range.elapsed_us()
    gpu_ms = sum(us for _, us in totals.values()) / 1e3 / steps
    print(f"\nWhere the step's GPU time goes (torch.profiler, {steps} steps): {gpu_ms:.3f} ms of kernels a step\n")
    print(f"| {'kernel':<60} | calls/step |  ms/step | share % |")
    print(f"|{'-' * 62}|------------|----------|---------|")
    for name, (calls, us) in sorted(totals.items(), key=lambda item: -item[1][1]):
        ms = us / 1e3 / steps
        short = name if len(name) <= 60 else name[:57] + "..."
        print(f"| {short:<60} | {calls / steps:10.1f} | {ms:8.3f} | {100 * ms / gpu_ms:7.2f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_arguments(parser)
    parser.add_argument("--dtype", default="f32", choices=["f32", "bf16"],
                        help="f32: everything in f32; bf16: torch.autocast to bfloat16 and AdamW(fused=True)")
    parser.add_argument("--compile", action="store_true", help="run the model through torch.compile")
    parser.add_argument("--kernels", action="store_true",
                        help="then profile as many steps again and print the GPU time by kernel")
    args = parser.parse_args()
    check_step_arguments(parser, args)
    if not torch.cuda.is_available():
        raise SystemExit("pytorch_gpt2_eager.py: no CUDA GPU visible to PyTorch; run it on the GPU machine")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    layers, heads, width = SIZES[args.preset]
    model = GPT2(layers, heads, width).cuda()
    bf16 = args.dtype == "bf16"
    # Only bf16 names `fused`: passing fused=False would also turn off the foreach kernels PyTorch picks by default.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, **({"fused": True} if bf16 else {}))
    if args.compile:
        model = torch.compile(model)
    idx = torch.randint(0, VOCAB, (args.micro_batch, args.seq), device="cuda")
    targets = torch.randint(0, VOCAB, (args.micro_batch, args.seq), device="cuda")

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = model(idx, targets)
        loss.backward()
        optimizer.step()
        return loss.item()  # the host reads the loss, as fsdplab's step loop does

    times = []
    for step in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        begin = time.perf_counter()
        loss_value = train_step()
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - begin)
        if not math.isfinite(loss_value):
            raise SystemExit(f"loss is {loss_value} at step {step}")
    step_s = sum(times) / len(times)
    tokens = args.micro_batch * args.seq
    mode = "torch.compile" if args.compile else "eager"
    precision = "bf16 autocast, fused AdamW" if bf16 else "f32"
    print(f"pytorch {mode} {torch.__version__} on {torch.cuda.get_device_name()}: gpt2 {args.preset}, "
          f"{args.micro_batch} x {args.seq} tokens, {precision} (TF32 off)")
    print(f"step {step_s * 1e3:.3f} ms, tokens/s {tokens / step_s:.0f}")
    if args.kernels:
        print_kernel_table(train_step, args.steps)


if __name__ == "__main__":
    main()
