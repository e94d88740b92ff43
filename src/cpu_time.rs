//! The CPU time of the calling thread, for unit tests that bound the work done: unlike wall
//! time, it is not stretched by other processes on a busy machine.

use std::time::Duration;

/// User and system time of this thread so far, from `/proc/thread-self/stat`, to 10 ms.
pub fn this_thread() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc/thread-self/stat");
    // After the parenthesised command name (which may hold spaces), utime and stime are the
    // 12th and 13th fields, in USER_HZ ticks: 100 a second on Linux.
    let fields: Vec<&str> = stat.rsplit_once(") ").expect("stat").1.split(' ').collect();
    let ticks = |i: usize| fields[i].parse::<u64>().expect("clock ticks");
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

#[test]
fn counts_work_not_sleep() {
    let before = this_thread();
    std::thread::sleep(Duration::from_millis(200));
    assert!(this_thread() - before < Duration::from_millis(100), "a sleep uses no CPU");
    let mut x = 0u64;
    while this_thread() - before < Duration::from_millis(50) {
        x = std::hint::black_box(x.wrapping_add(1));
    }
    assert!(x > 0, "busy work shows up");
}
