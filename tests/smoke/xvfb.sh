# Sourced by the smoke scripts that render the dashboard under Xvfb with Mesa: skips the test (exit 77, CTest's
# SKIP_RETURN_CODE) where xvfb-run is missing, and defines `xvfb CMD...`, which runs CMD on a virtual screen of
# the dashboard's default size (xvfb_args, for a script that starts xvfb-run itself in the background so that
# $! is xvfb-run's own process).
if ! command -v xvfb-run >/dev/null; then
  echo "xvfb-run not found (scripts/install-deps.sh --gui installs it): skipped"
  exit 77
fi
xvfb_args=(-a -s "-screen 0 1600x1000x24")
xvfb() { xvfb-run "${xvfb_args[@]}" "$@"; }
