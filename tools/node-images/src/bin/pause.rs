//! The pod sandbox's process (containerd's `sandbox_image`): it holds the pod's namespaces
//! open and does nothing else. As PID 1 of the pod it reaps orphans, and it stops on SIGTERM or
//! SIGINT (PID 1 has no default signal actions, so without handlers it would ignore both).

use libc::c_int;

extern "C" fn stop(_: c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(0) }
}

extern "C" fn reap(_: c_int) {
    // SAFETY: waitpid is async-signal-safe; a null status pointer is allowed.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
}

fn handle(signal: c_int, handler: extern "C" fn(c_int)) {
    // SAFETY: a zeroed sigaction with a handler and an empty mask is a valid argument; the
    // handlers above only call async-signal-safe functions.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
            eprintln!("pause: sigaction({signal}) failed");
            std::process::exit(1);
        }
    }
}

fn main() {
    if std::process::id() != 1 {
        eprintln!("pause: not PID 1: orphans of this namespace are not reaped here");
    }
    handle(libc::SIGINT, stop);
    handle(libc::SIGTERM, stop);
    handle(libc::SIGCHLD, reap);
    loop {
        // SAFETY: pause has no preconditions; it returns after each handled signal.
        unsafe { libc::pause() };
    }
}
