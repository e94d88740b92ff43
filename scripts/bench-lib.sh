# Shell functions that scripts/bench-instructions.sh and scripts/bench-allocations.sh share
# (sourced, not run). Both set `here` (the repository's root).

# Installs a Debian package when its command is missing (as root, or through sudo).
ensure_command() { # command package
  command -v "$1" >/dev/null && return
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "$2"
}

# The review micro-benchmark's binary (benches/review.rs), built if need be: its path, or
# the one given.
review_bench_binary() { # [path]
  if [ -n "${1:-}" ]; then
    echo "$1"
    return
  fi
  (cd "$here" && cargo bench --bench review --no-run --message-format=json 2>/dev/null) |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "review" and m.get("executable"):
        print(m["executable"])'
}
