#!/usr/bin/env bash
# Reproduce a new user's conditions: a fresh clone, `make demo`, then `make test` under each
# condition (idle, or both cores loaded by busy loops; OPENBLAS_NUM_THREADS 1 or 2), and a
# summary of pass/fail counts and wall times. CI runs on an idle machine that wrote the
# tests; a user's machine is neither, so run this before resolving an issue that touches
# tests, docs or results.
#
#   scripts/user_conditions.sh [--rev REV] [--work DIR] [--conditions "idle:1 busy:1 busy:2"]
#                              [--kernel CORETYPE] [--busy N]
#
#   --rev REV          commit to clone (default HEAD of this repository; uncommitted changes
#                      are not part of a clone)
#   --work DIR         where the clone and logs go (default a new folder under /tmp)
#   --conditions LIST  LOAD:THREADS pairs, LOAD idle or busy (default "idle:1 idle:2 busy:1 busy:2")
#   --busy N           busy-loop processes for a busy condition (default: one per core)
#   --kernel CORETYPE  also set OPENBLAS_CORETYPE (e.g. Haswell, Zen, Sandybridge) to run on
#                      another CPU's BLAS kernels
#
# Prints one line per step; the summary is also written to DIR/summary.txt. Exits non-zero
# when any step failed.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
rev=HEAD
work=""
conditions="idle:1 idle:2 busy:1 busy:2"
kernel=""
busy="$(nproc)"

while [ $# -gt 0 ]; do
  case "$1" in
    --rev) rev="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --conditions) conditions="$2"; shift 2 ;;
    --kernel) kernel="$2"; shift 2 ;;
    --busy) busy="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "user_conditions.sh: unknown option '$1'; see --help" >&2; exit 2 ;;
  esac
done
for c in $conditions; do
  case "$c" in
    idle:[0-9]*|busy:[0-9]*) ;;
    *) echo "user_conditions.sh: condition '$c' must be LOAD:THREADS with LOAD idle or busy, e.g. busy:2" >&2; exit 2 ;;
  esac
done
sha="$(git -C "$repo" rev-parse --verify "$rev^{commit}" 2>/dev/null)" || {
  echo "user_conditions.sh: '$rev' is not a commit of $repo; pass --rev with a commit or branch" >&2; exit 2; }
[ -n "$work" ] || work="$(mktemp -d /tmp/cgrpo-user-XXXXXX)"
[ ! -e "$work/clone" ] || { echo "user_conditions.sh: $work/clone exists; pass a new --work folder" >&2; exit 2; }
mkdir -p "$work"

loops=()
stop_loops() { for pid in "${loops[@]:-}"; do [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; done; loops=(); }
trap stop_loops EXIT INT TERM

summary="$work/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
failed=0

say "user conditions: $(git -C "$repo" describe --always "$sha") on $(nproc) cores, $(uname -m)${kernel:+, OPENBLAS_CORETYPE=$kernel}; logs in $work"
git clone -q "$repo" "$work/clone"
git -C "$work/clone" checkout -q "$sha"
cd "$work/clone"
export MPLBACKEND=Agg PYTHONUNBUFFERED=1
[ -z "$kernel" ] || export OPENBLAS_CORETYPE="$kernel"

start=$SECONDS
if make demo > "$work/demo.log" 2>&1; then rc=0; else rc=$?; failed=1; fi
say "make demo (install and demo): rc $rc, $((SECONDS - start)) s"

for c in $conditions; do
  load="${c%%:*}"
  threads="${c##*:}"
  if [ "$load" = busy ]; then
    for _ in $(seq "$busy"); do sh -c 'while :; do :; done' & loops+=("$!"); done
  fi
  log="$work/test-$load-$threads.log"
  start=$SECONDS
  if OPENBLAS_NUM_THREADS="$threads" make test > "$log" 2>&1; then rc=0; else rc=$?; failed=1; fi
  stop_loops
  counts="$(grep -E '^=*[ ]*[0-9]+ (passed|failed)|[0-9]+ (passed|failed).* in [0-9.]+s' "$log" | tail -1 | tr -d '=' | sed 's/^ *//;s/ *$//')"
  say "make test, $load ($([ "$load" = busy ] && echo "$busy busy loops" || echo "no load")), OPENBLAS_NUM_THREADS=$threads: rc $rc, ${counts:-no pytest summary}, $((SECONDS - start)) s wall"
  if [ "$rc" != 0 ]; then grep -E '^(FAILED|ERROR) ' "$log" | sed 's/^/    /' | tee -a "$summary" || true; fi
done
say "summary written to $summary"
exit "$failed"
