#!/usr/bin/env python3
"""GPT-2 training steps in llm.c (train_gpt2cu, built by scripts/build_llmc.sh): the llm.c row of scripts/bench_gpu.sh.

llm.c's own trainer with its defaults, as the row is defined: bf16 compute with f32 master weights, cuBLAS(Lt)
GEMMs, no cuDNN (its own attention kernels), its fused classifier and AdamW, the vocabulary padded to 50,304, the
GELU recomputed in the backward (`-r 1`); AdamW at lr 1e-3, as fsdplab's and PyTorch's. The
model starts from llm.c's random initialisation (`-e d12`), so no GPT-2 weights are needed; the tokens are random,
written to a file in llm.c's data format, as the other rows' tokens are random.
Prints the mean step time and tokens/s over the measured steps in the line pytorch_gpt2_eager.py prints. llm.c
times each step with CUDA events around the whole step; its first `--warmup` steps are left out.
  --llmc PATH   the trainer (default .gpu/llmc/train_gpt2cu, where build_llmc.sh puts it)
"""
import argparse
import os
import random
import re
import struct
import subprocess
import tempfile

from gpt2_bench_args import SIZES, VOCAB, add_step_arguments, check_step_arguments

DATA_MAGIC, DATA_VERSION = 20240520, 1  # llm.c's token files: 256 int32 of header, then uint16 tokens
# llm.c's line for each step: "step    4/13 | loss 10.98 (+nanz)| norm ... | lr 1.00e-03 | 15.81 ms | ...".
STEP_LINE = re.compile(r"^step\s+(\d+)/\d+ \|.*\| ([0-9.]+) ms \|")


def write_tokens(path, count, seed=0):
    rng = random.Random(seed)
    header = [DATA_MAGIC, DATA_VERSION, count] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{count}H", *(rng.randrange(VOCAB) for _ in range(count))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_arguments(parser)
    parser.add_argument("--llmc", default=".gpu/llmc/train_gpt2cu", help="llm.c's train_gpt2cu")
    args = parser.parse_args()
    check_step_arguments(parser, args)
    if not os.access(args.llmc, os.X_OK):
        raise SystemExit(f"llmc_gpt2.py: no llm.c trainer at {args.llmc}; build it with bash scripts/build_llmc.sh")
    total = args.warmup + args.steps
    tokens = args.micro_batch * args.seq
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "tokens.bin")
        write_tokens(data, (total + 1) * tokens + 1)
        # -e dN: llm.c's GPT-2 of N layers, from its random initialisation.
        command = [os.path.abspath(args.llmc), "-e", f"d{SIZES[args.preset][0]}", "-i", data, "-j", data,
                   "-b", str(args.micro_batch), "-t", str(args.seq), "-x", str(total), "-l", "1e-3",
                   "-v", str(total + 1), "-m", "1", "-s", "0", "-h", "0"]
        print("$ " + " ".join(command), flush=True)
        # From the scratch folder: llm.c looks for gpt2_tokenizer.bin where it starts (and says it found none).
        run = subprocess.run(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(run.stdout, end="")
    if run.returncode != 0:
        raise SystemExit(f"llmc_gpt2.py: train_gpt2cu exited with {run.returncode}")
    times = {}
    for line in run.stdout.splitlines():
        match = STEP_LINE.match(line)
        if match:
            times[int(match.group(1))] = float(match.group(2))
    measured = [times[s] for s in range(args.warmup + 1, total + 1) if s in times]
    if len(measured) != args.steps:
        raise SystemExit(f"llmc_gpt2.py: expected {args.steps} measured step lines (steps {args.warmup + 1} to "
                         f"{total}) in train_gpt2cu's output, found {len(measured)}")
    step_ms = sum(measured) / len(measured)
    print(f"llm.c train_gpt2cu: gpt2 {args.preset}, {args.micro_batch} x {args.seq} tokens, bf16")
    print(f"step {step_ms:.3f} ms, tokens/s {tokens / step_ms * 1e3:.0f}")


if __name__ == "__main__":
    main()
