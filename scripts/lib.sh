# Shell functions that scripts/control-plane.sh and scripts/node.sh share (sourced, not run).
# Both set `dir` (the run's directory, with logs/) and define `log`.

# Whether any thread of a process runs. A zombie has none (a PID 1 that does not reap leaves
# zombies behind), but a killed multi-threaded process shows as a zombie for a second or two
# while its last threads exit and still hold its sockets.
alive() {
  [ -n "$(ls "/proc/$1/task" 2>/dev/null)" ]
}

# Runs a command every 0.2 s until it succeeds. After `seconds`, says so with the tail of the
# component's log (or of every log) and returns 1: the caller decides what failing means.
wait_for() { # what seconds command...
  local what=$1 seconds=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "$what did not become ready in ${seconds} s; logs in $dir/logs"
      if [ -f "$dir/logs/$what.log" ]; then
        tail -n 30 "$dir/logs/$what.log" >&2 || true
      else
        tail -n 20 "$dir/logs/"*.log >&2 || true
      fi
      return 1
    fi
    sleep 0.2
  done
}
