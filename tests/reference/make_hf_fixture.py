"""Writes tests/data/hf_gpt2_tiny/: a GPT-2 of fsdplab's test-tiny size saved by Hugging Face's own
GPT2LMHeadModel.save_pretrained, so a test can check that fsdplab reads folders Hugging Face writes.

Needs PyTorch and transformers (e.g. a venv made with --system-site-packages over Debian's
python3-torch, then `pip install transformers`). Run from the repository root:
    python tests/reference/make_hf_fixture.py
The weights come from torch.manual_seed(0) and Hugging Face's own initialisation; the test checks
that fsdplab loads exactly the values in the file, so they need not match anything of fsdplab's.
"""
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

OUT = os.path.join("tests", "data", "hf_gpt2_tiny")

torch.manual_seed(0)
config = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_head=2, n_layer=2,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
model = GPT2LMHeadModel(config)
model.save_pretrained(OUT, safe_serialization=True)
generation = os.path.join(OUT, "generation_config.json")
if os.path.exists(generation):
    os.remove(generation)  # not part of the weights folder fsdplab reads
print("wrote", OUT)
