#!/usr/bin/env bash
# Allocations per review on the webhook's pure path, counted by heaptrack: calls to malloc,
# realloc and friends, as `heaptrack_print` reports them. Each benchmark of benches/review.rs
# runs twice (150 and 50 samples of one review); the difference over 100 is one review,
# without divan's and the process's fixed costs. divan itself allocates about twice per sample
# (serde_json skipping a body, which allocates nothing, counts 2), and the bench's lookups from
# memory (tests/support/fixtures.rs) twice per object: both are in the numbers.
#
#   scripts/bench-allocations.sh [review-bench-binary]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
if ! command -v heaptrack >/dev/null; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq heaptrack
fi
bin="${1:-}"
if [ -z "$bin" ]; then
  bin=$(cd "$here" && cargo bench --bench review --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "review" and m.get("executable"):
        print(m["executable"])')
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
count() {
  heaptrack -o "$out/$1-$2" "$bin" --bench "$1" --sample-count "$2" --sample-size 1 >/dev/null 2>&1
  heaptrack_print -f "$out/$1-$2".* 2>/dev/null | awk '/^calls to allocation functions/ {print $5}'
}
for bench in deployment_20kb_create deployment_20kb_update_with_old_object \
  deployment_20kb_update_tracking_images skip_whole_body_create; do
  few=$(count "$bench" 50)
  many=$(count "$bench" 150)
  echo "$bench: $(( (many - few) / 100 )) allocations per review"
done
