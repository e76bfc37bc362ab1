#!/usr/bin/env bash
# `make test` N times in a row (default 3) in a fresh clone of this repository's HEAD, while two
# busy loops load both cores: the suite must not depend on an idle machine (issue 17).
#   bash tests/loaded.sh [N]        or   make test-loaded
# The busy loops and the clone are removed on exit, whatever happens; the first failing run stops it.
set -euo pipefail
runs=${1:-3}
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/dh-loaded.XXXXXX")
chmod 0755 "$work"  # mktemp makes it 0700: the suite runs a server as nobody from this checkout
loops=()
cleanup() {
  for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
git clone --quiet "$src" "$work/repo"
for _ in 1 2; do
  ( while :; do :; done ) &
  loops+=("$!")
done
echo "loaded.sh: two busy loops (pids ${loops[*]}); $runs runs of 'make test' in $work/repo"
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  if ! make -C "$work/repo" test > "$work/run$i.log" 2>&1; then
    tail -n 60 "$work/run$i.log"
    kept="${TMPDIR:-/tmp}/dh-loaded-run$i.log"
    cp "$work/run$i.log" "$kept" && echo "loaded.sh: the whole log of run $i is kept in $kept" >&2
    echo "loaded.sh: run $i of $runs FAILED after $(( $(date +%s) - start )) s" >&2
    exit 1
  fi
  echo "loaded.sh: run $i of $runs passed in $(( $(date +%s) - start )) s"
done
echo "loaded.sh: $runs of $runs runs passed under load"
