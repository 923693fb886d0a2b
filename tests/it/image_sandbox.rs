//! The image parser sandbox (issue #37 item 1): layers are decompressed and
//! parsed in a child process of the real `nfguard` binary that confines
//! itself first. Here the child is asked to do what a compromised parser
//! would (read the ServiceAccount token, connect out, start a program,
//! reach its parent, map executable memory, write a file, exceed its memory
//! and CPU, hang) and each attempt must fail; the same attempts made from
//! this unconfined test process succeed, so the probes can tell.

use crate::support::images::*;
use crate::support::registry::Registry;
use nfguard::registry::parse::{self, Failure, Parser, Probe, SandboxConfig, Session};
use nfguard::registry::{ImageInspector, InspectStats, Platform, RegistryConfig};
use nfguard::rootfs::LayerLimits;
use std::io::ErrorKind;
use std::net::TcpListener;
use std::time::{Duration, Instant};

fn sandbox(memory_bytes: u64) -> Parser {
    Parser::Sandbox(SandboxConfig {
        program: env!("CARGO_BIN_EXE_nfguard").into(),
        memory_bytes,
    })
}

/// A loopback listener and a count of the connections it got.
fn recording_listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let addr = l.local_addr().unwrap().to_string();
    (l, addr)
}

fn connections(l: &TcpListener) -> usize {
    let mut n = 0;
    loop {
        match l.accept() {
            Ok(_) => n += 1,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return n,
            Err(e) => panic!("{e}"),
        }
    }
}

fn token_file(dir: &std::path::Path) -> String {
    let token = dir.join("token");
    std::fs::write(&token, "eyJ-a-serviceaccount-token").unwrap();
    token.to_string_lossy().into_owned()
}

#[tokio::test]
async fn the_parser_child_cannot_read_the_token_connect_spawn_or_reach_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path());
    let (listener, addr) = recording_listener();
    let probe = Probe {
        secret_file: token.clone(),
        connect_to: addr.clone(),
        ..Probe::default()
    };

    // The control: unconfined, the same attempts get through (signalled
    // and traced: a process of this test's own, never the test runner).
    let mut bystander = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let free = parse::probe::attempt(&Probe {
        other_pid: bystander.id() as i32,
        ..probe.clone()
    });
    bystander.kill().unwrap();
    bystander.wait().unwrap();
    println!("figure: unconfined attempts: {free:#?}");
    assert_eq!(free.read_secret, "read 26 bytes", "{free:?}");
    assert!(free.connect.starts_with("connected"), "{free:?}");
    assert!(free.spawn.starts_with("ran /bin/true"), "{free:?}");
    assert_eq!(
        free.escapes().len(),
        7,
        "every attempt succeeds unconfined: {free:?}"
    );
    assert_eq!(
        connections(&listener),
        1,
        "the listener records a connection"
    );
    let _ = std::fs::remove_file("/tmp/nfguard-parser-escape");

    let mut session = Session::start(&sandbox(256 << 20), &LayerLimits::default(), 5).unwrap();
    let pid = session.pid().expect("a child process");
    assert_ne!(pid, std::process::id());
    let report = session.probe(&probe).await.expect("the child answers");
    println!("figure: sandboxed attempts: {report:#?}");
    assert!(
        report.escapes().is_empty(),
        "escapes: {:?}",
        report.escapes()
    );
    for refused in [
        &report.read_secret,
        &report.connect,
        &report.spawn,
        &report.signal_parent,
        &report.trace_parent,
        &report.executable_memory,
        &report.write_file,
    ] {
        assert!(refused.contains("Operation not permitted"), "{report:#?}");
    }
    assert_eq!(
        connections(&listener),
        0,
        "no connection reached the listener"
    );
    assert!(!std::path::Path::new("/tmp/nfguard-parser-escape").exists());

    // The start-up check of the webhook and controller says the same.
    parse::self_check(&sandbox(256 << 20), &token, &addr)
        .await
        .unwrap();
    assert_eq!(connections(&listener), 0);
    // And fails, naming the escapes, where nothing confines the parser: the
    // in-process parser refuses to be probed at all.
    let e = parse::self_check(&Parser::InProcess, &token, &addr)
        .await
        .unwrap_err();
    assert!(e.contains("image parser"), "{e}");
}

#[tokio::test]
async fn the_parser_child_is_stopped_at_its_memory_limit() {
    let mut session = Session::start(&sandbox(96 << 20), &LayerLimits::default(), 5).unwrap();
    let probe = Probe {
        then_allocate: 1 << 30,
        ..Probe::default()
    };
    session.probe(&probe).await.unwrap();
    let stopped = session.outcome().await;
    assert!(
        matches!(&stopped, Failure::Stopped(why) if why.contains("memory limit")),
        "{stopped:?}"
    );
}

#[tokio::test]
async fn the_parser_child_is_stopped_at_its_cpu_limit() {
    let mut session = Session::start(&sandbox(96 << 20), &LayerLimits::default(), 1).unwrap();
    let probe = Probe {
        then_spin: true,
        ..Probe::default()
    };
    let started = Instant::now();
    session.probe(&probe).await.unwrap();
    let stopped = session.outcome().await;
    assert!(
        matches!(&stopped, Failure::Stopped(why) if why.contains("CPU limit")),
        "{stopped:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

fn gone_or_zombie(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn a_hung_parser_child_is_killed_when_its_inspection_ends() {
    let mut session = Session::start(&sandbox(96 << 20), &LayerLimits::default(), 30).unwrap();
    let pid = session.pid().unwrap();
    let probe = Probe {
        then_hang: true,
        ..Probe::default()
    };
    session.probe(&probe).await.unwrap();
    assert!(!gone_or_zombie(pid), "the child hangs on");
    drop(session); // the inspection's timeout drops its session
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gone_or_zombie(pid) {
        assert!(
            Instant::now() < deadline,
            "child {pid} outlived its session"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn inspector(reg: &Registry, parser: Parser) -> ImageInspector {
    let empty = reg.storage().with_file_name("empty-docker-config.json");
    std::fs::write(&empty, "{}").unwrap();
    ImageInspector::new(RegistryConfig {
        insecure_registries: vec![reg.host()],
        docker_config: Some(empty),
        parser,
        ..RegistryConfig::default()
    })
}

/// The sandboxed inspection answers exactly as the in-process one, for an
/// image of several layers (one shared, so a cached record is pushed too);
/// and what it costs, per cold inspection, against the in-process path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxed_inspection_answers_as_in_process_and_its_cost() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let base = build_layer(
        work.path(),
        &debian_iptables("1.8.9", Alt::Legacy),
        Compression::Gzip,
    );
    let nft = build_layer(work.path(), &debian_nftables("1.0.6"), Compression::Zstd);
    const IMAGES: usize = 8;
    let refs: Vec<String> = (0..IMAGES)
        .map(|i| {
            let top = build_layer(
                work.path(),
                &[dir("/app"), file("/app/x", format!("{i}"))],
                Compression::Gzip,
            );
            push_image(
                &reg.host(),
                &format!("app{i}"),
                "v1",
                &[base.clone(), nft.clone(), top],
                &ImageConfig::default(),
            )
            .reference
        })
        .collect();
    let platform: Platform = "linux/amd64".parse().unwrap();
    let mut answers = Vec::new();
    let mut costs = Vec::new();
    for parser in [Parser::InProcess, sandbox(256 << 20)] {
        let inspector = inspector(&reg, parser);
        let started = Instant::now();
        let mut profiles = Vec::new();
        let mut stats: Vec<InspectStats> = Vec::new();
        for r in &refs {
            let (p, s) = inspector
                .inspect_with_stats(r, &platform, None)
                .await
                .unwrap();
            profiles.push(p);
            stats.push(s);
        }
        costs.push(started.elapsed() / IMAGES as u32);
        assert_eq!(stats[0].layers_fetched, 3, "{:?}", stats[0]);
        assert!(
            stats[1].layers_from_cache >= 1,
            "shared layers from the cache: {:?}",
            stats[1]
        );
        answers.push(profiles);
    }
    assert_eq!(answers[0], answers[1], "both parsers give one answer");
    let p = &answers[1][0];
    assert_eq!(
        p.iptables.as_ref().unwrap().version.unwrap().to_string(),
        "1.8.9"
    );
    assert!(p.nftables.is_some(), "{p:?}");
    println!(
        "figure: per cold inspection of a 3-layer image: in process {:.1} ms, sandboxed {:.1} ms ({:.2}x)",
        costs[0].as_secs_f64() * 1e3,
        costs[1].as_secs_f64() * 1e3,
        costs[1].as_secs_f64() / costs[0].as_secs_f64()
    );
}
