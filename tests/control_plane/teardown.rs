//! scripts/control-plane.sh down: it stops the processes DIR/pids records, and each only while
//! its PID is still that process. PIDs wrap at 32768 here and a test run's processes and
//! threads go round them in minutes, so the PID of an adopted process that exited early may by
//! then be another test's (a `configsum serve` starting, say).

use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, Stdio};

use crate::control_plane::{record_pid, repository, started_at};
use crate::server::TempDir;

#[test]
fn down_stops_what_was_recorded_and_spares_a_pid_taken_since() {
    let dir = TempDir::new("teardown");
    let sleep = || Command::new("sleep").arg("120").stdin(Stdio::null()).spawn().expect("sleep");
    let (mut recorded, mut taken_since) = (sleep(), sleep());
    let pids = dir.path("pids");
    std::fs::write(&pids, "").expect("pids");
    record_pid(&pids, recorded.id(), "recorded");
    // `taken_since` has a PID recorded for a process that started a tick earlier: as if that
    // one exited and its PID went round to a new process.
    let start: u64 = started_at(taken_since.id()).expect("its start").parse().expect("ticks");
    let line = format!("{} exited-early {}\n", taken_since.id(), start - 1);
    std::fs::write(&pids, std::fs::read_to_string(&pids).expect("pids") + &line).expect("pids");

    let script = repository().join("scripts/control-plane.sh");
    let output = Command::new(script).arg("down").arg(&dir.0).output().expect("down");
    assert!(output.status.success(), "down: {}", String::from_utf8_lossy(&output.stderr));

    let ended = recorded.try_wait().expect("wait");
    assert_eq!(ended.and_then(|status| status.signal()), Some(15), "the recorded one, stopped");
    let spared = taken_since.try_wait().expect("wait").is_none();
    let _ = taken_since.kill();
    let _ = taken_since.wait();
    assert!(spared, "a PID taken since by another process is left alone");
    assert!(!pids.exists(), "down forgets what it stopped");
}
