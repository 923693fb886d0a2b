//! Hostile input: each answered by a clear error or an honest "unknown",
//! bounded memory, never a panic. Big inputs are generated as streams so the
//! tests themselves stay cheap.

use crate::inspect_support;

use inspect_support::*;
use nfguard::facts::EvidenceSource;
use nfguard::rootfs::{FsError, HostRoot, Layer, LayerError, LayerLimits, Lookup, RootFs, collect};
use std::collections::BTreeMap;
use std::io::{Cursor, Read};
use std::os::unix::fs::symlink;

fn ustar_header(name: &str, size: u64) -> [u8; 512] {
    let mut h = tar::Header::new_ustar();
    h.set_path(name).unwrap();
    h.set_size(size);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    *h.as_bytes()
}

/// A tar of `n` empty files produced on the fly (512 bytes per entry): one
/// template header whose name digits and checksum are patched per entry.
struct ManyEntries {
    n: u64,
    next: u64,
    block: [u8; 512],
    /// Checksum of the template with all-'0' digits.
    base_sum: u32,
    pos: usize,
    trailer: usize,
}

const DIGITS: std::ops::Range<usize> = 6..15; // "data/f" + 9 digits

impl ManyEntries {
    fn new(n: u64) -> Self {
        let block = ustar_header("data/f000000000", 0);
        let base_sum = block[..148]
            .iter()
            .chain(&block[156..])
            .map(|&b| u32::from(b))
            .sum::<u32>()
            + 8 * 32;
        Self {
            n,
            next: 0,
            block,
            base_sum,
            pos: 512,
            trailer: 1024,
        }
    }

    fn patch(&mut self, i: u64) {
        let mut v = i;
        let mut extra = 0u32;
        for k in DIGITS.rev() {
            let d = (v % 10) as u8;
            v /= 10;
            self.block[k] = b'0' + d;
            extra += u32::from(d);
        }
        let sum = format!("{:06o}\0 ", self.base_sum + extra);
        self.block[148..156].copy_from_slice(sum.as_bytes());
    }
}

impl Read for ManyEntries {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == 512 {
            if self.next < self.n {
                self.patch(self.next);
                self.next += 1;
                self.pos = 0;
            } else if self.trailer > 0 {
                let k = out.len().min(self.trailer);
                out[..k].fill(0);
                self.trailer -= k;
                return Ok(k);
            } else {
                return Ok(0);
            }
        }
        let k = out.len().min(512 - self.pos);
        out[..k].copy_from_slice(&self.block[self.pos..self.pos + k]);
        self.pos += k;
        Ok(k)
    }
}

#[test]
fn million_entries_refused_without_holding_them() {
    let limits = LayerLimits::default();
    let mut stream = ManyEntries::new(1_000_000);
    let err = Layer::from_tar(&mut stream, &limits).unwrap_err();
    assert!(matches!(err, LayerError::TooManyEntries(n) if n == limits.max_entries));
    // It stopped at the limit: the rest of the stream was never read.
    assert_eq!(stream.next, limits.max_entries + 1);
    assert_eq!(err.to_string(), "layer has more than 500000 tar entries");
    // Just under the limit is fine, and keeps nothing of the irrelevant files.
    let small = LayerLimits {
        max_entries: 1000,
        ..LayerLimits::default()
    };
    let layer = Layer::from_tar(ManyEntries::new(1000), &small).unwrap();
    assert_eq!(layer.tar_entries(), 1000);
    assert_eq!(layer.retained_bytes(), 0);
}

/// `size` bytes of a retained path, streamed.
fn huge(name: &str, size: u64) -> impl Read {
    Cursor::new(ustar_header(name, size).to_vec())
        .chain(std::io::repeat(0x41).take(size))
        .chain(Cursor::new(vec![0u8; 1024]))
}

#[test]
fn file_over_the_per_file_limit_is_metadata_only() {
    let limits = LayerLimits {
        max_file_bytes: 1 << 20,
        ..LayerLimits::default()
    };
    let layer = Layer::from_tar(huge("usr/sbin/xtables-nft-multi", 100 << 20), &limits).unwrap();
    // Only the entries themselves (the file, /usr, /usr/sbin) are kept.
    assert!(layer.retained_bytes() < 1024, "{}", layer.retained_bytes());
    let root = image(
        vec![
            layer,
            from(&tar(&[E::Symlink(
                "usr/sbin/iptables",
                "xtables-nft-multi",
            )])),
        ],
        true,
    );
    assert!(matches!(
        root.read("/usr/sbin/iptables", u64::MAX),
        Err(FsError::TooLarge { limit, .. }) if limit == 1 << 20
    ));
    let f = collect(&root, &BTreeMap::new()).facts.unwrap();
    assert_eq!(f.version, None);
    assert!(
        f.evidence
            .iter()
            .any(|e| e.source == EvidenceSource::Binary && e.detail.contains("larger than"))
    );
}

#[test]
fn retained_total_is_bounded() {
    let limits = LayerLimits {
        max_file_bytes: 1 << 20,
        max_retained_bytes: 1 << 20,
        ..LayerLimits::default()
    };
    let two = tar(&[
        E::File("usr/sbin/xtables-nft-multi", &vec![1u8; 800 << 10]),
        E::File("usr/sbin/xtables-legacy-multi", &vec![1u8; 800 << 10]),
    ]);
    let err = Layer::from_tar(&two[..], &limits).unwrap_err();
    assert!(matches!(err, LayerError::Limit(_)), "{err}");
}

#[test]
fn truncated_tars_are_errors() {
    let full = debian_install("1.8.9", "1.8.9-2", "nft");
    // Cut inside a retained file's data, inside a header, and inside an
    // irrelevant file's data.
    for cut in [3000, 512 * 4 + 100, full.len() - 2000] {
        let err = Layer::from_tar(&full[..cut], &LayerLimits::default());
        assert!(
            matches!(err, Err(LayerError::Tar(_))),
            "cut at {cut}: {err:?}"
        );
    }
    let irrelevant = tar(&[E::File("opt/blob", &vec![7u8; 10_000])]);
    let err = Layer::from_tar(&irrelevant[..5000], &LayerLimits::default());
    assert!(matches!(err, Err(LayerError::Tar(_))), "{err:?}");
}

#[test]
fn garbage_is_an_error() {
    let err = Layer::from_tar(&[0xABu8; 4096][..], &LayerLimits::default()).unwrap_err();
    assert!(matches!(err, LayerError::Tar(_)), "{err}");
    // A GNU long name claiming 1 GiB (a gzip bomb's favourite): refused on
    // its header, nothing buffered.
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::GNULongName);
    h.set_size(1 << 30);
    h.set_cksum();
    let stream = Cursor::new(h.as_bytes().to_vec()).chain(std::io::repeat(b'a'));
    let err = Layer::from_tar(stream, &LayerLimits::default()).unwrap_err();
    assert!(matches!(err, LayerError::Tar(_)), "{err}");
    // A header that claims 8 GiB and then ends.
    let err = Layer::from_tar(&ustar_header("opt/x", 8 << 30)[..], &LayerLimits::default());
    assert!(matches!(err, Err(LayerError::Tar(_))), "{err:?}");
}

#[test]
fn symlink_loop_in_a_layer_is_reported_not_fatal() {
    let root = image(
        vec![from(&tar(&[
            E::Symlink("usr/sbin/iptables", "/sbin/iptables"),
            E::Symlink("sbin", "/usr/sbin"),
            E::Symlink("usr/sbin/iptables-nft", "iptables-nft"),
        ]))],
        true,
    );
    assert!(matches!(
        root.read("/usr/sbin/iptables", 10),
        Err(FsError::SymlinkLoop(_))
    ));
    assert!(matches!(
        root.read("/usr/sbin/iptables-nft", 10),
        Err(FsError::SymlinkLoop(_))
    ));
    let f = collect(&root, &BTreeMap::new()).facts.unwrap();
    assert_eq!(f.backend, None);
    assert!(
        f.evidence.iter().any(|e| e.detail.contains("symlink loop")),
        "{f:#?}"
    );
    // With the release's binaries next to the loop, the version still shows.
    let root = image(
        vec![from(&tar(&[
            E::Symlink("usr/sbin/iptables", "/etc/alternatives/iptables"),
            E::Symlink("etc/alternatives/iptables", "/usr/sbin/iptables"),
            E::File(
                "usr/sbin/xtables-nft-multi",
                &real_binary("1.8.9", "xtables-nft-multi"),
            ),
        ]))],
        true,
    );
    let f = collect(&root, &BTreeMap::new()).facts.unwrap();
    assert_eq!(f.backend, None);
    assert_eq!(f.version, Some(nfguard::facts::Version::new(1, 8, 9)));
}

#[test]
fn symlink_loops_on_a_host_root() {
    let t = tempfile::tempdir().unwrap();
    symlink("b", t.path().join("a")).unwrap();
    symlink("/a", t.path().join("b")).unwrap();
    let root = HostRoot::new(t.path());
    assert!(matches!(
        root.read("/a/x", 10),
        Err(FsError::SymlinkLoop(_))
    ));
    assert!(matches!(root.list("/b"), Err(FsError::SymlinkLoop(_))));
    // A chain of 40 links resolves; 41 does not.
    std::fs::write(t.path().join("end"), b"ok").unwrap();
    for i in 0..41 {
        let next = if i == 0 {
            "end".to_string()
        } else {
            format!("l{}", i - 1)
        };
        symlink(next, t.path().join(format!("l{i}"))).unwrap();
    }
    assert_eq!(
        root.read("/l39", 10).unwrap(),
        Lookup::Found(b"ok".to_vec().into())
    );
    assert!(matches!(
        root.read("/l40", 10),
        Err(FsError::SymlinkLoop(_))
    ));
}

#[test]
fn absolute_symlink_pointing_outside_stays_inside() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"host file").unwrap();
    let t = tempfile::tempdir().unwrap();
    let abs = outside.path().join("secret");
    std::fs::create_dir_all(t.path().join("usr/sbin")).unwrap();
    symlink(&abs, t.path().join("usr/sbin/iptables")).unwrap();
    symlink("../../../../../../..", t.path().join("usr/sbin/up")).unwrap();
    let root = HostRoot::new(t.path());
    assert_eq!(
        root.read("/usr/sbin/iptables", 100).unwrap(),
        Lookup::Absent
    );
    let rel = abs.to_string_lossy().into_owned();
    assert_eq!(
        root.read(&format!("/usr/sbin/up{rel}"), 100).unwrap(),
        Lookup::Absent
    );
    assert_eq!(
        root.resolve("/usr/sbin/up", true)
            .unwrap()
            .found()
            .unwrap()
            .path,
        "/"
    );
    // Planting the same path inside the root is what gets read.
    std::fs::create_dir_all(t.path().join(outside.path().strip_prefix("/").unwrap())).unwrap();
    std::fs::write(t.path().join(rel.trim_start_matches('/')), b"inside").unwrap();
    assert_eq!(
        root.read("/usr/sbin/iptables", 100).unwrap(),
        Lookup::Found(b"inside".to_vec().into())
    );
}

#[test]
fn host_read_limit_is_enforced() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("f"), vec![0u8; 1000]).unwrap();
    let root = HostRoot::new(t.path());
    assert!(matches!(
        root.read("/f", 999),
        Err(FsError::TooLarge { .. })
    ));
    assert_eq!(root.read("/f", 1000).unwrap().found().unwrap().len(), 1000);
    assert!(matches!(root.read("/", 10), Err(FsError::NotAFile(_))));
    // A FIFO where a binary should be: refused, never opened (it would block).
    let fifo = t.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    assert!(matches!(root.read("/fifo", 10), Err(FsError::NotAFile(_))));
}

#[test]
fn link_out_of_tracked_paths_is_reported() {
    // /usr/sbin/iptables -> /opt/bin/xtables-nft-multi: a layer keeps nothing
    // under /opt, so the backend comes from the link name alone.
    let root = image(
        vec![from(&tar(&[
            E::Symlink("usr/sbin/iptables", "/opt/bin/xtables-nft-multi"),
            E::File("opt/bin/xtables-nft-multi", b"whatever"),
        ]))],
        true,
    );
    let f = collect(&root, &BTreeMap::new()).facts.unwrap();
    assert_eq!(f.backend, Some(nfguard::facts::Backend::Nft));
    assert!(
        f.evidence
            .iter()
            .any(|e| e.detail.contains("cannot follow further"))
    );
}

#[test]
fn mutated_tars_never_panic() {
    // Deterministic fuzzing: flip bytes (mostly in headers) and cut the
    // stream of a small but complete Debian-like layer; every outcome must be
    // a value or an error, and probing what was read must not panic either.
    let status = b"Package: iptables\nStatus: install ok installed\nVersion: 1.8.9-2\n\n";
    let base = tar(&[
        E::Dir("./usr/"),
        E::Dir("./usr/sbin/"),
        E::File(
            "./usr/sbin/xtables-nft-multi",
            b"\x001.8.9\0%s v%s\0\x001.8.9 (nf_tables)\0",
        ),
        E::Symlink("./usr/sbin/iptables-nft", "xtables-nft-multi"),
        E::Symlink("./usr/sbin/iptables", "/etc/alternatives/iptables"),
        E::Symlink("./etc/alternatives/iptables", "/usr/sbin/iptables-nft"),
        E::Hard("./usr/sbin/iptables-legacy", "./usr/sbin/xtables-nft-multi"),
        E::File("./usr/sbin/.wh.xtables-legacy-multi", b""),
        E::File("./var/lib/dpkg/status", status),
        E::File("./lib/apk/db/installed", b"P:iptables\nV:1.8.9-r0\n"),
    ]);
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut ok, mut err) = (0, 0);
    for _ in 0..3000 {
        let mut t = base.clone();
        for _ in 0..(1 + rnd() % 4) {
            let block = (rnd() as usize % (t.len() / 512)) * 512;
            // Header fields live in the first 345 bytes of a block.
            let at = block + (rnd() as usize % 345);
            t[at] = rnd() as u8;
        }
        if rnd() % 4 == 0 {
            t.truncate(rnd() as usize % t.len());
        }
        match Layer::from_tar(&t[..], &LayerLimits::default()) {
            Ok(layer) => {
                ok += 1;
                let root = image(vec![layer], rnd() % 2 == 0);
                let _ = collect(&root, &BTreeMap::new());
            }
            Err(_) => err += 1,
        }
    }
    // Both paths were exercised.
    assert!(ok > 100 && err > 100, "ok {ok} err {err}");
}
