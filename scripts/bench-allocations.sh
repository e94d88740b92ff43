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
# shellcheck source=scripts/bench-lib.sh
. "$here/scripts/bench-lib.sh"
ensure_command heaptrack heaptrack
bin=$(review_bench_binary "${1:-}")
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
