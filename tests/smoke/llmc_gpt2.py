#!/usr/bin/env python3
"""scripts/llmc_gpt2.py (bench_gpu.sh's llm.c row) against a stand-in for llm.c's train_gpt2cu, since no GPU runs
the real one here: the stand-in checks the options and the token file as llm.c's dataloader reads them
(llmc/dataloader.h: 256 int32 of header, magic 20240520, version 1, the count, then that many uint16 tokens below
the vocabulary, at least B*T+1), then prints llm.c's step lines. The script must average only the steps after the
warmup, and refuse output with a step line missing or a trainer that fails.
  python3 llmc_gpt2.py REPO_ROOT
"""
import os
import stat
import struct
import subprocess
import sys
import tempfile

STAND_IN = r'''#!/usr/bin/env python3
import struct, sys
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
assert args["-e"] == "d12", args
B, T, steps = int(args["-b"]), int(args["-t"]), int(args["-x"])
with open(args["-i"], "rb") as f:
    header = struct.unpack("<256i", f.read(1024))
    assert header[:2] == (20240520, 1), header[:2]
    count = header[2]
    tokens = struct.unpack(f"<{count}H", f.read(2 * count))
    assert f.read() == b"", "bytes after the tokens"
assert count >= B * T + 1 and max(tokens) < 50257, (count, max(tokens))
assert args["-j"] == args["-i"] and int(args["-v"]) > steps and args["-s"] == "0"
print("Multi-GPU support is disabled. Using a single GPU.")
for step in range(1, steps + 1):
    if step == MISSING:
        continue
    ms = 100.0 if step <= 3 else 10.0 + step  # the warmup steps are slow, as a first cuBLAS call is
    print(f"step {step:4d}/{steps} | loss 10.981 (+nanz)| norm 9.1234 (+nanz)| lr 1.00e-03 | {ms:.2f} ms | "
          f"40.1% bf16 MFU | 300000 tok/s")
sys.exit(EXIT)
'''


def run(root, work, missing=0, exit_code=0):
    trainer = os.path.join(work, f"train_gpt2cu_{missing}_{exit_code}")
    with open(trainer, "w") as f:
        f.write(STAND_IN.replace("MISSING", str(missing)).replace("EXIT", str(exit_code)))
    os.chmod(trainer, os.stat(trainer).st_mode | stat.S_IEXEC)
    return subprocess.run([sys.executable, os.path.join(root, "scripts", "llmc_gpt2.py"), "--llmc", trainer,
                           "--micro-batch", "2", "--seq", "64", "--steps", "4", "--warmup", "3"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))  # no __pycache__ in the tree


def main():
    root = sys.argv[1]
    with tempfile.TemporaryDirectory() as work:
        good = run(root, work)
        # steps 4..7 take 14, 15, 16, 17 ms: the mean 15.5 ms, 2 x 64 tokens in it.
        expected = "step 15.500 ms, tokens/s 8258"
        if good.returncode != 0 or expected not in good.stdout.splitlines():
            sys.exit(f"expected '{expected}' and exit 0, got exit {good.returncode}:\n{good.stdout}")
        missing = run(root, work, missing=5)
        if missing.returncode == 0 or "expected 4 measured step lines" not in missing.stdout:
            sys.exit(f"a missing step line must be refused, got exit {missing.returncode}:\n{missing.stdout}")
        failing = run(root, work, exit_code=3)
        if failing.returncode == 0 or "train_gpt2cu exited with 3" not in failing.stdout:
            sys.exit(f"a failing trainer must fail the row, got exit {failing.returncode}:\n{failing.stdout}")
    print("LLMC_ROW_READS_LLMC_STEPS")


if __name__ == "__main__":
    main()
