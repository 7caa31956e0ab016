#!/usr/bin/env bash
# The README as a newcomer meets it, against the built fsdplab:
#   1. every command in a ```bash runnable block of README.md runs and exits 0 (one command a line, `\` continues
#      it; `fsdplab`, `build/app/fsdplab` and `./build/app/fsdplab` become the binary under test). They run in a
#      scratch folder that links the tree's top-level folders, so reads find the tree and writes stay out of it;
#      without a display;
#   2. README.md is at most 15 KB (15360 bytes);
#   3. every relative link in README.md and docs/*.md points to an existing file, and every tree path they name in
#      backticks (`engine/...`, `labs/...`, `docs/...`, ...) exists;
#   4. docs/cli.md is the binary's `--help` of every subcommand, as --write-cli writes it.
#   readme_commands.sh FSDPLAB [SOURCE_ROOT]
#   readme_commands.sh --write-cli FSDPLAB [SOURCE_ROOT]     regenerates docs/cli.md from FSDPLAB's help
set -uo pipefail
write_only=0
if [[ "${1:-}" == --write-cli ]]; then
  write_only=1
  shift
fi
[[ $# -ge 1 ]] || { echo "usage: readme_commands.sh [--write-cli] FSDPLAB [SOURCE_ROOT]" >&2; exit 2; }
fsdplab=$(realpath "$1")
root=$(realpath "${2:-$(dirname "$0")/../..}")
[[ -x $fsdplab ]] || { echo "readme_commands: $1 is not an executable" >&2; exit 2; }
unset DISPLAY WAYLAND_DISPLAY
export OPENBLAS_NUM_THREADS=1

# ---- docs/cli.md: each subcommand's --help, with the program named `fsdplab` --------------------------------------
help_of() { (exec -a fsdplab "$fsdplab" "$@" --help); }
cli_md() {
  local c commands top
  top=$(help_of)
  commands=$(awk '/^Subcommands:/ {on = 1; next} on && /^  [a-z]/ {print $1}' <<<"$top")
  echo "# fsdplab command line"
  echo
  echo "Every subcommand's \`--help\`, as the built \`fsdplab\` prints it. Generated, not written by hand: after changing"
  echo "an option, run \`bash tests/smoke/readme_commands.sh --write-cli build/app/fsdplab\`. The test"
  echo "\`cli.readme_commands\` fails while this file and the binary disagree."
  echo
  echo "- [\`fsdplab\`](#fsdplab) (no subcommand: the default job)"
  for c in $commands; do echo "- [\`fsdplab $c\`](#fsdplab-$c)"; done
  echo
  echo "## fsdplab"
  echo
  echo '```text'
  printf '%s\n' "$top"
  echo '```'
  for c in $commands; do
    echo
    echo "## fsdplab $c"
    echo
    echo '```text'
    help_of "$c"
    echo '```'
  done
}
if ((write_only)); then
  cli_md >"$root/docs/cli.md" && echo "readme_commands: wrote $root/docs/cli.md"
  exit
fi

failures=0
fail() { echo "readme_commands: FAILED: $*"; failures=$((failures + 1)); }

# ---- 2. the README's size -----------------------------------------------------------------------------------
size=$(wc -c <"$root/README.md")
((size <= 15360)) || fail "README.md is $size bytes; at most 15360 (15 KB): move detail into docs/"

# ---- 3. links and named paths ---------------------------------------------------------------------------------
docs=("$root/README.md" "$root"/docs/*.md)
links=0 paths=0
for md in "${docs[@]}"; do
  rel=${md#"$root"/}
  dir=$(dirname "$md")
  while IFS= read -r target; do
    target=${target%%#*}
    target=${target%% *}
    [[ -z $target || $target =~ ^[a-z]+: ]] && continue
    links=$((links + 1))
    [[ -e "$dir/$target" ]] || fail "$rel links to '$target', which does not exist"
  done < <(grep -o '](\([^)]*\))' "$md" | sed 's/^](\(.*\))$/\1/')
  while IFS= read -r path; do
    path=${path%%:*}
    paths=$((paths + 1))
    [[ -e "$root/$path" ]] || fail "$rel names \`$path\`, which does not exist"
  done < <(grep -o '`[^` ]*`' "$md" | tr -d '`' |
           grep -E '^(engine|app|labs|grader|tests|scripts|docs|assets|writeup)/[A-Za-z0-9_./:-]*$' | grep -v 'NN-' | sort -u)
done
echo "readme_commands: README.md $size bytes; $links relative links and $paths named paths checked in ${#docs[@]} files"

# ---- 4. docs/cli.md against the binary -------------------------------------------------------------------------
if ! diff -u "$root/docs/cli.md" <(cli_md) >/tmp/readme_commands_cli.$$.diff; then
  head -n 40 /tmp/readme_commands_cli.$$.diff
  fail "docs/cli.md differs from this fsdplab's --help (above); regenerate it: bash tests/smoke/readme_commands.sh --write-cli build/app/fsdplab"
fi
rm -f /tmp/readme_commands_cli.$$.diff

# ---- 1. the runnable commands ---------------------------------------------------------------------------------
commands=()
in_block=0 pending=""
while IFS= read -r line; do
  if ((!in_block)); then
    [[ $line =~ ^\`\`\`bash\ runnable[[:space:]]*$ ]] && in_block=1
    continue
  fi
  if [[ $line =~ ^\`\`\` ]]; then
    in_block=0
    continue
  fi
  if [[ $line =~ \\[[:space:]]*$ ]]; then
    pending+="${line%\\*} "
    continue
  fi
  line="$pending$line"
  pending=""
  [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
  commands+=("$line")
done <"$root/README.md"
((${#commands[@]} > 0)) || fail "no \`\`\`bash runnable block in README.md"

scratch=$(mktemp -d "${TMPDIR:-/tmp}/fsdplab-readme.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
for entry in "$root"/*; do
  name=$(basename "$entry")
  [[ $name == build* || $name == README.md ]] && continue
  ln -s "$entry" "$scratch/$name"
done
escaped=$(printf '%s' "$fsdplab" | sed 's/[\\&|]/\\&/g')
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }
start=$EPOCHREALTIME
ran=0
for cmd in "${commands[@]}"; do
  run=$(printf '%s' "$cmd" | sed -E "s|(^\|[[:space:];&(])(\./)?(build/app/)?fsdplab([[:space:]]\|$)|\1$escaped\4|g")
  t0=$EPOCHREALTIME
  status=0
  (cd "$scratch" && timeout 120 bash -c "$run") >"$scratch/.out" 2>&1 || status=$?
  took=$(elapsed "$t0")
  ran=$((ran + 1))
  if ((status != 0)); then
    tail -n 20 "$scratch/.out"
    fail "exit status $status: $cmd"
  else
    printf 'readme_commands: ok %6s s  %s\n' "$took" "$cmd"
  fi
done
echo "readme_commands: $ran commands ran in $(elapsed "$start") s"

if ((failures > 0)); then
  echo "readme_commands: $failures failure(s)"
  exit 1
fi
echo "readme_commands: README_COMMANDS_PASS"
