//! Release-mode timing of nfguard's layer reader without building the whole
//! crate (kube, rustls, ...): the very source files of src/inspect that
//! `Layer::from_tar` needs, compiled alone. Baselines measured in the same
//! run: reading the bytes, sha256 of the bytes (the registry verifies every
//! blob's digest anyway) and the `tar` crate's walk. Run:
//!   CARGO_TARGET_DIR=target/inspect-standalone \
//!     cargo run --release --manifest-path benches/inspect_standalone/Cargo.toml
#[allow(dead_code)]
#[path = "../../../src/rootfs/layered.rs"]
mod layered;
#[allow(dead_code)]
#[path = "../../../src/rootfs/paths.rs"]
mod paths;
#[allow(dead_code)]
#[path = "../../../src/rootfs/fs.rs"]
mod fs;
#[allow(dead_code)]
#[path = "../../../src/rootfs/tarstream.rs"]
mod tarstream;
use layered::{Layer, LayerLimits};
use std::hint::black_box;
use std::io::Read;
use std::time::{Duration, Instant};

fn layer_tar(files: usize, size: usize) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::with_capacity(files * (size + 1024) + (1 << 20)));
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut data = vec![0u8; size];
    for i in 0..files {
        for chunk in data.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let bytes = x.to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        let mut h = tar::Header::new_gnu();
        h.set_size(size as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(
            &mut h,
            format!("usr/share/doc/pkg{}/file{i}", i % 97),
            &data[..],
        )
        .unwrap();
    }
    let bin = vec![0x41u8; 200 << 10];
    let mut h = tar::Header::new_gnu();
    h.set_size(bin.len() as u64);
    h.set_mode(0o755);
    h.set_cksum();
    b.append_data(&mut h, "usr/sbin/xtables-nft-multi", &bin[..])
        .unwrap();
    b.into_inner().unwrap()
}

fn median(mut f: impl FnMut(), n: usize) -> Duration {
    let mut t: Vec<Duration> = (0..n)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    t[n / 2]
}

fn main() {
    for (label, files, size) in [
        ("250MB_in_5MB_files", 50, 5 << 20),
        ("100MB_in_2KB_files", 50_000, 2 << 10),
        ("100MB_in_256B_files", 250_000, 256),
    ] {
        let tar = layer_tar(files, size);
        let read = median(
            || {
                let mut r = &tar[..];
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let k = r.read(&mut buf).unwrap();
                    if k == 0 {
                        break;
                    }
                    black_box(&buf[..k]);
                }
            },
            15,
        );
        let sha = median(
            || {
                use sha2::Digest;
                black_box(sha2::Sha256::digest(&tar[..]));
            },
            15,
        );
        let walk = median(
            || {
                let mut a = tar::Archive::new(&tar[..]);
                let mut n = 0u64;
                for e in a.entries().unwrap() {
                    n += e.unwrap().size();
                }
                black_box(n);
            },
            15,
        );
        let reader = median(
            || {
                let mut r = tarstream::TarReader::new(&tar[..]);
                let mut n = 0u64;
                while let Some(e) = r.next_entry().unwrap() {
                    n += e.size;
                }
                black_box(n);
            },
            15,
        );
        let ours = median(
            || {
                black_box(
                    Layer::from_tar(
                        &tar[..],
                        &LayerLimits {
                            max_entries: 1_000_000,
                            ..LayerLimits::default()
                        },
                    )
                    .unwrap(),
                );
            },
            15,
        );
        println!(
            "{label}: {} MB, {} entries | read bytes {:?} | tar crate walk {:?} ({:.2}x) | Layer::from_tar {:?} ({:.2}x read, {:.2}x tar-crate walk)",
            tar.len() >> 20,
            files + 1,
            read,
            walk,
            walk.as_secs_f64() / read.as_secs_f64(),
            ours,
            ours.as_secs_f64() / read.as_secs_f64(),
            ours.as_secs_f64() / walk.as_secs_f64()
        );
        println!(
            "  sha256 of the bytes {:?} ({:.2}x read)",
            sha,
            sha.as_secs_f64() / read.as_secs_f64()
        );
        println!(
            "  TarReader walk alone {:?} ({:.2}x read)",
            reader,
            reader.as_secs_f64() / read.as_secs_f64()
        );
        println!(
            "  => Layer::from_tar / sha256 = {:.2}x",
            ours.as_secs_f64() / sha.as_secs_f64()
        );
    }
}
