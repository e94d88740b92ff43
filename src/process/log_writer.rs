//! Where log lines go: a shared buffer that one background thread writes to
//! stderr a batch at a time, at most [`FLUSH_EVERY`] after the first line of
//! the batch or as soon as [`FLUSH_AT`] bytes are waiting.
//!
//! A line costs its caller a copy under a lock. A channel message per line
//! (as `tracing-appender` sends) costs an allocation, a wake-up of the writer
//! thread and a `write(2)` per line once the queue runs empty, which it does
//! between any two reviews: under load, about a fifth of a review's CPU.
//! Lines are never dropped: past [`MAX_WAITING`] bytes, callers wait for the
//! writer, so a stuck stderr slows the process rather than growing it.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How long a line may wait for the lines after it.
pub const FLUSH_EVERY: Duration = Duration::from_millis(20);
/// Written at once from this many bytes on.
pub const FLUSH_AT: usize = 64 * 1024;
/// Callers wait beyond this many bytes not yet written.
pub const MAX_WAITING: usize = 1024 * 1024;

/// The writer given to the log subscriber; cheap to clone.
#[derive(Clone)]
pub struct BatchedStderr {
    shared: Arc<Shared>,
}

/// Writes what is left and stops the writer thread when dropped: hold it until exit.
pub struct FlushOnDrop {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<Batch>,
    /// The writer thread: the first line of a batch came, or the batch is full, or closing.
    to_writer: Condvar,
    /// Callers waiting for room.
    to_callers: Condvar,
}

#[derive(Default)]
struct Batch {
    lines: Vec<u8>,
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Batch> {
        // A panic while holding the lock leaves plain bytes: still fine to write.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Log lines to `out` (stderr in the binary), written by a background thread.
pub fn batched(out: impl Write + Send + 'static) -> io::Result<(BatchedStderr, FlushOnDrop)> {
    let shared = Arc::new(Shared {
        state: Mutex::new(Batch::default()),
        to_writer: Condvar::new(),
        to_callers: Condvar::new(),
    });
    let writer = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name("log-writer".to_owned())
        .spawn(move || write_batches(&writer, out))?;
    let guard = FlushOnDrop { shared: Arc::clone(&shared), thread: Some(thread) };
    Ok((BatchedStderr { shared }, guard))
}

fn write_batches(shared: &Shared, mut out: impl Write) {
    let mut writing = Vec::new();
    loop {
        let mut batch = shared.lock();
        while batch.lines.is_empty() && !batch.closed {
            batch = shared.to_writer.wait(batch).unwrap_or_else(|p| p.into_inner());
        }
        // The batch's first line is here: give the lines after it a moment.
        if !batch.closed {
            batch = shared
                .to_writer
                .wait_timeout_while(batch, FLUSH_EVERY, |b| b.lines.len() < FLUSH_AT && !b.closed)
                .map_or_else(|p| p.into_inner().0, |(batch, _)| batch);
        }
        std::mem::swap(&mut batch.lines, &mut writing);
        let last = batch.closed;
        drop(batch);
        shared.to_callers.notify_all();
        // Nowhere to report a failed write to stderr: the lines are let go.
        let _ = out.write_all(&writing).and_then(|()| out.flush());
        writing.clear();
        // A burst's buffer is not kept for the quiet that follows.
        writing.shrink_to(FLUSH_AT);
        if last {
            return;
        }
    }
}

impl Write for &BatchedStderr {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let shared = &self.shared;
        let mut batch = shared.lock();
        while batch.lines.len() >= MAX_WAITING && !batch.closed {
            batch = shared.to_callers.wait(batch).unwrap_or_else(|p| p.into_inner());
        }
        let before = batch.lines.len();
        batch.lines.extend_from_slice(line);
        let after = batch.lines.len();
        drop(batch);
        // Only the two moments the writer waits for: a batch's first line, and a full batch.
        if before == 0 || (before < FLUSH_AT && after >= FLUSH_AT) {
            shared.to_writer.notify_one();
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for BatchedStderr {
    type Writer = &'a BatchedStderr;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

impl Drop for FlushOnDrop {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.to_writer.notify_one();
        self.shared.to_callers.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// What the writer thread wrote, and how many writes it took.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            let mut captured = self.0.lock().expect("lock");
            captured.0.extend_from_slice(bytes);
            captured.1 += 1;
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn get(&self) -> (Vec<u8>, usize) {
            self.0.lock().expect("lock").clone()
        }
    }

    #[test]
    fn lines_of_a_burst_are_written_together_and_in_order() {
        let out = Captured::default();
        let (writer, guard) = batched(out.clone()).expect("thread");
        let mut expected = Vec::new();
        for i in 0..200 {
            let line = format!("line {i}\n");
            (&writer).write_all(line.as_bytes()).expect("write");
            expected.extend_from_slice(line.as_bytes());
        }
        drop(guard);
        let (written, writes) = out.get();
        assert_eq!(written, expected);
        assert!(writes <= 3, "200 lines in {writes} writes");
    }

    #[test]
    fn a_lone_line_is_written_within_the_interval() {
        let out = Captured::default();
        let (writer, _guard) = batched(out.clone()).expect("thread");
        let start = Instant::now();
        (&writer).write_all(b"alone\n").expect("write");
        // No further line and the guard held: only the writer's timer can write it. How soon is
        // a speed (the benchmark's); the deadline is only there to end a broken run.
        while out.get().0.is_empty() {
            assert!(start.elapsed() < Duration::from_secs(10), "never written");
            std::thread::sleep(Duration::from_millis(5));
        }
        let waited = start.elapsed();
        assert!(waited >= FLUSH_EVERY, "written after {waited:?}: no wait for the lines after it");
        assert_eq!(out.get(), (b"alone\n".to_vec(), 1));
    }

    #[test]
    fn dropping_the_guard_writes_every_line_from_every_thread() {
        let out = Captured::default();
        let (writer, guard) = batched(out.clone()).expect("thread");
        // More than MAX_WAITING in all: callers wait for room and nothing is lost.
        let line = vec![b'x'; 1023];
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let writer = writer.clone();
                let line = line.clone();
                std::thread::spawn(move || {
                    for _ in 0..1024 {
                        let mut w = &writer;
                        w.write_all(&line).and_then(|()| w.write_all(b"\n")).expect("write");
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("thread");
        }
        drop(guard);
        let (written, _) = out.get();
        assert_eq!(written.len(), 4 * 1024 * 1024);
    }
}
