#!/usr/bin/env bash
# `make bench-render`: `configsum render` (the release binary) on generated
# Helm-like streams of 1,000 and 5,000 documents (scripts/gen-render-stream.py):
# wall time, MB/s, peak RSS (GNU time's maximum resident set size) and peak
# RSS over input size, best of RUNS runs. Also the RSS of a one-line input,
# what the binary takes before any stream. Not part of `make test`.
#
# Usage: scripts/bench-render.sh [BINARY]   (default target/release/configsum)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
binary=${1:-${CARGO_TARGET_DIR:-$root/target}/release/configsum}
runs=${RUNS:-3}
[ -x "$binary" ] || { echo "no $binary: build it first (make build)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '0123456789abcdef0123456789abcdef\n' >"$work/key"

# Prints "seconds cpu-seconds kilobytes": the fastest of $runs runs (wall time, and the
# user+system CPU time of that run, steadier on a busy machine), and the highest peak RSS.
measure() {
  local best="" cpu="" rss=0
  for _ in $(seq "$runs"); do
    /usr/bin/time -f '%e %U %S %M' -o "$work/time" \
      "$binary" render --digest-key-file "$work/key" -f "$1" >"$work/out" 2>"$work/notes"
    read -r seconds user system kilobytes <"$work/time"
    if [ -z "$best" ] || awk -v a="$seconds" -v b="$best" 'BEGIN { exit !(a < b) }'; then
      best=$seconds
      cpu=$(awk -v u="$user" -v s="$system" 'BEGIN { printf "%.2f", u + s }')
    fi
    [ "$kilobytes" -gt "$rss" ] && rss=$kilobytes
  done
  echo "$best $cpu $rss"
}

echo 'a: 1' >"$work/tiny.yaml"
read -r _ _ base_kib < <(measure "$work/tiny.yaml")

echo "| documents | input MB | wall s (best of $runs) | CPU s | MB/s (wall) | peak RSS MiB | RSS / input | (RSS − start) / input |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
for documents in 1000 5000; do
  python3 "$root/scripts/gen-render-stream.py" "$documents" >"$work/stream.yaml"
  bytes=$(stat -c %s "$work/stream.yaml")
  read -r seconds cpu kib < <(measure "$work/stream.yaml")
  awk -v n="$documents" -v b="$bytes" -v s="$seconds" -v c="$cpu" -v k="$kib" -v base="$base_kib" 'BEGIN {
    mb = b / 1e6; rss = k * 1024
    printf "| %d | %.1f | %.2f | %.2f | %.1f | %.1f | %.1fx | %.1fx |\n",
      n, mb, s, c, (s > 0 ? mb / s : 0), k / 1024, rss / b, (k - base) * 1024 / b
  }'
done
echo
echo "RSS of a one-line input (the binary before any stream): $((base_kib / 1024)) MiB"
