# Sourced by the smoke scripts that render the dashboard under Xvfb with Mesa: skips the test (exit 77, CTest's
# SKIP_RETURN_CODE) where xvfb-run is missing, and defines `xvfb CMD...`, which runs CMD on a virtual screen of
# the dashboard's default size (xvfb_args, for a script that starts xvfb-run itself in the background so that
# $! is xvfb-run's own process).
if ! command -v xvfb-run >/dev/null; then
  echo "xvfb-run not found (scripts/install-deps.sh --gui installs it): skipped"
  exit 77
fi
xvfb_args=(-a -s "-screen 0 1600x1000x24")
# xvfb-run exits 5 when it cannot remove its temporary directory after the command has ended, which hides the
# command's own status (a test once failed on that alone): the command's status is recorded in a file and
# returned; xvfb-run's own status only where the command never ran.
xvfb() {
  local status_file xvfb_status=0
  status_file="$(mktemp)"
  xvfb-run "${xvfb_args[@]}" bash -c '"$@"; s=$?; echo $s >"$0"; exit $s' "$status_file" "$@" || xvfb_status=$?
  if [ -s "$status_file" ]; then
    local command_status; command_status="$(cat "$status_file")"
    [ "$command_status" = "$xvfb_status" ] ||
      echo "xvfb-run exited $xvfb_status after the command exited $command_status: the command's status kept" >&2
    xvfb_status=$command_status
  fi
  rm -f "$status_file"
  return "$xvfb_status"
}
