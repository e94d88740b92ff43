//! config-echo, the test node's application: it reads its configuration once, at start, as
//! most applications do, so a pod serves the values it started with until it is replaced. That
//! is the bug configsum exists for, made visible.
//!
//! - `VALUE`: a value from the environment (a ConfigMap key, say).
//! - `VALUE_FILE` (default `/etc/config-echo/value`): a file whose content is read (a Secret's
//!   key in a volume, say); a missing file reads as null.
//! - `EXIT_CODE`: when set to a non-zero number, print why and exit with it before serving,
//!   so a configuration can make a rollout fail on purpose.
//! - `LISTEN` (default `0.0.0.0:8080`).
//!
//! It prints what it read as one JSON line and serves it on `GET /` (with the pod's hostname),
//! and `GET /healthz` for probes. SIGTERM stops it at once (as PID 1 it has no default
//! handler).

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use serde_json::{Value, json};

const DEFAULT_FILE: &str = "/etc/config-echo/value";
const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
/// A request line or header longer than this is refused: the listener is reachable by anything
/// on the pod network.
const MAX_LINE: usize = 4096;

/// What the process read at start.
#[derive(Debug, PartialEq)]
struct Config {
    pod: Option<String>,
    value: Option<String>,
    file: String,
    file_value: Option<String>,
    exit_code: i32,
    listen: String,
}

impl Config {
    fn read(
        env: impl Fn(&str) -> Option<String>,
        read_file: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, String> {
        let file = env("VALUE_FILE").unwrap_or_else(|| DEFAULT_FILE.to_owned());
        let exit_code = match env("EXIT_CODE") {
            None => 0,
            Some(text) => text
                .trim()
                .parse::<i32>()
                .map_err(|_| format!("EXIT_CODE must be a number, not {text:?}"))?,
        };
        Ok(Config {
            pod: env("HOSTNAME"),
            value: env("VALUE"),
            file_value: read_file(&file),
            file,
            exit_code,
            listen: env("LISTEN").unwrap_or_else(|| DEFAULT_LISTEN.to_owned()),
        })
    }

    fn to_json(&self) -> Value {
        json!({"pod": self.pod, "value": self.value, "file": self.file, "fileValue": self.file_value})
    }
}

/// The answer to a request line (`GET / HTTP/1.1`): status, content type and body.
fn answer(request_line: &str, config: &Config) -> (&'static str, &'static str, String) {
    let mut words = request_line.split_ascii_whitespace();
    match (words.next(), words.next()) {
        (Some("GET"), Some("/")) => {
            ("200 OK", "application/json", format!("{}\n", config.to_json()))
        }
        (Some("GET"), Some("/healthz")) => ("200 OK", "text/plain", "ok\n".to_owned()),
        (Some("GET"), Some(_)) => ("404 Not Found", "text/plain", "not found\n".to_owned()),
        _ => ("405 Method Not Allowed", "text/plain", "GET only\n".to_owned()),
    }
}

/// Reads one line, at most MAX_LINE bytes; None at the end of input or on a longer line.
fn read_line<R: BufRead>(reader: &mut R) -> Option<String> {
    let mut line = Vec::new();
    let read =
        std::io::Read::take(reader, MAX_LINE as u64 + 1).read_until(b'\n', &mut line).ok()?;
    if read == 0 || line.len() > MAX_LINE {
        return None;
    }
    Some(String::from_utf8_lossy(&line).trim_end().to_owned())
}

fn serve(stream: TcpStream, config: &Config) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let mut reader = BufReader::new(&stream);
    let Some(request_line) = read_line(&mut reader) else { return };
    // The headers are not needed; read them to their end so the client sees a clean close.
    while let Some(header) = read_line(&mut reader) {
        if header.is_empty() {
            break;
        }
    }
    let (status, content_type, body) = answer(&request_line, config);
    let _ = write!(
        &stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

extern "C" fn stop(_: libc::c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(0) }
}

fn main() {
    // SAFETY: installs a handler that only calls an async-signal-safe function.
    unsafe {
        libc::signal(libc::SIGTERM, stop as extern "C" fn(libc::c_int) as libc::sighandler_t);
        libc::signal(libc::SIGINT, stop as extern "C" fn(libc::c_int) as libc::sighandler_t);
    }
    let config = match Config::read(
        |name| std::env::var(name).ok(),
        |path| std::fs::read_to_string(path).ok(),
    ) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("config-echo: {error}");
            std::process::exit(2);
        }
    };
    println!("{}", config.to_json());
    if config.exit_code != 0 {
        eprintln!("config-echo: EXIT_CODE={}: exiting as configured", config.exit_code);
        std::process::exit(config.exit_code);
    }
    let listener = match TcpListener::bind(&config.listen) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("config-echo: listen on {}: {error}", config.listen);
            std::process::exit(1);
        }
    };
    let config: &'static Config = Box::leak(Box::new(config));
    for stream in listener.incoming().flatten() {
        std::thread::spawn(move || serve(stream, config));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(env: &[(&str, &str)], file: Option<&str>) -> Result<Config, String> {
        let env: Vec<(String, String)> =
            env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Config::read(
            |name| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
            |_| file.map(str::to_owned),
        )
    }

    #[test]
    fn reads_the_value_the_file_and_the_exit_code() {
        let read = config(
            &[("VALUE", "v1"), ("VALUE_FILE", "/s/password"), ("EXIT_CODE", "3")],
            Some("p1"),
        )
        .unwrap();
        assert_eq!(read.value.as_deref(), Some("v1"));
        assert_eq!(read.file, "/s/password");
        assert_eq!(read.file_value.as_deref(), Some("p1"));
        assert_eq!(read.exit_code, 3);
        assert_eq!(read.listen, DEFAULT_LISTEN);
    }

    #[test]
    fn missing_inputs_read_as_null_and_a_bad_exit_code_is_an_error() {
        let read = config(&[], None).unwrap();
        assert_eq!((read.value, read.file_value, read.exit_code), (None, None, 0));
        assert_eq!(read.file, DEFAULT_FILE);
        assert!(config(&[("EXIT_CODE", "soon")], None).unwrap_err().contains("\"soon\""));
    }

    #[test]
    fn serves_what_it_read_and_a_health_check() {
        let read = config(&[("VALUE", "v\"1"), ("HOSTNAME", "web-1")], Some("p1")).unwrap();
        let (status, _, body) = answer("GET / HTTP/1.1", &read);
        assert_eq!(status, "200 OK");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            body,
            json!({"pod": "web-1", "value": "v\"1", "file": DEFAULT_FILE, "fileValue": "p1"})
        );
        assert_eq!(answer("GET /healthz HTTP/1.1", &read).0, "200 OK");
        assert_eq!(answer("GET /other HTTP/1.1", &read).0, "404 Not Found");
        assert_eq!(answer("POST / HTTP/1.1", &read).0, "405 Method Not Allowed");
        assert_eq!(answer("", &read).0, "405 Method Not Allowed");
    }

    #[test]
    fn a_line_longer_than_the_limit_ends_the_request() {
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_LINE));
        assert_eq!(read_line(&mut long.as_bytes()), None);
        assert_eq!(read_line(&mut &b"GET / HTTP/1.1\r\n"[..]).as_deref(), Some("GET / HTTP/1.1"));
    }
}
