# Shell functions that scripts/control-plane.sh, scripts/node.sh and scripts/cert-manager.sh
# share (sourced, not run). They set `dir` (the run's directory, with logs/) and define `log`.

# Where a Go tool's build is cached: outside the checkout, so that a fresh clone on the same
# machine (CI's case) finds it. $CONTROL_PLANE_CACHE, else $XDG_CACHE_HOME/configsum or
# ~/.cache/configsum, then NAME/KEY, where KEY hashes the input files and the calling script's
# build function, which together decide the binaries.
build_cache_dir() { # name input...
  local name=$1 base=${CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/configsum} key
  shift
  key=$( (cat "$@"; sed -n '/^build()/,/^}/p' "$0") | sha256sum | cut -c1-16)
  echo "$base/$name/$key"
}

# A process's start time, in clock ticks since boot (field 22 of /proc/PID/stat). With its PID
# it names one process, where a PID alone does not: PIDs wrap at pid_max (32768 on this kind of
# machine), and a test run's processes and threads go round it in minutes, so the PID of a
# process that exited early may by the time of `down` be a test's new process.
started_at() {
  local stat fields
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  # The command name, in parentheses, may hold spaces: the fields after it are counted.
  read -ra fields <<< "${stat##*) }"
  echo "${fields[19]}"
}

# Appends "PID NAME START" to a pids file (START is "-" if the process is already gone).
record_pid() { # file pid name
  echo "$2 $3 $(started_at "$2" || echo -)" >> "$1"
}

# Whether PID is still the process a pids file recorded as started at START, with a thread
# running. (A line without START, from before starts were recorded, is taken on trust.)
still_running() { # pid start
  alive "$1" && { [ -z "${2:-}" ] || [ "$(started_at "$1")" = "$2" ]; }
}

# Whether any thread of a process runs. A zombie's do not (a PID 1 that does not reap leaves
# zombies behind, and a test's own children stay zombies until it waits for them), but a killed
# multi-threaded process shows as a zombie leader for a second or two while its other threads
# exit and still hold its sockets. /proc lists a zombie's leader among its tasks: each task's
# state is read, not just whether there is one.
alive() {
  local stat
  for stat in /proc/"$1"/task/*/stat; do
    stat=$(cat "$stat" 2>/dev/null) || continue
    # The state follows the command name, which is in parentheses and may hold spaces.
    stat=${stat##*) }
    case ${stat:0:1} in Z | X) ;; *) return 0 ;; esac
  done
  return 1
}

# Waits until no thread of a process runs, for at most `seconds`; returns 1 if one still does.
wait_exited() { # pid seconds
  local _
  for _ in $(seq $(($2 * 10))); do alive "$1" || return 0; sleep 0.1; done
  ! alive "$1"
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
