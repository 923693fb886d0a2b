//! Cost of `Layer::from_tar` on layers of irrelevant data, against the
//! baseline of merely reading the same bytes (io::copy into a sink) in the
//! same run. Run: `cargo bench --bench inspect_layer` (add `--profile dev`
//! on a busy machine; the ratio is what matters).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nfguard::rootfs::{Layer, LayerLimits};
use std::hint::black_box;
use std::io::Read;

/// A tar of `files` files of `size` pseudo-random bytes under /usr/share,
/// plus a real-looking iptables install at the end.
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

fn bench(c: &mut Criterion) {
    for (label, files, size) in [
        ("250MB_in_5MB_files", 50, 5 << 20),
        ("100MB_in_2KB_files", 50_000, 2 << 10),
    ] {
        let tar = layer_tar(files, size);
        let mut g = c.benchmark_group(label);
        g.sample_size(10);
        g.throughput(Throughput::Bytes(tar.len() as u64));
        g.bench_function("baseline_read_bytes", |b| {
            b.iter(|| {
                let mut r = &tar[..];
                let mut buf = vec![0u8; 64 << 10];
                let mut n = 0usize;
                loop {
                    let k = r.read(&mut buf).unwrap();
                    if k == 0 {
                        break;
                    }
                    n += black_box(&buf[..k]).len();
                }
                n
            })
        });
        // The tar crate's own walk over the entries, keeping nothing.
        g.bench_function("baseline_tar_walk", |b| {
            b.iter(|| {
                let mut a = tar::Archive::new(&tar[..]);
                let mut n = 0u64;
                for e in a.entries().unwrap() {
                    n += e.unwrap().size();
                }
                n
            })
        });
        g.bench_function("layer_from_tar", |b| {
            b.iter(|| Layer::from_tar(black_box(&tar[..]), &LayerLimits::default()).unwrap())
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
