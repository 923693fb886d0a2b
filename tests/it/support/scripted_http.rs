//! Test support: a loopback HTTP/1.1 server (plain or real TLS) that answers
//! each request with a handler's scripted reply and records every accepted
//! connection and every request's path and headers. A refusal is proven by
//! a server that records zero connections.
//!
//! ```ignore
//! use crate::support::scripted_http as scripted;
//! let srv = scripted::Server::start("127.0.0.2", |req| scripted::Reply::status(404));
//! assert_eq!(srv.connections(), 0);
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn ok(content_type: &str, body: Vec<u8>) -> Self {
        Reply::status(200)
            .header("Content-Type", content_type)
            .body(body)
    }

    pub fn redirect(location: &str) -> Self {
        Reply::status(307).header("Location", location)
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }
}

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

/// TLS material for `Server::start_tls`: the certificate chain and key (PEM).
pub struct TlsIdentity {
    pub cert_pem: String,
    pub key_pem: String,
}

pub struct Server {
    port: u16,
    ip: String,
    connections: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
}

impl Server {
    /// Plain HTTP on `ip` (a loopback address) and a free port.
    pub fn start(ip: &str, handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Self {
        Self::spawn(ip, None, Arc::new(handler))
    }

    /// HTTPS with `tls` on `ip` and a free port.
    pub fn start_tls(
        ip: &str,
        tls: &TlsIdentity,
        handler: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let certs = rustls_pemfile::certs(&mut tls.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("certificate PEM");
        let key = rustls_pemfile::private_key(&mut tls.key_pem.as_bytes())
            .expect("key PEM")
            .expect("a key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server certificate");
        Self::spawn(ip, Some(Arc::new(config)), Arc::new(handler))
    }

    fn spawn(ip: &str, tls: Option<Arc<rustls::ServerConfig>>, handler: Arc<Handler>) -> Self {
        let listener = TcpListener::bind((ip, 0)).expect("bind a loopback address");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, r, s) = (connections.clone(), requests.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        c.fetch_add(1, Ordering::SeqCst);
                        let (handler, requests, tls) = (handler.clone(), r.clone(), tls.clone());
                        std::thread::spawn(move || {
                            let _ = stream.set_nonblocking(false);
                            let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
                            match tls {
                                None => serve(stream, &*handler, &requests),
                                Some(cfg) => {
                                    let Ok(conn) = rustls::ServerConnection::new(cfg) else {
                                        return;
                                    };
                                    serve(
                                        rustls::StreamOwned::new(conn, stream),
                                        &*handler,
                                        &requests,
                                    )
                                }
                            }
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Server {
            port,
            ip: ip.to_string(),
            connections,
            requests,
            stop,
        }
    }

    pub fn host(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Requests read so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve<S: Read + Write>(stream: S, handler: &Handler, requests: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            match reader.read_line(&mut h) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if h == "\r\n" || h == "\n" {
                break;
            }
            if let Some((n, v)) = h.split_once(':') {
                headers.push((n.trim().to_string(), v.trim().to_string()));
            }
        }
        let req = Request {
            method,
            target,
            headers,
        };
        requests.lock().unwrap().push(req.clone());
        let reply = handler(&req);
        let out = reader.get_mut();
        let mut head = format!("HTTP/1.1 {} X\r\n", reply.status);
        for (n, v) in &reply.headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", reply.body.len()));
        if out.write_all(head.as_bytes()).is_err() {
            return;
        }
        if req.method != "HEAD" && out.write_all(&reply.body).is_err() {
            return;
        }
        if out.flush().is_err() {
            return;
        }
    }
}
