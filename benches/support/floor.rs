//! The floor: nginx (Debian's package) answering every POST with a fixed
//! AdmissionReview over TLS, with the same certificate. Whatever any HTTPS
//! webhook does, it cannot beat this on the same machine.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Nginx {
    child: Child,
    pub addr: String,
    pub pid: u32,
}

impl Nginx {
    /// Starts nginx with 2 workers (the machine's cores) on a free loopback port.
    pub fn start(dir: &Path, certs: &Path, response: &str) -> Option<Nginx> {
        let binary = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())?;
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let prefix = dir.join("nginx");
        std::fs::create_dir_all(prefix.join("logs")).ok()?;
        let escaped = response.replace('\\', "\\\\").replace('\'', "\\'");
        let config = format!(
            r#"worker_processes 2;
daemon off;
master_process on;
error_log {prefix}/logs/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/body;
  client_max_body_size 8m;
  client_body_buffer_size 1m;
  keepalive_requests 10000000;
  keepalive_timeout 300s;
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {certs}/tls.crt;
    ssl_certificate_key {certs}/tls.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    location = /mutate {{
      default_type application/json;
      return 200 '{escaped}';
    }}
  }}
}}
"#,
            prefix = prefix.display(),
            certs = certs.display(),
        );
        let conf = prefix.join("nginx.conf");
        std::fs::write(&conf, config).ok()?;
        let child = Command::new(binary)
            .arg("-p")
            .arg(&prefix)
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let pid = child.id();
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(&addr).is_err() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Nginx { child, addr, pid })
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        terminate(&mut self.child, self.pid);
    }
}

/// Stops a server process: TERM first, which lets nginx's master stop its workers (a KILL
/// would orphan them) and lets any server finish cleanly; KILL after 5 s.
pub fn terminate(child: &mut Child, pid: u32) {
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}
