//! Stale-if-error against a real registry (Debian's `docker-registry` on
//! 127.0.0.1): a tag whose pin expired while its registry gives no answer
//! (killed, HTTP 503 or 429, accepting and never answering) is answered
//! with its last answer, marked stale and counted, for the bound past the
//! pin; then the look-up fails as before. A 401, 403 or 404 is never masked:
//! it forgets the last answer. All traffic stays on loopback.

use crate::support::images;
use crate::support::registry;

use images::*;
use nfguard::compat::evaluate::{ImageKey, ImageResolution};
use nfguard::registry::stale::PROBE;
use nfguard::registry::{
    Anonymous, Credentials, ImageInspector, Platform, RegistryConfig, RegistryError,
};
use nfguard::runtime::admin::Exposition;
use nfguard::webhook::images::{CacheTtl, ImageCache};
use nfguard::webhook::metrics::Metrics;
use registry::Registry;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A short pin, so the tests need not wait the real 30 s.
const TTL: Duration = Duration::from_millis(500);

fn amd64() -> Platform {
    "linux/amd64".parse().unwrap()
}

/// An inspector for `host` (plain HTTP) with an empty docker config.
fn inspector(host: &str, config: RegistryConfig) -> (ImageInspector, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("docker-config.json");
    std::fs::write(&empty, "{}").unwrap();
    let insp = ImageInspector::new(RegistryConfig {
        insecure_registries: vec![host.to_string()],
        docker_config: Some(empty),
        tag_ttl: TTL,
        ..config
    });
    (insp, dir)
}

fn push(reg: &Registry, work: &std::path::Path, repo: &str, version: &str) -> Pushed {
    let layer = build_layer(
        work,
        &bare_iptables(version, Alt::Legacy),
        Compression::Gzip,
    );
    push_image(&reg.host(), repo, "v1", &[layer], &ImageConfig::default())
}

fn version_of(p: &nfguard::facts::ImageProfile) -> String {
    p.iptables.as_ref().unwrap().version.unwrap().to_string()
}

/// One sample of the webhook's /metrics text.
fn sample(metrics: &Metrics, name: &str) -> f64 {
    let text = metrics.encode();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} not in\n{text}"))
}

const SERVED: &str = "nfguard_webhook_registry_stale_answers_total";
const MAX_AGE: &str = "nfguard_webhook_registry_stale_answer_max_age_seconds";

/// What the webhook's image cache answers for `image` (anonymous).
async fn judge(webhook: &ImageCache, image: &str) -> ImageResolution {
    let budget = Duration::from_secs(5);
    let key = ImageKey::new(image, &amd64());
    let out = webhook
        .resolve(
            std::slice::from_ref(&key),
            &Anonymous,
            "team",
            tokio::time::Instant::now() + budget,
            budget,
        )
        .await;
    out.get(image, &amd64()).cloned().unwrap()
}

async fn sleep_until(t: Instant) {
    tokio::time::sleep(t.saturating_duration_since(Instant::now())).await;
}

/// The registry process is killed: the tag's last answer stands in (in the
/// inspector and through the webhook's image cache) until the bound, for
/// the credential that read it only; then the look-up fails as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_keeps_its_last_answer_while_its_registry_is_down_then_fails() {
    const BOUND: Duration = Duration::from_millis(1500);
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let img = push(&reg, work.path(), "app", "1.8.7");
    let (insp, _config) = inspector(
        &reg.host(),
        RegistryConfig {
            stale_if_error: BOUND,
            ..RegistryConfig::default()
        },
    );
    let metrics = Arc::new(Metrics::new());
    let webhook = ImageCache::new(
        Arc::new(insp.clone()),
        100,
        CacheTtl {
            ok_by_tag: TTL,
            ..CacheTtl::default()
        },
        metrics.clone(),
    );
    let judge = || judge(&webhook, &img.reference);

    // Registry up: a fresh answer, pinned now.
    let (fresh, stats) = insp
        .inspect_with_stats(&img.reference, &amd64(), None)
        .await
        .unwrap();
    let pinned_by = Instant::now();
    assert_eq!(stats.stale, None);
    assert_eq!(version_of(&fresh), "1.8.7");
    assert!(matches!(judge().await, ImageResolution::Resolved(_)));
    let (served_before, age_before) = (sample(&metrics, SERVED), sample(&metrics, MAX_AGE));
    assert_eq!(age_before, 0.0);

    // The registry dies; the pin (and the webhook's answer) expire.
    let host = reg.host();
    drop(reg);
    sleep_until(pinned_by + TTL + Duration::from_millis(100)).await;
    let (stale, stats) = insp
        .inspect_with_stats(&img.reference, &amd64(), None)
        .await
        .expect("the last answer stands in");
    let s = stats.stale.clone().expect("marked stale");
    assert!(stats.from_cache, "{stats:?}");
    assert_eq!(
        (stale.digest.as_str(), version_of(&stale).as_str()),
        (img.digest.as_str(), "1.8.7")
    );
    assert_eq!(stale.image, img.reference);
    assert!(s.age_millis >= TTL.as_millis() as u64, "{s:?}");
    assert!(
        s.note.starts_with("stale answer from ")
            && s.note.contains(&format!(
                "ago, served because the registry failed: cannot reach registry {host}: unreachable"
            )),
        "{}",
        s.note
    );
    assert!(sample(&metrics, SERVED) >= served_before + 1.0);
    assert!(sample(&metrics, MAX_AGE) >= TTL.as_secs_f64());
    println!("stale after the registry died: {}", s.note);

    // The webhook judges by it: resolved, not unresolved, no registry error.
    match judge().await {
        ImageResolution::Resolved(p) => assert_eq!(p.digest, img.digest),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        sample(&metrics, "nfguard_webhook_registry_errors_total"),
        0.0
    );

    // Kept per credential: another one never reads it.
    let other = Credentials::Basic {
        username: "eve".into(),
        password: "guess".into(),
    };
    let err = insp
        .inspect(&img.reference, &amd64(), Some(&other))
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Network { .. }), "{err}");

    // Past the bound, the look-up fails as it always did.
    sleep_until(pinned_by + TTL + BOUND + Duration::from_millis(100)).await;
    let served = sample(&metrics, SERVED);
    let err = insp
        .inspect_with_stats(&img.reference, &amd64(), None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::Network { outage: true, .. }),
        "{err}"
    );
    assert_eq!(sample(&metrics, SERVED), served);
    assert_eq!(sample(&metrics, MAX_AGE), 0.0);
    // The webhook too, once its own answer (kept one tag TTL) expires.
    tokio::time::sleep(TTL).await;
    match judge().await {
        ImageResolution::Unresolved { error } => {
            assert!(error.contains("cannot reach registry"), "{error}")
        }
        other => panic!("{other:?}"),
    }
}

/// A registry that answers 503 or 429 (with a body nfguard must not echo),
/// or accepts and never answers: the last answer stands in, within
/// `stale::PROBE` for the silent one. A 404 (the tag deleted), a 403 and a
/// 401 (the registry now wants credentials) are answers: they fail the
/// look-up and forget the last answer, so a 503 afterwards fails too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn silence_keeps_the_last_answer_and_401_403_404_never_are_masked() {
    let mut reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let app = push(&reg, work.path(), "app", "1.8.9");
    let gone = push(&reg, work.path(), "gone", "1.8.9");
    let denied = push(&reg, work.path(), "denied", "1.8.9");
    let front = front::Front::start(reg.host());
    let (insp, _config) = inspector(
        &front.host(),
        RegistryConfig {
            stale_if_error: Duration::from_secs(600),
            timeout: Duration::from_secs(30),
            ..RegistryConfig::default()
        },
    );
    let via = |p: &Pushed| p.reference.replace(&reg.host(), &front.host());
    let (app_ref, gone_ref, denied_ref) = (via(&app), via(&gone), via(&denied));
    let look = |r: &str| {
        let insp = insp.clone();
        let r = r.to_string();
        async move { insp.inspect_with_stats(&r, &amd64(), None).await }
    };
    let started = Instant::now();
    for r in [&app_ref, &gone_ref, &denied_ref] {
        assert_eq!(look(r).await.unwrap().1.stale, None, "{r}");
    }
    let before = nfguard::registry::stale::answers_served();
    sleep_until(started + TTL * 2).await;

    for (mode, says) in [
        (front::Mode::Status(503), "HTTP 503"),
        (front::Mode::Status(429), "HTTP 429"),
        (front::Mode::Silent, "no answer within 3.0s"),
    ] {
        front.set(mode);
        let t = Instant::now();
        let (p, stats) = look(&app_ref)
            .await
            .unwrap_or_else(|e| panic!("{mode:?}: {e}"));
        let took = t.elapsed();
        let note = stats.stale.expect("marked stale").note;
        assert_eq!(p.digest, app.digest);
        assert!(note.contains(says), "{mode:?}: {note}");
        assert!(!note.contains(front::BODY_WORD), "{note}");
        assert!(
            took < PROBE + Duration::from_secs(2),
            "{mode:?} took {took:?}"
        );
        println!("{mode:?} -> stale in {took:?}: {note}");
    }
    assert!(nfguard::registry::stale::answers_served() >= before + 3);

    // Back: a fresh answer again, renewing the pin.
    front.set(front::Mode::Forward);
    assert_eq!(look(&app_ref).await.unwrap().1.stale, None);

    // 404: the tag is deleted for real. Not masked, and forgotten.
    let status = reqwest::Client::new()
        .delete(format!(
            "http://{}/v2/gone/manifests/{}",
            reg.host(),
            gone.digest
        ))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status.as_u16(), 202);
    let err = look(&gone_ref).await.unwrap_err();
    assert!(matches!(err, RegistryError::NotFound { .. }), "{err}");
    front.set(front::Mode::Status(503));
    let err = look(&gone_ref).await.unwrap_err();
    assert!(err.to_string().ends_with("HTTP 503"), "{err}");

    // 403 from the registry's front: the same.
    front.set(front::Mode::Status(403));
    let err = look(&denied_ref).await.unwrap_err();
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err}");
    front.set(front::Mode::Status(503));
    assert!(look(&denied_ref).await.is_err());

    // 401: the registry now demands credentials. Wait out app's pin first.
    front.set(front::Mode::Forward);
    tokio::time::sleep(TTL + Duration::from_millis(100)).await;
    reg.restart_with_basic_auth("bob", "pull-secret");
    let err = look(&app_ref).await.unwrap_err();
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err}");
    front.set(front::Mode::Status(503));
    let err = look(&app_ref).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::Network { outage: true, .. }),
        "{err}"
    );
    assert_eq!(front.silent_held(), 1, "the silent front was really asked");
}

/// A loopback front for the registry: forwards each request (one per
/// connection), or answers every request with a status and an HTML body,
/// or accepts and never answers.
mod front {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Mode {
        Forward,
        Status(u16),
        Silent,
    }

    /// In every body the front sends itself: never in an error.
    pub const BODY_WORD: &str = "remote-secret-body";

    pub struct Front {
        port: u16,
        mode: Arc<Mutex<Mode>>,
        stop: Arc<AtomicBool>,
        silent: Arc<AtomicUsize>,
    }

    impl Front {
        pub fn start(upstream: String) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
            listener.set_nonblocking(true).unwrap();
            let port = listener.local_addr().unwrap().port();
            let mode = Arc::new(Mutex::new(Mode::Forward));
            let stop = Arc::new(AtomicBool::new(false));
            let silent = Arc::new(AtomicUsize::new(0));
            let (m, st, si) = (mode.clone(), stop.clone(), silent.clone());
            std::thread::spawn(move || {
                while !st.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((s, _)) => {
                            let (m, st, si, up) =
                                (m.clone(), st.clone(), si.clone(), upstream.clone());
                            std::thread::spawn(move || {
                                let _ = serve(s, &m, &st, &si, &up);
                            });
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            });
            Front {
                port,
                mode,
                stop,
                silent,
            }
        }

        pub fn host(&self) -> String {
            format!("127.0.0.1:{}", self.port)
        }

        pub fn set(&self, mode: Mode) {
            *self.mode.lock().unwrap() = mode;
        }

        /// Requests held without an answer so far.
        pub fn silent_held(&self) -> usize {
            self.silent.load(Ordering::SeqCst)
        }
    }

    impl Drop for Front {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
        }
    }

    /// The request head, up to the blank line (GETs have no body).
    fn read_head(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if head.len() > 64 << 10 || s.read(&mut byte)? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            head.push(byte[0]);
        }
        Ok(head)
    }

    fn serve(
        mut client: TcpStream,
        mode: &Mutex<Mode>,
        stop: &AtomicBool,
        silent: &AtomicUsize,
        upstream: &str,
    ) -> std::io::Result<()> {
        client.set_nonblocking(false)?;
        client.set_read_timeout(Some(Duration::from_secs(30)))?;
        let head = read_head(&mut client)?;
        let now = *mode.lock().unwrap();
        match now {
            Mode::Forward => {
                // One request per connection: the mode is read per request.
                let text = String::from_utf8_lossy(&head);
                let mut out: String = text
                    .trim_end()
                    .split("\r\n")
                    .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
                    .map(|l| format!("{l}\r\n"))
                    .collect();
                out.push_str("Connection: close\r\n\r\n");
                let mut up = TcpStream::connect(upstream)?;
                up.write_all(out.as_bytes())?;
                std::io::copy(&mut up, &mut client)?;
            }
            Mode::Status(code) => {
                let body = format!("<html><pre>{BODY_WORD}</pre></html>");
                write!(
                    client,
                    "HTTP/1.1 {code} Scripted\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )?;
            }
            Mode::Silent => {
                silent.fetch_add(1, Ordering::SeqCst);
                let until = Instant::now() + Duration::from_secs(60);
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
        Ok(())
    }
}
