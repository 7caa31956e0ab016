#!/usr/bin/env bash
# Writes the students' repository — a handout without the answers — to OUT:
#   bash scripts/make_handout.sh [--untracked] OUT
#
# It holds the git-tracked files of this tree (`git ls-files`; with --untracked also the untracked files git
# does not ignore, as the test tests/smoke/handout.sh uses it on a working tree), minus what answers or
# grades the labs:
#   engine/fsdp/*_reference.cpp   the nine reference tasks: shipped as object code instead, in
#                                 prebuilt/libfsdplab_reference_tasks.a (engine/CMakeLists.txt imports it),
#                                 so every task a student has not done yet runs on the reference
#   labs/mutants/*                the grader's known-wrong tasks: replaced by an empty catalogue
#                                 (labs/mutants/mutant_catalog.cpp); only the files that hold no mutant
#                                 stay (mutants_kept below: the header, and find_mutant.cpp, which says
#                                 "this build has no mutants"), so a new mutant file is left out unasked
#   grader/cases/held-out/        a course's hidden grading cases; a grading case anywhere else but
#                                 grader/cases/example/ (a "name" and a "task" in a *.json) is refused:
#                                 nothing is written, and the message says where hidden cases belong
#   tests/                        the engine's own suite, which uses the references' sources; a student's
#                                 checks are `fsdplab grade`
#   writeup/WRITEUP.md            the course's own writeup of the assignment: the nine tasks' reference code
#                                 quoted line by line, and every question answered
# The files are copied as they are in the working tree, uncommitted edits included: make a class's handout from a
# clean checkout. The prebuilt library comes from the build in FSDPLAB_BUILD_DIR (default: build/, configured as
# scripts/build.sh does when it is not yet, and its target fsdplab_reference_tasks brought up to date there), with
# its debug information stripped. OUT becomes a fresh git
# repository with one commit, "handout", where git is available. Everything is written to OUT.tmp-XXXXXX
# beside OUT and renamed to OUT at the end: a failure leaves nothing half-made. OUT must not exist or be
# an empty folder.
set -euo pipefail

usage="usage: bash scripts/make_handout.sh [--untracked] OUT"
untracked=0
out=""
for arg in "$@"; do
  case "$arg" in
    --untracked) untracked=1 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    -*) echo "make_handout: unknown option '$arg'; $usage" >&2; exit 2 ;;
    *) [[ -z "$out" ]] || { echo "make_handout: one OUT folder expected, got '$out' and '$arg'" >&2; exit 2; }
       out="$arg" ;;
  esac
done
[[ -n "$out" ]] || { echo "make_handout: no OUT folder given; $usage" >&2; exit 2; }

fail() { echo "make_handout: $*" >&2; exit 1; }

root="$(cd "$(dirname "$0")/.." && pwd)"
reference_tasks=(meta_init flat_parameter forward backward sharded_optimizer overlap integration hybrid_shard
                 cpu_offload)

# ---- what is asked -------------------------------------------------------------------------------------
out="${out%/}"
if [[ -e "$out" || -L "$out" ]]; then
  [[ -d "$out" && ! -L "$out" ]] || fail "'$out' exists and is not a folder; expected a new or empty folder"
  [[ -z "$(ls -A "$out")" ]] || fail "'$out' is not empty; expected a new or empty folder (nothing was written)"
fi
out_parent="$(dirname "$out")"
[[ -d "$out_parent" && -w "$out_parent" ]] || fail "cannot write into '$out_parent' (OUT's folder): it must exist and be writable"
out_abs="$(cd "$out_parent" && pwd)/$(basename "$out")"
case "$out_abs/" in
  "$root"/*) fail "'$out_abs' is inside the source tree '$root'; expected a folder outside it" ;;
esac

command -v git >/dev/null || fail "needs git to list the tree's files (git ls-files)"
git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
  fail "'$root' is not a git work tree; the handout is made of its git-tracked files"
for task in "${reference_tasks[@]}"; do
  [[ -f "$root/engine/fsdp/${task}_reference.cpp" ]] ||
    fail "'$root' lacks engine/fsdp/${task}_reference.cpp: a handout is made from the course's tree, which has all nine references (is this already a handout?)"
done

# ---- the files it holds --------------------------------------------------------------------------------
listing=(--cached)
((untracked)) && listing+=(--others --exclude-standard)
# Left out: the references, the mutants (all of labs/mutants/ but mutants_kept), the held-out cases, tests/,
# the course's writeup.
left_out='^(engine/fsdp/[^/]*_reference\.cpp|labs/mutants/.*|grader/cases/held-out/.*|tests/.*|writeup/WRITEUP\.md)$'
mutants_kept=' labs/mutants/mutants.hpp labs/mutants/find_mutant.cpp '
files=()
while IFS= read -r -d '' file; do
  if [[ "$file" =~ $left_out && "$mutants_kept" != *" $file "* ]]; then continue; fi
  [[ -e "$root/$file" || -L "$root/$file" ]] || continue  # tracked, but deleted in the work tree
  files+=("$file")
done < <(git -C "$root" ls-files -z "${listing[@]}" | sort -zu)
# Hidden cases kept anywhere but grader/cases/held-out/ (grader/README.md) would reach every student.
cases=()
for file in "${files[@]}"; do
  [[ "$file" == *.json && "$file" != grader/cases/example/* && -f "$root/$file" ]] || continue
  if grep -q '"task"[[:space:]]*:' "$root/$file" && grep -q '"name"[[:space:]]*:' "$root/$file"; then
    cases+=("$file")
  fi
done
((${#cases[@]} == 0)) ||
  fail "${cases[*]}: a grading case (a \"name\" and a \"task\") would be handed out; keep held-out cases in grader/cases/held-out/, which the handout leaves out, or outside this tree (nothing was written)"

# ---- the reference tasks as object code ----------------------------------------------------------------
build="${FSDPLAB_BUILD_DIR:-$root/build}"
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  echo "make_handout: configuring '$build' (scripts/build.sh's default preset)" >&2
  if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
  fi
  if [[ "$build" == "$root/build" ]]; then
    (cd "$root" && cmake --preset default >/dev/null)
  else
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFSDPLAB_WERROR=ON >/dev/null
  fi
fi
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
[[ "$(cache_value CMAKE_HOME_DIRECTORY)" -ef "$root" ]] ||
  fail "'$build' was configured from '$(cache_value CMAKE_HOME_DIRECTORY)', not '$root'; set FSDPLAB_BUILD_DIR to a build of this tree"
[[ -z "$(cache_value FSDPLAB_SANITIZE)" ]] ||
  fail "'$build' is a sanitizer build (FSDPLAB_SANITIZE=$(cache_value FSDPLAB_SANITIZE)); the handout's library must be a plain one (FSDPLAB_BUILD_DIR)"
cmake --build "$build" --target fsdplab_reference_tasks >&2
library="$build/engine/libfsdplab_reference_tasks.a"
[[ -f "$library" ]] || fail "building fsdplab_reference_tasks in '$build' left no '$library'"
compiler="$(cache_value CMAKE_CXX_COMPILER)"
compiler_version="$("$compiler" --version | head -n 1)"
build_type="$(cache_value CMAKE_BUILD_TYPE)"

# ---- the handout, staged beside OUT --------------------------------------------------------------------
stage="$(mktemp -d "$out_abs.tmp-XXXXXX")"
chmod "$(printf '%o' $((0777 & ~0$(umask))))" "$stage"  # mktemp's folder is private; OUT is an ordinary one
trap 'rm -rf "$stage"' EXIT

printf '%s\0' "${files[@]}" > "$stage/.files"
tar -C "$root" --null -T "$stage/.files" -cf - | tar -C "$stage" -xf -
count="${#files[@]}"
rm "$stage/.files"

mkdir -p "$stage/labs/mutants"
cat > "$stage/labs/mutants/mutant_catalog.cpp" <<'EOF'
// mutant_catalog.cpp — the grader's catalogue of known-wrong tasks, empty: a handout has no mutants.
// (The course's tree keeps them in labs/mutants/ to check that `fsdplab grade --mutants` catches each; a
// student's grade does not use them. Written by scripts/make_handout.sh.)
#include "labs/mutants/mutants.hpp"

namespace fsdplab {

std::span<const Mutant> mutant_catalog() { return {}; }

}  // namespace fsdplab
EOF

# The README is the course tree's: say once, at its top, what this copy lacks and where to read instead.
{
  head -n 1 "$stage/README.md"
  cat <<'EOF'

> **This is a handout.** The reference tasks (`engine/fsdp/*_reference.cpp`) are object code here
> (`prebuilt/`), and the engine's own test suite, the grader's mutants and the course's writeup
> (`writeup/WRITEUP.md`; `fsdplab report` still measures every table) stay with the course. Where this
> README names a `*_reference.cpp`, read the task's interface (`engine/fsdp/*_task.hpp`, `meta_init.hpp`,
> `flat_parameter.hpp`, `sharded_optimizer.hpp`) and its lab's README; `bash scripts/test.sh` builds and
> grades your labs (`fsdplab grade`).
EOF
  tail -n +2 "$stage/README.md"
} > "$stage/README.md.new"
mv "$stage/README.md.new" "$stage/README.md"

mkdir -p "$stage/prebuilt"
cp "$library" "$stage/prebuilt/libfsdplab_reference_tasks.a"
strip --strip-debug "$stage/prebuilt/libfsdplab_reference_tasks.a"
# (Read whole, then searched: `grep -q` closing a pipe early would fail the pipeline under pipefail.)
sections="$(readelf -S "$stage/prebuilt/libfsdplab_reference_tasks.a")"
if grep -q '\.debug_' <<<"$sections"; then
  fail "prebuilt/libfsdplab_reference_tasks.a still has debug sections after strip --strip-debug"
fi
symbols="$(nm -C --defined-only "$stage/prebuilt/libfsdplab_reference_tasks.a")"
for task in "${reference_tasks[@]}"; do
  grep -q " T fsdplab::reference_${task}()$" <<<"$symbols" ||
    fail "'$library' does not define fsdplab::reference_${task}(); expected all nine reference tasks"
done
platform="$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-}")"
cat > "$stage/prebuilt/README.md" <<EOF
# prebuilt

\`libfsdplab_reference_tasks.a\` is the reference implementation of the nine FSDP tasks as object code only
(no sources, no debug information): the engine links it (\`engine/CMakeLists.txt\` imports it when
\`engine/fsdp/*_reference.cpp\` are absent), so every task you have not done yet runs on the reference, and
\`--impl N=student\` or \`fsdplab grade\` put yours in its place.

It must match the platform it was built on: $(uname -m) ${platform:-Linux}, ${compiler_version}
(${build_type}), C++20. Another compiler version or system may fail to link it; ask for a handout built
for yours. Made by \`scripts/make_handout.sh\` on $(date -u +%Y-%m-%d).
EOF

# writeup/README.md indexes the course's writeup too: its row and its closing section about it go, so the
# handout links nothing it lacks.
sed -e '/^| \[WRITEUP\.md\](WRITEUP\.md) |/d' -e '/^## WRITEUP\.md and the report$/,$d' "$stage/writeup/README.md" \
  > "$stage/writeup/README.md.new"
mv "$stage/writeup/README.md.new" "$stage/writeup/README.md"
! grep -q 'WRITEUP' "$stage/writeup/README.md" ||
  fail "writeup/README.md still names WRITEUP.md after its row and its section were cut; keep what names it in those two"

# ---- a repository of its own ---------------------------------------------------------------------------
(
  unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES
  cd "$stage"
  git init -q
  [[ -n "$(git config user.name || true)" ]] || export GIT_AUTHOR_NAME="fsdplab handout" GIT_COMMITTER_NAME="fsdplab handout"
  [[ -n "$(git config user.email || true)" ]] || export GIT_AUTHOR_EMAIL="handout@fsdplab.invalid" GIT_COMMITTER_EMAIL="handout@fsdplab.invalid"
  git add -A .
  git commit -q -m "handout"
)

[[ ! -d "$out_abs" ]] || rmdir "$out_abs"
mv "$stage" "$out_abs"
trap - EXIT
echo "make_handout: wrote '$out_abs': $count files of '$root', labs/mutants/mutant_catalog.cpp (empty) and prebuilt/libfsdplab_reference_tasks.a ($(du -h "$out_abs/prebuilt/libfsdplab_reference_tasks.a" | cut -f1)); a git repository with one commit"
