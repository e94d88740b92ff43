//! A server the load bench measures configsum against, run as its own process (so that its
//! CPU and memory are its own, as configsum's are): the parse limit and the Go webhook. It
//! prints `listening on ADDR` as its first line on stdout once it accepts connections.
#![allow(dead_code)]

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Peer {
    child: Child,
    pub addr: String,
    pub pid: u32,
}

impl Peer {
    /// Runs `program` with `args` and waits up to 20 s for its address.
    pub fn start(program: &Path, args: &[&str]) -> Result<Peer, String> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        let pid = child.id();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        // Read the line on a thread: a peer that hangs before printing must not hang the bench.
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = send.send(line);
        });
        let mut peer = Peer { child, addr: String::new(), pid };
        let line = receive
            .recv_timeout(Duration::from_secs(20))
            .map_err(|_| format!("{} printed no address within 20 s", program.display()))?;
        peer.addr = line
            .trim()
            .strip_prefix("listening on ")
            .ok_or_else(|| format!("{} said {line:?}, not its address", program.display()))?
            .to_owned();
        Ok(peer)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        super::floor::terminate(&mut self.child, self.pid);
    }
}
