#!/usr/bin/env python3
"""make_safetensors_fixture.py - the safetensors files tests/unit/test_safetensors.cpp reads.

They are written by Hugging Face's own serializer (the `safetensors` package: the Rust code that
transformers' save_pretrained runs), so our C++ reader and writer are checked against theirs rather
than against themselves. The wheel needs neither torch nor numpy. Re-run from the repository root:

    python3 -m venv /tmp/st && /tmp/st/bin/pip install safetensors
    /tmp/st/bin/python tests/reference/make_safetensors_fixture.py

It writes, under tests/data/ (committed; made with safetensors 0.8.0):
  safetensors_hf_ours.safetensors   our dtypes only (F32, BF16, I32), with a scalar and an empty
      tensor, and metadata {"format": "pt"}. Our writer must produce these exact bytes.
  safetensors_hf_mixed.safetensors  the same plus dtypes fsdplab does not compute in (F16, F64, I64,
      U8, BOOL): our reader must parse them and keep their bytes, and `expect` must reject them.
Metadata has one key on purpose: the Rust writer keeps metadata in a HashMap, whose order is random
from run to run when there are several keys.

The values are formulas that the C++ test repeats (see OURS and FOREIGN below). bf16 is rounded from
the float32 value to nearest, ties to even, here in plain Python: a second implementation beside
engine/tensor/bf16.hpp. Two of its values are exact ties, so the test sees the tie rule too.
"""
import ctypes
import struct
from pathlib import Path

import safetensors

DATA = Path(__file__).resolve().parent.parent / "data"


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bf16(x):
    bits = f32_bits(x)
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


# name: (safetensors dtype name for TensorSpec, shape, little-endian bytes)
OURS = {
    "h.0.attn.c_attn.weight": ("float32", [2, 3], struct.pack("<6f", *[(i - 2.5) / 3 for i in range(6)])),
    "h.0.ln_1.bias": ("bfloat16", [6], struct.pack(
        "<6H", *[bf16((i + 1) / 7) for i in range(4)], bf16(1 + 2**-8), bf16(1 + 3 * 2**-8))),
    "tokens": ("int32", [3, 2], struct.pack("<6i", *[1000 * i - 2500 for i in range(6)])),
    "scale": ("float32", [], struct.pack("<f", 0.125)),
    "empty": ("float32", [2, 0], b""),
}
FOREIGN = {
    "half": ("float16", [3], struct.pack("<3e", 0.5, -2.0, 65504.0)),
    "double": ("float64", [2], struct.pack("<2d", 1 / 3, -1e300)),
    "steps": ("int64", [2], struct.pack("<2q", 2**40, -1)),
    "pixels": ("uint8", [3], bytes([0, 128, 255])),
    "mask": ("bool", [2, 2], bytes([1, 0, 0, 1])),
}
METADATA = {"format": "pt"}


def write(path, tensors):
    buffers = []  # TensorSpec takes raw pointers: keep every buffer alive until serialize returns
    specs = {}
    for name, (dtype, shape, data) in tensors.items():
        buffer = ctypes.create_string_buffer(data, max(len(data), 1))
        buffers.append(buffer)
        specs[name] = safetensors.TensorSpec(dtype=dtype, shape=shape, data_ptr=ctypes.addressof(buffer),
                                             data_len=len(data))
    blob = safetensors.serialize(specs, metadata=METADATA)
    back = dict(safetensors.deserialize(blob))  # the reference reader accepts what it wrote
    assert {name: bytes(t["data"]) for name, t in back.items()} == {n: t[2] for n, t in tensors.items()}
    path.write_bytes(blob)
    print(f"{path}: {len(blob)} bytes, {len(tensors)} tensors (safetensors {safetensors.__version__})")


if __name__ == "__main__":
    DATA.mkdir(exist_ok=True)
    write(DATA / "safetensors_hf_ours.safetensors", OURS)
    write(DATA / "safetensors_hf_mixed.safetensors", {**OURS, **FOREIGN})
