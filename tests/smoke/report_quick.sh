#!/usr/bin/env bash
# `fsdplab report --quick`: every table of the writeup is there (by its heading), and its numbers are those of
# the commands it cites, run again here: the memory table against `bench --what memory`, the end-to-end table
# against `run --dry-run` and `bench --what overlap`, the loss table and the parameter and gradient distances
# against the `run`s' --losses and --save-final files. Every figure must be drawn, with no display (offscreen:
# app/dashboard/offscreen_gl.hpp), and pass png_check.
#   report_quick.sh FSDPLAB PNG_CHECK OUT_DIR
set -euo pipefail
fsdplab=$(realpath "$1") png_check=$(realpath "$2") out=$(realpath -m "$3")
rm -rf "$out"
mkdir -p "$out/cited"
env -u DISPLAY -u WAYLAND_DISPLAY "$fsdplab" report --quick --out "$out/report"
exec python3 - "$fsdplab" "$png_check" "$out" <<'PY'
import json, math, os, re, shlex, struct, subprocess, sys

fsdplab, png_check, out = sys.argv[1:4]
report_dir = os.path.join(out, "report")
cited = os.path.join(out, "cited")
md = open(os.path.join(report_dir, "report.md")).read()
failures = []

def fail(message):
    failures.append(message)
    print("FAIL:", message)

def section(heading):
    """The text from `heading` (a whole line) to the next heading of the same or a higher level."""
    m = re.search(r"^" + re.escape(heading) + r"$", md, re.M)
    if not m:
        return None
    level = len(heading) - len(heading.lstrip("#"))
    rest = md[m.end():]
    end = re.search(r"^#{1,%d} " % level, rest, re.M)
    return rest[: end.start()] if end else rest

def commands(text):
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    return [line for line in block.group(1).splitlines() if line.strip()] if block else []

def run(command, cwd=cited):
    argv = shlex.split(command)
    assert argv[0] == "fsdplab", command
    done = subprocess.run([fsdplab] + argv[1:], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, DISPLAY="", WAYLAND_DISPLAY=""))
    if done.returncode != 0:
        fail("cited command failed: %s\n%s%s" % (command, done.stdout[-2000:], done.stderr[-2000:]))
    return done.stdout

def table_rows(text):
    """Every Markdown table row of `text` as a list of stripped cells (separator rows left out)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|[ :|-]+\|$", line):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows

# ---- every table, by its heading -------------------------------------------------------------------------
headings = [
    "# fsdplab report: the writeup's tables, measured",
    "### 2.3 Task 3: Forward Pass - reshard_after_forward=True vs False",
    "### 2.4 Task 4: Backward Pass - why reduce-scatter instead of all-reduce?",
    "### 2.5 Task 5: Sharded Optimizer - memory savings",
    "### 3.2 Integration Test: FSDP vs Baseline",
    "#### ToyModel",
    "### 3.3 Parameter & Gradient Verification",
    "### 4.1 Memory Profiling",
    "#### The lecture's Llama 70B on 128 GPUs, beside fsdplab's dry run",
    "### 4.2 Communication Profiling",
    "### 4.3 End-to-End Training Performance",
    "### 4.4 Scaling Analysis",
    "### 6.1 Hybrid Sharding (HSDP)",
]
for h in headings:
    if section(h) is None:
        fail("heading missing: " + h)
    elif not h.startswith("# ") and not table_rows(section(h)):
        fail("no table under: " + h)
if "| Form" not in md or "quick" not in md.split("| Form", 1)[1].split("\n", 1)[0]:
    fail("the header does not say this is the quick form")
for fact in ("| Machine", "| Device", "| Presets", "| fsdplab commit", "| Run time"):
    if fact not in md:
        fail("the header lacks " + fact)

# ---- 4.1: the memory table is bench --what memory's -------------------------------------------------------
memory = section("### 4.1 Memory Profiling")
cmds = commands(memory)
bench = run(cmds[0])
bench_rows = {r[0]: r for r in table_rows(bench)}
checked = 0
for row in table_rows(memory):
    if row[0] in bench_rows and row[0] != "Configuration":
        if row[1:6] != bench_rows[row[0]][1:6]:
            fail("memory row %r: report %s, bench %s" % (row[0], row[1:6], bench_rows[row[0]][1:6]))
        checked += 1
if checked != 4:
    fail("memory: %d of 4 rows found in both the report and `%s`" % (checked, cmds[0]))
# The breakdown: each tag's measured / formula cells, as the bench prints them.
for row in table_rows(memory):
    m = re.search(r"^%s +.*?((?:  +[0-9.]+ / +[0-9.]+)+)$" % re.escape(row[0]), bench, re.M) if row[0] in (
        "param_shard", "param_full", "grad_shard", "grad_full", "optim_state", "activation", "comm_buffer", "workspace") else None
    if m:
        bench_cells = [re.sub(r" +", " ", c.strip()) for c in re.findall(r"[0-9.]+ / +[0-9.]+", m.group(1))]
        if row[2:6] != bench_cells:
            fail("memory breakdown %s: report %s, bench %s" % (row[0], row[2:6], bench_cells))
        checked += 1
if checked != 12:
    fail("memory breakdown: %d of 8 tags compared" % (checked - 4))

# ---- 4.3: the end-to-end table is run --dry-run's and bench --what overlap's --------------------------------
e2e = section("### 4.3 End-to-End Training Performance")
cmds = commands(e2e)
rows = {r[0]: r for r in table_rows(e2e)}
dry = run(cmds[0])
step2 = re.search(r"step 2 ([0-9.]+) ms", dry)
if not step2 or rows["Baseline"][1] != step2.group(1):
    fail("end-to-end baseline %s, `%s` printed %s" % (rows["Baseline"][1], cmds[0], step2 and step2.group(1)))
overlap = run(cmds[1])
t = re.search(r"T_sync ([0-9.]+) ms, T_async ([0-9.]+) ms", overlap)
if not t or rows["FSDP (no prefetch)"][1] != t.group(1) or rows["FSDP (with prefetch)"][1] != t.group(2):
    fail("end-to-end FSDP rows %s / %s, bench --what overlap printed %s" %
         (rows["FSDP (no prefetch)"][1], rows["FSDP (with prefetch)"][1], t and t.groups()))
o = re.search(r"eta = ([0-9.]+|-), overlap ([0-9.]+) %", overlap)
if not o or rows["FSDP (with prefetch)"][6] != o.group(2) + "%":
    fail("end-to-end overlap %s, bench printed %s" % (rows["FSDP (with prefetch)"][6], o and o.group(2)))

# ---- 6.1: each row's links, times and exposed communication are its bench --what overlap's -------------------------
hsdp = section("### 6.1 Hybrid Sharding (HSDP)")
hsdp_rows = [r for r in table_rows(hsdp) if r[0] != "W, nodes"]
hsdp_cmds = commands(hsdp)
if len(hsdp_rows) != len(hsdp_cmds) or len(hsdp_rows) < 2:
    fail("6.1: %d rows under %d commands" % (len(hsdp_rows), len(hsdp_cmds)))
for row, c in zip(hsdp_rows, hsdp_cmds):
    printed = run(c)
    links = re.search(r"links busy: ([0-9.]+) ms within the node, ([0-9.]+) ms between nodes", printed)
    t = re.search(r"T_sync ([0-9.]+) ms, T_async ([0-9.]+) ms.*exposed comm ([0-9.]+) ms", printed)
    got = list(links.groups()) + [t.group(1), t.group(2), t.group(3)] if links and t else None
    if row[2:7] != got:
        fail("6.1 %s %s: report %s, `%s` printed %s" % (row[0], row[1], row[2:7], c, got))
if len(hsdp_rows) >= 2 and not float(hsdp_rows[1][3]) < float(hsdp_rows[0][3]):
    fail("6.1: hybrid's link between nodes (%s ms) is not less busy than full shard's (%s ms)" %
         (hsdp_rows[1][3], hsdp_rows[0][3]))

# ---- 3.2 and 3.3: the losses and distances are those of the cited runs ------------------------------------------
def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (path, name, info["dtype"])
        a, b = info["data_offsets"]
        raw = data[8 + n + a: 8 + n + b]
        tensors[name] = struct.unpack("<%df" % (len(raw) // 4), raw)
    return tensors

def read_losses(path):
    lines = open(path).read().split()[1:]
    return {int(l.split(",")[0]): float(l.split(",")[1]) for l in lines}

def distance(a, b):
    d = 0.0
    for name in sorted(a):
        for x, y in zip(a[name], b[name]):
            d += (x - y) * (x - y)
    return math.sqrt(d)

distances = {r[0]: r for r in table_rows(section("### 3.3 Parameter & Gradient Verification"))}
correctness = section("### 3.2 Integration Test: FSDP vs Baseline")
models = re.findall(r"^#### (.+)$", correctness, re.M)
for model in models:
    text = section("#### " + model)
    cmds = commands(text)
    for c in cmds:
        run(c)
    stem = re.search(r"--losses (\w+)_baseline\.csv", cmds[0]).group(1)
    base = read_losses(os.path.join(cited, stem + "_baseline.csv"))
    fsdp = read_losses(os.path.join(cited, stem + "_fsdp.csv"))
    shown = 0
    for row in table_rows(text):
        if not row[0].isdigit():
            continue
        step = int(row[0])
        if abs(float(row[1]) - base[step]) > 6e-7 or abs(float(row[2]) - fsdp[step]) > 6e-7:
            fail("%s step %d: report %s / %s, --losses %r / %r" % (model, step, row[1], row[2], base[step], fsdp[step]))
        shown += 1
    if shown < 3:
        fail("%s: only %d loss rows" % (model, shown))
    worst = max(abs(fsdp[s] - base[s]) for s in base)
    reported = float(re.search(r"Maximum loss difference: \*\*([0-9.e+-]+)\*\*", text).group(1))
    if abs(reported - worst) > 1.1e-8 + 1e-3 * worst:
        fail("%s: maximum loss difference %g in the report, %g from the --losses files" % (model, reported, worst))
    # 3.3: parameters after training, and the gradient the SGD probe reads (lr = 2^20).
    for c in commands(section("### 3.3 Parameter & Gradient Verification")):
        if re.search(r"--load-init %s_(baseline|fsdp)_final " % stem, c):
            run(c)
    load = lambda who, kind: read_safetensors(os.path.join(cited, "%s_%s_%s" % (stem, who, kind), "model.safetensors"))
    params = {who: load(who, "final") for who in ("baseline", "fsdp")}
    grads = {}
    for who in ("baseline", "fsdp"):
        after = load(who, "probe")
        grads[who] = {n: [(p - q) / 1048576.0 for p, q in zip(params[who][n], after[n])] for n in params[who]}
    row = distances[model]
    for what, got, reported in (("parameter", distance(params["baseline"], params["fsdp"]), row[1]),
                                ("gradient", distance(grads["baseline"], grads["fsdp"]), row[4])):
        if "%.3e" % got != reported:
            fail("%s final %s L2 difference: report %s, the cited runs %.3e" % (model, what, reported, got))
if len(models) != 2:
    fail("3.2: %d models, expected the ToyModel and GPT-2" % len(models))

# ---- figures -------------------------------------------------------------------------------------------------
pngs = re.findall(r"`([a-z_]+\.png)`", md) + re.findall(r"\]\(([a-z_]+\.png)\)", md)
if len(set(pngs)) < 4:
    fail("expected at least 4 figures (timeline, memory, loss curves, bandwidth), found %s" % sorted(set(pngs)))
for png in sorted(set(pngs)):
    if "](%s)" % png not in md:
        fail("figure %s not drawn" % png)
    elif subprocess.run([png_check, os.path.join(report_dir, png), "1400", "860"]).returncode != 0:
        fail("figure %s is blank or the wrong size" % png)

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("REPORT_QUICK_MATCHES_ITS_COMMANDS")
PY
