#!/usr/bin/python3
"""make_golden.py - PyTorch's answers for fsdplab's baseline runs: what tests/integration/test_golden.cpp
compares train_baseline against.

For each case below it trains, in plain PyTorch, the same model on the same data with the same
optimizer as `fsdplab run` would, and writes under tests/data/golden/<case>/ (committed):

  run.json            the RunConfig fields of the run (model, preset or mlp width/depth, seed, batch,
                      seq, optimizer, lr, steps): the C++ test builds its RunConfig from this file;
                      plus "momentum" for the one SGD-with-momentum case (not a RunConfig field)
  init.safetensors    the parameters before step 1 (F32, fsdplab's dotted names; the tied LM head
                      once, as transformer.wte.weight), so a failure can tell init from training
  losses.csv          step,loss for steps 1..steps (as `fsdplab run --losses` counts them), the loss of
                      each step's forward (9 digits)
  final.safetensors   the parameters after the last optimizer step

How the reference is built, so that the comparison means something:
  - initial values: tests/reference/counter_rng.py (the engine's Philox twin) with fsdplab's
    ParamInit for each parameter, the run's seed and the parameter's dotted name, exactly as
    engine/nn/materialize.cpp does; then loaded into plain torch modules written here
    (toy, mlp, and a minimal GPT-2 with Hugging Face's Conv1D [in, out] layouts);
  - data: counter_rng.py's synthetic_regression / synthetic_tokens, as engine/train/batch_source.cpp;
  - optimizer: torch.optim.AdamW(params, lr=lr, foreach=False) (PyTorch's defaults: betas
    (0.9, 0.999), eps 1e-8, weight decay 0.01 on every parameter), or torch.optim.SGD(params, lr=lr,
    momentum=m, foreach=False) (m = 0, as fsdplab's make_optimizer, except in mlp_sgd_momentum);
    no clipping, no scheduler;
  - losses: F.mse_loss / F.cross_entropy, mean reduction; everything float32, CPU, one thread.

Needs Debian's PyTorch (python3-torch, 1.13; numpy comes with it): the `python3` of a pyenv on
PATH usually has no torch, so name the interpreter. From the repository root:

    /usr/bin/python3 tests/reference/make_golden.py

The output is the same bytes at every run (fixed seeds, no randomness from torch, one thread).
CI does not run this script: it only reads the committed files. Safetensors files are written by
hand with struct and json (the `safetensors` package is not installed for /usr/bin/python3), laid
out as Hugging Face's serializer lays them out (tensors sorted by name, header padded to 8 bytes).
"""
import json
import math
import struct
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import counter_rng as rng  # noqa: E402

OUT = HERE.parent / "data" / "golden"

# name -> the RunConfig fields (only those that differ from RunConfig's defaults matter, but all
# that shape the run are written). "preset" and "seq" for gpt2 only, "mlp_width"/"mlp_depth" for mlp.
CASES = {
    "toy_adamw": {"model": "toy", "seed": 3, "batch": 8, "optimizer": "adamw", "lr": 1e-2, "steps": 20},
    "toy_sgd": {"model": "toy", "seed": 4, "batch": 8, "optimizer": "sgd", "lr": 5e-2, "steps": 20},
    "mlp_adamw": {"model": "mlp", "mlp_width": 8, "mlp_depth": 2, "seed": 5, "batch": 8, "optimizer": "adamw",
                  "lr": 3e-3, "steps": 20},
    "gpt2_adamw": {"model": "gpt2", "preset": "test-tiny", "seed": 11, "batch": 4, "seq": 16, "optimizer": "adamw",
                   "lr": 3e-3, "steps": 20},
    # SGD leaves the attention's key bias at rounding noise (its gradient is 0 analytically: adding
    # a constant to every key's score of a query row leaves the softmax unchanged), where AdamW
    # scales that noise up to ~lr * noise / eps per step; so this case checks it at 1e-5 too.
    "gpt2_sgd": {"model": "gpt2", "preset": "test-tiny", "seed": 12, "batch": 4, "seq": 16, "optimizer": "sgd",
                 "lr": 0.5, "steps": 20},
    # "momentum" is no RunConfig field (make_optimizer gives SGD PyTorch's default momentum 0):
    # the C++ test runs this case with its own copy of train_baseline's loop and an Sgd with it.
    "mlp_sgd_momentum": {"model": "mlp", "mlp_width": 8, "mlp_depth": 2, "seed": 6, "batch": 8, "optimizer": "sgd",
                         "momentum": 0.9, "lr": 3e-2, "steps": 20},
}

# engine/nn/gpt2_model.cpp's presets (only the one used here).
GPT2_PRESETS = {"test-tiny": {"vocab_size": 64, "n_positions": 16, "n_embd": 32, "n_head": 2, "n_layer": 2}}


# ---- initialisation: fsdplab's ParamInit per parameter -------------------------------------------

def linear_default(fan_in):
    """PyTorch's nn.Linear default, as engine/nn/counter_rng.cpp's linear_default_bound."""
    bound = rng.f32(1.0 / math.sqrt(fan_in))
    return ("uniform", -bound, bound)


CONST0 = ("constant", 0.0, 0.0)
CONST1 = ("constant", 1.0, 0.0)


def init_spec(case, name):
    """(kind, a, b) of fsdplab's ParamInit for the parameter `name` of the case's model."""
    model = case["model"]
    if name.endswith("ln.weight") or name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
        return CONST1
    if name.endswith("ln.bias") or name.endswith(("ln_1.bias", "ln_2.bias", "ln_f.bias")):
        return CONST0
    if model == "toy":
        return {"fc1.weight": linear_default(10), "fc2.weight": linear_default(10)}[name]
    if model == "mlp":
        width = case["mlp_width"]
        return linear_default(width) if ".fc1." in name else linear_default(4 * width)
    cfg = GPT2_PRESETS[case["preset"]]
    if name.endswith(".bias"):
        return CONST0
    if name.endswith("c_proj.weight"):  # the residual projections, scaled down with depth
        return ("normal", 0.0, rng.f32(0.02 / math.sqrt(2.0 * cfg["n_layer"])))
    return ("normal", 0.0, rng.f32(0.02))


def init_values(seed, name, numel, spec):
    kind, a, b = spec
    if kind == "constant":
        return [a] * numel
    key = rng.stream_key(name)
    draw = rng.uniform_at if kind == "uniform" else rng.normal_at
    return [draw(seed, key, i, a, b) for i in range(numel)]


def materialize(model, case):
    with torch.no_grad():
        for name, p in model.named_parameters():
            values = init_values(case["seed"], name, p.numel(), init_spec(case, name))
            p.copy_(torch.tensor(values, dtype=torch.float32).view(p.shape))


# ---- the models ----------------------------------------------------------------------------------

class Toy(nn.Module):
    """engine/nn/toy_model.hpp: fc1 Linear(10, 10, no bias) -> ReLU -> LayerNorm(10) -> fc2 Linear(10, 5, no bias)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 10, bias=False)
        self.ln = nn.LayerNorm(10)
        self.fc2 = nn.Linear(10, 5, bias=False)

    def forward(self, x, y):
        return F.mse_loss(self.fc2(self.ln(F.relu(self.fc1(x)))), y)


class MlpBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x)), approximate="tanh"))


class Mlp(nn.Module):
    """engine/nn/mlp_model.hpp: N blocks of x + fc2(gelu_tanh(fc1(ln(x)))), MSE."""

    def __init__(self, width, depth):
        super().__init__()
        self.blocks = nn.ModuleList([MlpBlock(width) for _ in range(depth)])

    def forward(self, x, y):
        for block in self.blocks:
            x = block(x)
        return F.mse_loss(x, y)


class Conv1D(nn.Module):
    """Hugging Face's Conv1D: weight [in, out], y = bias + x @ weight (their addmm)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.empty(n_out))

    def forward(self, x):
        shape = x.shape[:-1] + (self.weight.shape[1],)
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(shape)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg["n_head"]
        self.c_attn = Conv1D(cfg["n_embd"], 3 * cfg["n_embd"])
        self.c_proj = Conv1D(cfg["n_embd"], cfg["n_embd"])

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, hd).transpose(1, 2) for t in (q, k, v))  # [B, H, T, hd]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)  # HF divides by sqrt(head_dim) too
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class GptMlp(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = Conv1D(cfg["n_embd"], 4 * cfg["n_embd"])
        self.c_proj = Conv1D(4 * cfg["n_embd"], cfg["n_embd"])

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg["n_embd"], eps=1e-5)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg["n_embd"], eps=1e-5)
        self.mlp = GptMlp(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg["vocab_size"], cfg["n_embd"])
        self.wpe = nn.Embedding(cfg["n_positions"], cfg["n_embd"])
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])])
        self.ln_f = nn.LayerNorm(cfg["n_embd"], eps=1e-5)


class Gpt2(nn.Module):
    """GPT2LMHeadModel without dropout: learned positions, pre-LN blocks, tied LM head (no parameter)."""

    def __init__(self, cfg):
        super().__init__()
        self.transformer = Transformer(cfg)

    def forward(self, ids, targets):
        t = self.transformer
        x = t.wte(ids) + t.wpe(torch.arange(ids.shape[1]))
        for block in t.h:
            x = block(x)
        logits = t.ln_f(x) @ t.wte.weight.t()  # lm_head: nn.Linear(C, V, bias=False) tied to wte
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def build(case):
    if case["model"] == "toy":
        return Toy()
    if case["model"] == "mlp":
        return Mlp(case["mlp_width"], case["mlp_depth"])
    return Gpt2(GPT2_PRESETS[case["preset"]])


# ---- data: engine/train/batch_source.cpp at world 1 ----------------------------------------------

def batch(case, step):
    B = case["batch"]
    if case["model"] in ("toy", "mlp"):
        n_in, n_out = (10, 5) if case["model"] == "toy" else (case["mlp_width"], case["mlp_width"])
        x, y = rng.synthetic_regression(case["seed"], step, B, n_in, n_out, 0, B)
        return (torch.tensor(x, dtype=torch.float32).view(B, n_in), torch.tensor(y, dtype=torch.float32).view(B, n_out))
    T, V = case["seq"], GPT2_PRESETS[case["preset"]]["vocab_size"]
    inputs, targets = rng.synthetic_tokens(case["seed"], step, B, T, V, 0, B)
    return torch.tensor(inputs).view(B, T), torch.tensor(targets).view(B, T)


# ---- safetensors by hand -------------------------------------------------------------------------

def write_safetensors(path, tensors):
    """tensors: name -> float32 torch tensor. Hugging Face's layout: sorted by name (one dtype),
    compact JSON header with __metadata__ first, padded with spaces to a multiple of 8 bytes."""
    header = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        data = struct.pack(f"<{t.numel()}f", *t.view(-1).tolist())
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def state(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


# ---- the runs ------------------------------------------------------------------------------------

def run_case(name, case):
    model = build(case)
    materialize(model, case)
    init = state(model)
    if case["optimizer"] == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=case["lr"], foreach=False)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=case["lr"], momentum=case.get("momentum", 0.0), foreach=False)
    losses = []
    for step in range(case["steps"]):
        inputs, targets = batch(case, step)
        opt.zero_grad(set_to_none=False)
        loss = model(inputs, targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())

    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps(case, indent=2) + "\n")
    write_safetensors(folder / "init.safetensors", init)
    write_safetensors(folder / "final.safetensors", state(model))
    (folder / "losses.csv").write_text(
        "step,loss\n" + "".join(f"{step},{loss:.9g}\n" for step, loss in enumerate(losses, start=1)))
    print(f"{name}: loss {losses[0]:.6f} -> {losses[-1]:.6f}, "
          f"{sum(p.numel() for p in model.parameters())} parameters")


def main():
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for name, case in CASES.items():
        run_case(name, case)
    print(f"torch {torch.__version__}; wrote {OUT}")


if __name__ == "__main__":
    main()
