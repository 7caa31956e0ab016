#!/usr/bin/env python3
"""Every check's "see it" command is one the dashboard takes, and stops where it says.

Each calls fsdplab by a path that, from the repository's root, is the binary that graded (build/app/fsdplab, as the
labs' READMEs run it): a student pastes it as printed.

Grades the untouched skeleton (every check loses its points, so every diagnostic carries its command) with
--json, then runs each distinct command with the implementation of a task and no display: fsdplab must get
past its argument checks to the point where it needs the window ("no display"), or, for `fsdplab run`, to the
skeleton's TODO. A parse error (CLI11's "Run with --help") or a hang fails the test.

A command with `--break task:N` promises to open paused in task N's code. Each is rendered once more with the
reference in the student's place (ASYNC alone where it compared the two, the same code path) as a screenshot
one step in: it must print where the world stopped, in task N.

    python3 tests/smoke/grader_show_commands.py build/app/fsdplab
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile

fsdplab = os.path.realpath(sys.argv[1])
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
env = dict(os.environ, DISPLAY="", WAYLAND_DISPLAY="", OPENBLAS_NUM_THREADS="1")
with tempfile.TemporaryDirectory() as scratch:
    report = os.path.join(scratch, "grade.json")
    subprocess.run([fsdplab, "grade", "--json", report], check=True, env=env, stdout=subprocess.DEVNULL)
    with open(report) as f:
        grade = json.load(f)
    # A check no run or dashboard shows (the errors a task raises on bad input) has no command.
    commands = sorted({c["show"] for t in grade["tasks"] for c in t["checks"] if c["show"]})
    failed = 0
    for command in commands:
        argv = shlex.split(command)
        if os.path.realpath(os.path.join(root, argv[0])) != fsdplab:
            print(f"FAIL: not {os.path.relpath(fsdplab, root)} from the repository's root: {command}")
            failed += 1
            continue
        try:
            done = subprocess.run([fsdplab] + argv[1:], env=env, cwd=scratch, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            print(f"FAIL (time-out): {command}")
            failed += 1
            continue
        out = done.stdout + done.stderr
        if "Run with --help" in out or not ("no display" in out or "not implemented yet" in out):
            print(f"FAIL (exit {done.returncode}): {command}\n    " + "\n    ".join(out.strip().splitlines()[-3:]))
            failed += 1
    breaking = [c for c in commands if " --break task:" in c]
    for command in breaking:
        task = command.split(" --break task:")[1].split()[0]
        argv = [a.replace("=student", "=reference") for a in shlex.split(command)]
        argv = ["async" if a == "impl" and argv[i - 1] == "--compare" else a for i, a in enumerate(argv)]
        shot = os.path.join(scratch, "break.png")
        try:
            done = subprocess.run([fsdplab] + argv[1:] + ["--screenshot", shot, "--steps", "1"], env=env, cwd=scratch,
                                  capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            print(f"FAIL (time-out): {command}")
            failed += 1
            continue
        stops = [l for l in done.stdout.splitlines() if l.startswith("stopped at: ")]
        if done.returncode != 0 or not stops or f" of task {task} (" not in stops[0]:
            out = (done.stdout + done.stderr).strip().splitlines()
            print(f"FAIL (exit {done.returncode}, no stop in task {task}): {command}\n    " + "\n    ".join(out[-3:]))
            failed += 1
    print(f"{len(commands)} distinct commands, {len(breaking)} of them breaking; {failed} failed")
    if failed == 0 and commands and breaking:
        print("EVERY_SHOW_COMMAND_PARSES_AND_BREAKS_WHERE_IT_SAYS")
    sys.exit(1 if failed or not commands or not breaking else 0)
