"""Loads a folder that fsdplab saved (--save-init / --save-final of a gpt2 run) into Hugging Face's
GPT2LMHeadModel and checks every parameter against the file, the tied head included.

Needs PyTorch and transformers (e.g. a venv made with --system-site-packages over Debian's
python3-torch, then `pip install transformers`). Usage:
    fsdplab run --model gpt2 --steps 5 --save-final /tmp/gpt2_final
    python tests/reference/load_into_pytorch.py /tmp/gpt2_final
Prints the parameter count and the model's loss on a fixed batch; exits non-zero on any mismatch.
"""
import json
import struct
import sys

import torch
from transformers import GPT2LMHeadModel


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", f"{name}: fsdplab saves f32, file has {entry['dtype']}"
        begin, end = entry["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32).reshape(entry["shape"])
    return out


def main(folder):
    model = GPT2LMHeadModel.from_pretrained(folder)
    model.eval()
    tensors = read_safetensors(f"{folder}/model.safetensors")
    state = model.state_dict()
    for name, value in tensors.items():
        if not torch.equal(state[name], value):
            sys.exit(f"{name}: the loaded model differs from the file")
    if not torch.equal(model.lm_head.weight, tensors["transformer.wte.weight"]):
        sys.exit("lm_head.weight is not the tied token embedding")
    vocab, ctx = model.config.vocab_size, model.config.n_positions
    ids = (torch.arange(2 * ctx).reshape(2, ctx) * 7) % vocab
    with torch.no_grad():
        loss = model(ids, labels=ids).loss.item()
    print(f"loaded {folder}: {sum(p.numel() for p in model.parameters())} parameters, "
          f"{len(tensors)} tensors equal to the file, tied head ok; loss on a fixed batch {loss:.6f}")


if __name__ == "__main__":
    main(sys.argv[1])
