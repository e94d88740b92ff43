#!/usr/bin/env bash
# Instructions per review on the webhook's pure path, counted by callgrind: stable on a
# noisy machine where wall-clock medians move by tens of per cent from run to run.
# Each benchmark runs twice (150 and 50 samples of one review); the difference over 100 is
# one review, without divan's and the process's fixed costs. valgrind does not emulate
# SHA-NI, so SHA-256 is counted in its portable form (about 107k of a CREATE's
# instructions; a fraction of that on a CPU with SHA extensions).
#
#   scripts/bench-instructions.sh [review-bench-binary]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/bench-lib.sh
. "$here/scripts/bench-lib.sh"
ensure_command valgrind valgrind
bin=$(review_bench_binary "${1:-}")
count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" --bench "$1" \
    --sample-count "$2" --sample-size 1 2>&1 | awk '/Collected/ {print $NF}'
}
"$bin" --bench --sample-count 1 2>&1 | grep -i "review bodies" || true
for bench in deployment_20kb_create deployment_20kb_update_with_old_object \
  deployment_20kb_update_tracking_images; do
  few=$(count "$bench" 50)
  many=$(count "$bench" 150)
  echo "$bench: $(( (many - few) / 100 )) instructions per review"
done
