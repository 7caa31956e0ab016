"""The options bench_gpu.sh gives every run of another trainer (pytorch_gpt2_eager.py, llmc_gpt2.py), as
`fsdplab bench --what train` names them: the model preset, the tokens of a step, how many steps are measured."""

SIZES = {  # (layers, heads, width), as fsdplab's gpt2 presets (engine/nn/gpt2_model.cpp)
    "gpt2": (12, 12, 768),
    "gpt2-medium": (24, 16, 1024),
    "gpt2-large": (36, 20, 1280),
    "gpt2-xl": (48, 25, 1600),
}
VOCAB = 50257
CONTEXT = 1024


def add_step_arguments(parser):
    parser.add_argument("--preset", default="gpt2", choices=sorted(SIZES))
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)


def check_step_arguments(parser, args):
    """Refuses, through parser.error, values no run can take."""
    for name in ("micro_batch", "seq", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: expected at least 1")
    if args.warmup < 0:
        parser.error(f"--warmup {args.warmup}: expected 0 or more")
    if args.seq > CONTEXT:
        parser.error(f"--seq {args.seq}: expected at most GPT-2's context of {CONTEXT} tokens")
