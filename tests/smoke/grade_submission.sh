#!/usr/bin/env bash
# `fsdplab grade --submission` end to end, as a course grades what its students returned (grader/README.md,
# "Grading submissions"), with this build's fsdplab and a build folder of the test's own:
#   1. a submission with seven labs solved (the references pasted, tests/labs/as_student.cmake), lab 03 that does
#      not compile and lab 09 missing: the first build compiles the labs alone and links the engine, grader and
#      dashboard of BUILD_DIR (CMakeLists.txt, [Note: a submission's build]), and the grade of tasks 1, 3
#      and 9 gives task 1 every point, tasks 3 and 9 none with their reasons (the compiler's file and line; "not
#      in the submission"), in the text and in the JSON, which names the submission and this tree's commit, and
#      gives the SHA-256 of the lab file graded (the one returned); the compiler's own messages name the student's
#      file, not the build's copy of it;
#   2. lab 03 fixed, unpacked with a time older than the first build's (as tar and cp -p keep them), and
#      BUILD_DIR's settings written since: the second build configures again, recompiles that one file, nothing of
#      the engine, and task 3 earns every point, the course's example held-out case too: the text, the student's,
#      names that case without its settings, which the JSON keeps;
#   3. the submission folder is as it was: nothing written there;
#   4. a build folder holding someone's files is refused, and left as it was;
#   5. the same labs returned without their labs/ level, or with it one folder down, are graded from where they
#      are, saying so (no rebuild);
#   6. a folder holding no lab file is refused, and its --json says it was not graded, and why; a lab file that is a
#      link to another student's is not built, saying so; an archive is refused with a word on unpacking it;
#   7. a lab that returns the reference's task, one that includes the reference's source, and one whose class of its
#      own calls the reference's, score 0, saying so;
#   8. a lab whose code writes another student's grade and a file of its own outside its sandbox, and reads that
#      grade, before main: on a kernel with Landlock each write and the read are refused (EACCES), nothing outside
#      changes, and the lab is graded as usual, its --json written where asked; without Landlock the grader says the
#      code runs with the TA's rights.
#   grade_submission.sh SOURCE_ROOT BUILD_DIR
# The scratch folder is removed at the end (FSDPLAB_KEEP_SUBMISSION=1 keeps it).
set -uo pipefail
root=$1 build=$2
fsdplab="$build/app/fsdplab"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/fsdplab-submission.XXXXXX")"
if [[ "${FSDPLAB_KEEP_SUBMISSION:-0}" == 1 ]]; then
  echo "grade_submission: keeping $scratch"
else
  trap 'rm -rf "$scratch"' EXIT
fi
fail() { echo "grade_submission: FAILED: $*"; exit 1; }
log() { echo "grade_submission: $*"; }
export OPENBLAS_NUM_THREADS=1

tasks=(meta_init flat_parameter forward backward sharded_optimizer overlap integration hybrid_shard cpu_offload)
labs=(01-meta-init 02-flat-parameter 03-forward 04-backward 05-sharded-optimizer 06-prefetch-overlap 07-integration
      08-hybrid-shard 09-cpu-offload)
sub="$scratch/returned/alice"
# as_student LAB_INDEX FILE: the reference of that task written to FILE as the student's.
as_student() {
  cmake -DIN="$root/engine/fsdp/${tasks[$1]}_reference.cpp" -DNAME="${tasks[$1]}" -DOUT="$2" \
    -P "$root/tests/labs/as_student.cmake" || fail "could not paste the reference of ${tasks[$1]}"
}
for i in 0 1 2 3 4 5 6 7; do
  mkdir -p "$sub/labs/${labs[$i]}"
  as_student "$i" "$sub/labs/${labs[$i]}/student.cpp"
done
broken="$sub/labs/03-forward/student.cpp"
echo "int this_line_does_not_compile = ;" >>"$broken"
broken_line=$(wc -l <"$broken")
listing() { (cd "$sub" && find . -printf '%p %s %T@\n' | LC_ALL=C sort); }
before="$(listing)"

# ---- 1. the first build, and a grade with a lab that does not build and one missing ----------------------
start=$(date +%s)
"$fsdplab" grade --submission "$sub" --submission-build "$scratch/sb" --task 1 --task 3 --task 9 \
  --json "$scratch/alice.json" >"$scratch/first.txt" 2>"$scratch/first.log" ||
  { tail -n 40 "$scratch/first.log"; cat "$scratch/first.txt"; fail "the first grading exited with $?"; }
log "first build and grade in $(($(date +%s) - start)) s"
grep -q "the labs compile, and link the engine, grader and dashboard this fsdplab's build compiled ('$build')" \
  "$scratch/first.log" || fail "no word of what the first build compiles: $(head -n 5 "$scratch/first.log")"
compiled_elsewhere="$(grep -E "Building CXX object (engine|grader)/|fsdplab_(app|dashboard|fsdp_flags|mutants)\.dir" "$scratch/first.log")"
[[ -z "$compiled_elsewhere" ]] || fail "the first build compiled more than the labs: $(head -n 3 <<<"$compiled_elsewhere")"
grep -q "01-meta-init/student.cpp.o" "$scratch/first.log" || fail "the first build did not compile lab 01"
total="$(grep -E '^total: ' "$scratch/first.txt")"
[[ "$total" == "total: 16/42 points"* ]] || { cat "$scratch/first.txt"; fail "expected task 1's 16 of 42 points; got '$total'"; }
grep -qE "NOT BUILT  labs/03-forward/student.cpp does not compile: labs/03-forward/student.cpp:$broken_line:[0-9]+: error" \
  "$scratch/first.txt" || { cat "$scratch/first.txt"; fail "task 3's reason does not name the line that does not compile"; }
# The compiler's messages on stderr name the student's own file, which their editor opens, not the build's copy of it.
grep -qE "^$sub/labs/03-forward/student.cpp:$broken_line:[0-9]+: error" "$scratch/first.log" ||
  { grep -n "error" "$scratch/first.log" | head; fail "the compiler's message does not name the submission's own file"; }
! grep -qE "^$scratch/sb/submission/labs/.*: error" "$scratch/first.log" ||
  fail "a compiler's message names the build's copy of a lab: $(grep -E ": error" "$scratch/first.log" | head -n 2)"
grep -q "NOT BUILT  labs/09-cpu-offload/student.cpp is not in the submission" "$scratch/first.txt" ||
  { cat "$scratch/first.txt"; fail "task 9's reason does not say its file is missing"; }
python3 - "$scratch/alice.json" "$sub" "$(git -C "$root" rev-parse HEAD)" <<'EOF' || fail "the gradebook is not what the text says"
import hashlib, json, sys
grade = json.load(open(sys.argv[1]))
assert grade["submission"]["path"] == sys.argv[2], grade["submission"]
assert grade["graded"] is True
assert grade["fsdplab_commit"].startswith(sys.argv[3]), (grade["fsdplab_commit"], sys.argv[3])
assert (grade["points"], grade["max"]) == (16, 42), (grade["points"], grade["max"])
assert grade["built_in"] == {"points": 16, "max": 42} and grade["held_out_cases"] == {"points": 0, "max": 0}, grade
tasks = {t["task"]: t for t in grade["tasks"]}
assert tasks[1]["points"] == tasks[1]["max"] == 16 and "not_built" not in tasks[1], tasks[1].get("not_built")
returned = hashlib.sha256(open(sys.argv[2] + "/labs/01-meta-init/student.cpp", "rb").read()).hexdigest()
assert tasks[1]["sha256"] == returned, (tasks[1].get("sha256"), returned)
assert "sha256" not in tasks[3] and "sha256" not in tasks[9], "a lab not built has no file graded"
for n in (3, 9):
    assert tasks[n]["points"] == 0 and tasks[n]["not_built"], tasks[n]
    assert all(c["end"] == "not built" for c in tasks[n]["checks"]), n
assert "does not compile" in tasks[3]["not_built"] and "is not in the submission" in tasks[9]["not_built"]
EOF

# ---- 2. lab 03 fixed, with an old time: only it recompiles ------------------------------------------------
as_student 2 "$broken"
touch -d "2001-01-01" "$broken"
touch "$build/fsdplab-submission-settings.cmake"  # as when BUILD_DIR is configured again
start=$(date +%s)
"$fsdplab" grade --submission "$sub" --submission-build "$scratch/sb" --task 3 --cases "$root/grader/cases/example" \
  --json "$scratch/second.json" >"$scratch/second.txt" 2>"$scratch/second.log" ||
  { tail -n 40 "$scratch/second.log"; fail "the second grading exited with $?"; }
log "second build and grade in $(($(date +%s) - start)) s"
grep -q "configuring '$scratch/sb' again, to link the libraries of '$build'" "$scratch/second.log" ||
  fail "the build's settings changed and the submission's build was not configured again: $(head -n 5 "$scratch/second.log")"
grep -q "03-forward/student.cpp.o" "$scratch/second.log" || fail "the fixed lab 03 was not recompiled"
! grep -q "01-meta-init/student.cpp.o" "$scratch/second.log" || fail "lab 01, unchanged, was recompiled"
! grep -q "Building CXX object engine/" "$scratch/second.log" ||
  fail "the second submission recompiled the engine: $(grep -m 3 'Building CXX object engine/' "$scratch/second.log")"
total="$(grep -E '^total: ' "$scratch/second.txt")"
[[ "$total" == "total: 15/15 points"* ]] ||
  { cat "$scratch/second.txt"; fail "expected task 3's 13 of 13 points and the held-out case's 2; got '$total'"; }
grep -qE "^    pass  case:W5 grad_op +held-out case 'W5 grad_op' +2/2$" "$scratch/second.txt" ||
  { cat "$scratch/second.txt"; fail "the student's text does not name the held-out case with its points"; }
! grep -n "W=5" "$scratch/second.txt" || fail "the student's text shows the held-out case's settings"
python3 - "$scratch/second.json" <<'EOF' || fail "the JSON does not keep the held-out case's settings"
import json, sys
case = [c for c in json.load(open(sys.argv[1]))["tasks"][0]["checks"] if c["check"] == "case:W5 grad_op"][0]
assert "gpt2 W=5 grad_op" in case["title"] and "--world 5" in case["show"], case
EOF

# ---- 3. nothing was written into the submission -----------------------------------------------------------
touch -d "2001-01-01" "$broken"  # the test's own edit above, not the grader's
before_03="$(grep -v '03-forward' <<<"$before")" after_03="$(listing | grep -v '03-forward')"
[[ "$before_03" == "$after_03" ]] || fail "the grading wrote into the submission: $(diff <(echo "$before_03") <(echo "$after_03"))"

# ---- 4. someone's folder as the build folder ----------------------------------------------------------------
mkdir "$scratch/notes" && echo mine >"$scratch/notes/notes.txt"
"$fsdplab" grade --submission "$sub" --submission-build "$scratch/notes" >"$scratch/refused.txt" 2>&1 &&
  fail "a build folder holding someone's files was taken"
grep -q "holds files and is not a submission's build" "$scratch/refused.txt" || fail "no reason given: $(cat "$scratch/refused.txt")"
[[ "$(ls -A "$scratch/notes")" == notes.txt ]] || fail "the refused folder was written into: $(ls -A "$scratch/notes")"

# ---- 5. the labs/ level left out ----------------------------------------------------------------------------
flat="$scratch/returned/frank"
mkdir -p "$flat" && cp -r "$sub/labs/." "$flat/"
"$fsdplab" grade --submission "$flat" --submission-build "$scratch/sb" --task 1 >"$scratch/flat.txt" 2>"$scratch/flat.log" ||
  { cat "$scratch/flat.log"; fail "a submission without its labs/ level was not graded"; }
grep -q "its lab folders are in the submission folder itself, not in a labs/; graded from" "$scratch/flat.log" ||
  fail "no word of where the labs were found: $(cat "$scratch/flat.log")"
grep -q "Building CXX object engine/" "$scratch/flat.log" && fail "the same labs elsewhere rebuilt the engine"
[[ "$(grep -E '^total: ' "$scratch/flat.txt")" == "total: 16/16 points"* ]] || { cat "$scratch/flat.txt"; fail "task 1 lost points"; }
# ... and labs/ one folder down, as an archive unpacks
nested="$scratch/returned/gina"
mkdir -p "$nested/handout" && cp -r "$sub/labs" "$nested/handout/"
"$fsdplab" grade --submission "$nested" --submission-build "$scratch/sb" --task 1 >"$scratch/nested.txt" \
  2>"$scratch/nested.log" || { cat "$scratch/nested.log"; fail "a submission with its labs/ one folder down was not graded"; }
grep -q "its labs/ is one folder down, in 'handout/labs'; graded from" "$scratch/nested.log" ||
  fail "no word of where the labs were found: $(cat "$scratch/nested.log")"

# ---- 6. no lab file at all: refused, and the gradebook's file says so -----------------------------------------
mkdir -p "$scratch/returned/nobody"
"$fsdplab" grade --submission "$scratch/returned/nobody" --submission-build "$scratch/sb" \
  --json "$scratch/nobody.json" >"$scratch/nobody.txt" 2>&1 && fail "a folder with no lab file was graded"
python3 - "$scratch/nobody.json" <<'EOF' || fail "the refused submission's JSON: $(cat "$scratch/nobody.json")"
import json, sys
grade = json.load(open(sys.argv[1]))
assert grade["graded"] is False and "holds none of the 9 lab files" in grade["reason"], grade
assert grade["submission"]["path"].endswith("returned/nobody"), grade["submission"]
EOF
# ... a lab file that is a link to another student's is not built, saying so; an archive is to be unpacked first
eve="$scratch/returned/eve"
mkdir -p "$eve/labs/01-meta-init" && ln -s "$sub/labs/01-meta-init/student.cpp" "$eve/labs/01-meta-init/student.cpp"
"$fsdplab" grade --submission "$eve" --submission-build "$scratch/sb" --task 1 >"$scratch/eve.txt" 2>"$scratch/eve.log" ||
  { tail -n 20 "$scratch/eve.log"; fail "eve's submission was not graded"; }
grep -q "NOT BUILT  labs/01-meta-init/student.cpp is a link to '[^']*/alice/labs/01-meta-init/student.cpp', outside the submission folder" \
  "$scratch/eve.txt" || { cat "$scratch/eve.txt"; fail "a lab file linked to another student's was graded"; }
touch "$scratch/returned/bob.zip"
"$fsdplab" grade --submission "$scratch/returned/bob.zip" --submission-build "$scratch/sb" >"$scratch/zip.txt" 2>&1 &&
  fail "an archive was graded"
grep -q "'bob.zip' looks like an archive: unpack it into a folder of its own and grade that folder" "$scratch/zip.txt" ||
  fail "no word of unpacking the archive: $(cat "$scratch/zip.txt")"
# ---- 7. the reference handed over as a student's: its task scores 0 --------------------------------------------
mallory="$scratch/returned/mallory"
mkdir -p "$mallory/labs/01-meta-init" "$mallory/labs/02-flat-parameter" "$mallory/labs/05-sharded-optimizer"
cat >"$mallory/labs/01-meta-init/student.cpp" <<'EOF'
#include "engine/fsdp/meta_init.hpp"
namespace fsdplab {
namespace {
class Mine final : public MetaInitTask {
  void init_shard(std::span<const ShardSlice> s, const Tensor& shard, std::uint64_t seed) const override {
    reference_meta_init().init_shard(s, shard, seed);
  }
};
}  // namespace
const MetaInitTask& student_meta_init() {
  static const Mine mine;
  return mine;
}
}  // namespace fsdplab
EOF
cat >"$mallory/labs/02-flat-parameter/student.cpp" <<'EOF'
#include "engine/fsdp/flat_parameter.hpp"
namespace fsdplab {
const FlatParameterTask& student_flat_parameter() { return reference_flat_parameter(); }
}  // namespace fsdplab
EOF
cat >"$mallory/labs/05-sharded-optimizer/student.cpp" <<'EOF'
#include "engine/fsdp/sharded_optimizer_reference.cpp"
namespace fsdplab {
const ShardedOptimizerTask& student_sharded_optimizer() { return reference_sharded_optimizer(); }
}  // namespace fsdplab
EOF
"$fsdplab" grade --submission "$mallory" --submission-build "$scratch/sb" --task 1 --task 2 --task 5 --json "$scratch/mallory.json" \
  >"$scratch/mallory.txt" 2>"$scratch/mallory.log" || { tail -n 40 "$scratch/mallory.log"; fail "mallory's labs were not graded"; }
[[ "$(grep -E '^total: ' "$scratch/mallory.txt")" == "total: 0/"* ]] || { cat "$scratch/mallory.txt"; fail "the reference scored as a student's"; }
for lab in 02-flat-parameter 05-sharded-optimizer; do
  grep -q "REFERENCE  labs/$lab/student.cpp hands the grader the reference's implementation (engine/fsdp/[a-z_]*_reference.cpp:[0-9]*), not code of its own" \
    "$scratch/mallory.txt" || { cat "$scratch/mallory.txt"; fail "lab $lab's reference was not named"; }
done
grep -q "REFERENCE  labs/01-meta-init/student.cpp hands the grader the reference's implementation (labs/01-meta-init/student.cpp:[0-9]*), not code of its own: line 6 names reference_meta_init()" \
  "$scratch/mallory.txt" || { cat "$scratch/mallory.txt"; fail "lab 01's class calling the reference's was not named"; }
python3 - "$scratch/mallory.json" <<'EOF' || fail "the gradebook does not say mallory's labs are the reference's"
import json, sys
tasks = {t["task"]: t for t in json.load(open(sys.argv[1]))["tasks"]}
for n in (1, 2, 5):
    assert tasks[n]["points"] == 0 and "hands the grader the reference's implementation" in tasks[n]["uses_reference"], tasks[n]
    assert all(c["end"] == "uses the reference" for c in tasks[n]["checks"]), n
EOF

# ---- 8. a lab that reads or writes outside its sandbox: refused, and graded as usual ---------------------------
trudy="$scratch/returned/trudy"
mkdir -p "$trudy/labs/01-meta-init"
cp "$sub/labs/01-meta-init/student.cpp" "$trudy/labs/01-meta-init/student.cpp"
cat >>"$trudy/labs/01-meta-init/student.cpp" <<EOF
#include <cerrno>
#include <cstdio>
#include <cstring>
namespace {
const int written_before_main = [] {
  for (const char* path : {"$scratch/alice.json", "$scratch/planted"}) {
    std::FILE* file = std::fopen(path, "w");
    std::fprintf(stderr, "trudy writes %s: %s\n", path, file ? "written" : std::strerror(errno));
    if (file) std::fclose(file);
  }
  std::FILE* other = std::fopen("$scratch/alice.json", "r");
  std::fprintf(stderr, "trudy reads $scratch/alice.json: %s\n", other ? "read" : std::strerror(errno));
  if (other) std::fclose(other);
  return 0;
}();
}  // namespace
EOF
alice_before="$(sha256sum <"$scratch/alice.json")"
"$fsdplab" grade --submission "$trudy" --submission-build "$scratch/sb" --task 1 --json "$scratch/trudy.json" \
  >"$scratch/trudy.txt" 2>"$scratch/trudy.log" || { tail -n 40 "$scratch/trudy.log"; fail "trudy's lab was not graded"; }
[[ "$(grep -E '^total: ' "$scratch/trudy.txt")" == "total: 16/16 points"* ]] || { cat "$scratch/trudy.txt"; fail "trudy's task 1 lost points"; }
grep -q "^fsdplab grade --submission: the grade's JSON is in '$scratch/trudy.json'$" "$scratch/trudy.log" ||
  { cat "$scratch/trudy.log"; fail "the JSON was not named where it was asked, on stderr"; }
! grep -q "json" "$scratch/trudy.txt" || { cat "$scratch/trudy.txt"; fail "the student's text names the course's JSON"; }
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["tasks"][0]["points"] == 16' "$scratch/trudy.json" ||
  fail "trudy's JSON was not written where --json asked: $(head -c 300 "$scratch/trudy.json")"
if grep -q "the submission's code may read only the system's files and '$scratch/sb', write only in '" "$scratch/trudy.log"; then
  [[ "$(grep -c "^trudy writes .*: Permission denied$" "$scratch/trudy.log")" == 2 ]] ||
    fail "a write outside the sandbox was not refused: $(grep '^trudy' "$scratch/trudy.log")"
  grep -q "^trudy reads $scratch/alice.json: Permission denied$" "$scratch/trudy.log" ||
    fail "another student's grade was readable in the sandbox: $(grep '^trudy' "$scratch/trudy.log")"
  [[ "$(sha256sum <"$scratch/alice.json")" == "$alice_before" && ! -e "$scratch/planted" ]] ||
    fail "the sandboxed lab changed files outside its sandbox"
  # The build runs sandboxed too: a lab that includes another student's file does not compile.
  mkdir -p "$scratch/returned/grace/labs/01-meta-init"
  printf '#include "%s"\n' "$sub/labs/01-meta-init/student.cpp" >"$scratch/returned/grace/labs/01-meta-init/student.cpp"
  "$fsdplab" grade --submission "$scratch/returned/grace" --submission-build "$scratch/sb" --task 1 \
    >"$scratch/grace.txt" 2>"$scratch/grace.log" || { tail -n 40 "$scratch/grace.log"; fail "grace's lab was not graded"; }
  grep -q "NOT BUILT  labs/01-meta-init/student.cpp does not compile: .*: Permission denied" "$scratch/grace.txt" ||
    { cat "$scratch/grace.txt"; fail "a lab compiled another student's file"; }
  sandboxed="a lab's reads and writes outside its sandbox refused, its build's too"
else
  grep -q "the submission's code runs with your rights: " "$scratch/trudy.log" ||
    fail "the grader neither sandboxed the lab nor said so: $(head -n 5 "$scratch/trudy.log")"
  sandboxed="no Landlock in this kernel, said"
fi

# ---- 9. a lab that ends the grade before it is done: not graded, whatever it printed ---------------------------
ivan="$scratch/returned/ivan"
mkdir -p "$ivan/labs/01-meta-init"
cp "$sub/labs/01-meta-init/student.cpp" "$ivan/labs/01-meta-init/student.cpp"
cat >>"$ivan/labs/01-meta-init/student.cpp" <<'EOF'
#include <cstdio>
#include <cstdlib>
namespace {
const int ended_before_main = [] {
  std::printf("total: 16/16 points (100.0%%) in 1.0 s\n");
  std::fflush(stdout);
  std::exit(0);
  return 0;
}();
}  // namespace
EOF
"$fsdplab" grade --submission "$ivan" --submission-build "$scratch/sb" --task 1 --json "$scratch/ivan.json" \
  >"$scratch/ivan.txt" 2>"$scratch/ivan.log" && { cat "$scratch/ivan.txt"; fail "a grade its lab ended early was filed"; }
grep -q "^fsdplab grade --submission: not graded: the submission's fsdplab grade exited with 0, and wrote no grade" \
  "$scratch/ivan.txt" || { cat "$scratch/ivan.txt"; fail "the student's text does not say it was not graded"; }
python3 - "$scratch/ivan.json" <<'EOF' || fail "ivan's JSON: $(cat "$scratch/ivan.json")"
import json, sys
grade = json.load(open(sys.argv[1]))
assert grade["graded"] is False and "wrote no grade" in grade["reason"], grade
EOF

echo "grade_submission: OK — built once, a lab that does not compile and one missing cost their tasks only, a fixed lab recompiled alone, the submission untouched, labs without their labs/ level graded, a refusal written to its JSON, the reference handed over scored 0, $sandboxed, a grade ended early not filed"
