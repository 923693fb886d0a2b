//! Test support: a tiny HTTP/1.1 server on 127.0.0.1 that plays a registry
//! serving crafted (lying) responses: wrong digests, truncated bodies, 404s,
//! or a listener that accepts and never answers. Thread-based, no async.
//!
//! ```ignore
//! use crate::support::registry_lying as lying;
//! let srv = lying::LyingRegistry::start(routes);
//! ```

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[derive(Clone, Debug)]
pub enum Reply {
    /// Status, content type and body, sent completely.
    Full {
        status: u16,
        content_type: String,
        body: Vec<u8>,
    },
    /// Announce `body.len() + missing` bytes, send `body`, then close.
    Truncated { body: Vec<u8>, missing: u64 },
    /// A 200 whose body starts like a manifest and goes on and on (up to
    /// `ENDLESS_CAP` bytes, so a client that never stops still ends): with
    /// chunked encoding when `content_length` is None, else under that
    /// (false) Content-Length.
    Endless {
        content_type: String,
        content_length: Option<u64>,
    },
}

/// Where an `Endless` body stops even if the client keeps reading.
pub const ENDLESS_CAP: u64 = 1 << 30;

impl Reply {
    pub fn json(media_type: &str, body: Vec<u8>) -> Self {
        Reply::Full {
            status: 200,
            content_type: media_type.into(),
            body,
        }
    }
    pub fn blob(body: Vec<u8>) -> Self {
        Reply::Full {
            status: 200,
            content_type: "application/octet-stream".into(),
            body,
        }
    }
}

pub struct LyingRegistry {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl LyingRegistry {
    /// Serve `routes` (path such as `/v2/app/manifests/v1` -> reply); `/v2/`
    /// answers 200, anything else a registry-style 404.
    pub fn start(routes: HashMap<String, Reply>) -> Self {
        Self::start_with_bearer(routes, None)
    }

    /// Like `start`, but when `token` is given every path except `/token`
    /// (including `/v2/`) wants `Authorization: Bearer <token>` and answers
    /// 401 with a Bearer challenge pointing at `/token`, which hands the token
    /// out to anyone (the registry token flow, anonymous pull).
    pub fn start_with_bearer(routes: HashMap<String, Reply>, token: Option<&str>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().expect("addr").port();
        let bearer = token.map(|t| Arc::new((t.to_string(), port)));
        let stop = Arc::new(AtomicBool::new(false));
        let routes = Arc::new(routes);
        let stop2 = stop.clone();
        listener.set_nonblocking(true).expect("nonblocking");
        std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let routes = routes.clone();
                        let bearer = bearer.clone();
                        std::thread::spawn(move || {
                            let _ = serve(s, &routes, bearer.as_deref());
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Self { port, stop }
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for LyingRegistry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(
    stream: TcpStream,
    routes: &HashMap<String, Reply>,
    bearer: Option<&(String, u16)>,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut request = String::new();
        if reader.read_line(&mut request)? == 0 {
            return Ok(());
        }
        let mut authorization = String::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
                break;
            }
            if let Some((name, value)) = h.split_once(':')
                && name.eq_ignore_ascii_case("authorization")
            {
                authorization = value.trim().to_string();
            }
        }
        let mut parts = request.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or_default().to_string();
        let head_only = method == "HEAD";
        if let Some((token, port)) = bearer {
            if path.starts_with("/token") {
                let body = format!(r#"{{"token":"{token}"}}"#);
                write!(
                    out,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )?;
                out.flush()?;
                continue;
            }
            if authorization != format!("Bearer {token}") {
                let body =
                    br#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#;
                write!(
                    out,
                    "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nWWW-Authenticate: Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"lying\"\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                )?;
                if !head_only {
                    out.write_all(body)?;
                }
                out.flush()?;
                continue;
            }
        }
        let reply = if path == "/v2/" || path == "/v2" {
            Reply::json("application/json", b"{}".to_vec())
        } else {
            routes.get(&path).cloned().unwrap_or(Reply::Full {
                status: 404,
                content_type: "application/json".into(),
                body: br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#
                    .to_vec(),
            })
        };
        match reply {
            Reply::Full {
                status,
                content_type,
                body,
            } => {
                write!(
                    out,
                    "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                )?;
                if !head_only {
                    out.write_all(&body)?;
                }
                out.flush()?;
            }
            Reply::Truncated { body, missing } => {
                write!(
                    out,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len() as u64 + missing
                )?;
                out.write_all(&body)?;
                out.flush()?;
                return Ok(()); // close mid-body
            }
            Reply::Endless {
                content_type,
                content_length,
            } => {
                let framing = match content_length {
                    None => "Transfer-Encoding: chunked".to_string(),
                    Some(n) => format!("Content-Length: {n}"),
                };
                write!(
                    out,
                    "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n{framing}\r\nConnection: close\r\n\r\n"
                )?;
                let chunked = content_length.is_none();
                let mut piece =
                    br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","annotations":{"x":""#
                        .to_vec();
                piece.resize(64 << 10, b'a');
                let mut sent = 0u64;
                // Ends when the client hangs up (write error) or at the cap.
                while sent < ENDLESS_CAP {
                    if chunked {
                        write!(out, "{:x}\r\n", piece.len())?;
                    }
                    out.write_all(&piece)?;
                    if chunked {
                        out.write_all(b"\r\n")?;
                    }
                    sent += piece.len() as u64;
                    piece.fill(b'a');
                }
                if chunked {
                    out.write_all(b"0\r\n\r\n")?;
                }
                out.flush()?;
                return Ok(());
            }
        }
    }
}

/// A listener that accepts connections and never says a word.
pub struct StallingListener {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl StallingListener {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stop2.load(Ordering::Relaxed) {
                if let Ok((s, _)) = listener.accept() {
                    held.push(s);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Self { port, stop }
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for StallingListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
