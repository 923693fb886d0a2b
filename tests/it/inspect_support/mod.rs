//! Layer tars built in memory for the inspect tests. Names are written raw
//! into the header so tests can use hostile names (`../x`, `/abs`).

use nfguard::rootfs::{Layer, LayerLimits, LayeredRoot};

pub enum E<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8]),
    Symlink(&'a str, &'a str),
    Hard(&'a str, &'a str),
}

fn raw_header(name: &str, kind: tar::EntryType, size: u64, link: Option<&str>) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(if kind.is_dir() { 0o755 } else { 0o644 });
    h.set_mtime(0);
    {
        let old = h.as_old_mut();
        assert!(name.len() <= 100, "test names fit the ustar name field");
        old.name = [0; 100];
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(l) = link {
            assert!(l.len() <= 100);
            old.linkname = [0; 100];
            old.linkname[..l.len()].copy_from_slice(l.as_bytes());
        }
    }
    h.set_cksum();
    h
}

pub fn tar(entries: &[E]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        match e {
            E::Dir(n) => {
                let h = raw_header(n, tar::EntryType::Directory, 0, None);
                b.append(&h, &[][..]).unwrap();
            }
            E::File(n, data) => {
                let h = raw_header(n, tar::EntryType::Regular, data.len() as u64, None);
                b.append(&h, *data).unwrap();
            }
            E::Symlink(n, t) => {
                let h = raw_header(n, tar::EntryType::Symlink, 0, Some(t));
                b.append(&h, &[][..]).unwrap();
            }
            E::Hard(n, t) => {
                let h = raw_header(n, tar::EntryType::Link, 0, Some(t));
                b.append(&h, &[][..]).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

/// Layers given bottom-up (as an image manifest lists them).
/// Layers are shared (`Arc`) as the registry's layer cache shares them.
pub fn image(bottom_up: Vec<impl Into<std::sync::Arc<Layer>>>, complete: bool) -> LayeredRoot {
    let layers = bottom_up.into_iter().rev().map(Into::into).collect();
    LayeredRoot { layers, complete }
}

/// `<fixtures>/iptables`, which must hold the releases.
pub fn fixtures() -> std::path::PathBuf {
    let dir = crate::support::netns::fixtures_dir();
    assert!(
        dir.join("iptables/1.8.7/root").is_dir(),
        "iptables fixtures missing under {}: run scripts/fetch-iptables.sh",
        dir.display()
    );
    dir.join("iptables")
}

/// The real release's xtables binaries.
pub fn real_binary(release: &str, name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(release).join("root/usr/sbin").join(name)).unwrap()
}

/// A Debian-like layer installing iptables `release` with the alternatives
/// pointing at `backend`, the real binaries and a dpkg status stanza.
pub fn debian_install(release: &str, pkg_version: &str, backend: &str) -> Vec<u8> {
    let (nft, legacy) = (
        real_binary(release, "xtables-nft-multi"),
        real_binary(release, "xtables-legacy-multi"),
    );
    let status =
        format!("Package: iptables\nStatus: install ok installed\nVersion: {pkg_version}\n\n");
    let alt = format!("/usr/sbin/iptables-{backend}");
    let mut entries = iptables_entries(&alt, &nft, &legacy);
    entries.push(E::File("./var/lib/dpkg/status", status.as_bytes()));
    tar(&entries)
}

/// The iptables part of `debian_install`: alternatives, binaries, their
/// links and the dpkg directory (the status file is the caller's).
fn iptables_entries<'a>(alt: &'a str, nft: &'a [u8], legacy: &'a [u8]) -> Vec<E<'a>> {
    vec![
        E::Dir("./"),
        E::Dir("./etc/"),
        E::Dir("./etc/alternatives/"),
        E::Symlink("./etc/alternatives/iptables", alt),
        E::Dir("./usr/"),
        E::Dir("./usr/sbin/"),
        E::File("./usr/sbin/xtables-nft-multi", nft),
        E::File("./usr/sbin/xtables-legacy-multi", legacy),
        E::Symlink("./usr/sbin/iptables-nft", "xtables-nft-multi"),
        E::Symlink("./usr/sbin/iptables-legacy", "xtables-legacy-multi"),
        E::Symlink("./usr/sbin/iptables", "/etc/alternatives/iptables"),
        E::Dir("./var/"),
        E::Dir("./var/lib/"),
        E::Dir("./var/lib/dpkg/"),
    ]
}

/// A usr-merged Debian base: /sbin, /bin, /lib are links into /usr.
pub fn usrmerge_base() -> Vec<u8> {
    tar(&[
        E::Dir("./"),
        E::Symlink("./sbin", "usr/sbin"),
        E::Symlink("./bin", "usr/bin"),
        E::Symlink("./lib", "usr/lib"),
        E::Dir("./usr/"),
        E::Dir("./usr/sbin/"),
        E::Dir("./usr/bin/"),
        E::Dir("./usr/lib/"),
        E::Dir("./etc/"),
        E::File("./etc/os-release", b"ID=debian\n"),
        E::Dir("./var/"),
        E::Dir("./var/lib/"),
        E::Dir("./var/lib/dpkg/"),
        E::File(
            "./var/lib/dpkg/status",
            b"Package: libc6\nStatus: install ok installed\nVersion: 2.36-9\n\n",
        ),
    ])
}

pub fn from(bytes: &[u8]) -> Layer {
    Layer::from_tar(bytes, &LayerLimits::default()).unwrap()
}

/// An rpmdb.sqlite as rpm writes it: table Packages(hnum, blob) of headers.
pub fn rpmdb(pkgs: &[(&str, &str, &str)]) -> Vec<u8> {
    use nfguard::rootfs::probes::rpm::{TAGS, build_header};
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.execute_batch(
        "CREATE TABLE Packages (hnum INTEGER PRIMARY KEY AUTOINCREMENT, blob BLOB NOT NULL)",
    )
    .unwrap();
    for (n, v, r) in pkgs {
        let blob = build_header(&[(TAGS.0, n), (TAGS.1, v), (TAGS.2, r)]);
        conn.execute("INSERT INTO Packages (blob) VALUES (?1)", [blob])
            .unwrap();
    }
    conn.execute("INSERT INTO Packages (blob) VALUES (?1)", [vec![1u8, 2, 3]])
        .unwrap();
    conn.serialize("main").unwrap().to_vec()
}

/// Debian trixie's real nftables as dpkg leaves it: libnftables, its soname
/// link, `nft`, and a whole dpkg status naming the packages. For layers that
/// must settle the nftables answer as well as the iptables one.
pub struct NftInstall {
    lib: Vec<u8>,
    nft: Vec<u8>,
    status: String,
}

/// Where the release's fixtures are (scripts/fetch-nftables.sh).
pub fn nft_fixture(release: &str, path: &str) -> Vec<u8> {
    let dir = crate::support::netns::fixtures_dir()
        .join("nftables")
        .join(release);
    let file = dir.join("root").join(path.trim_start_matches('/'));
    std::fs::read(&file).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (nftables fixtures: run scripts/fetch-nftables.sh)",
            file.display()
        )
    })
}

pub const NFT_STATUS_1_1_3: &str = "Package: libnftables1\nStatus: install ok installed\n\
Source: nftables\nVersion: 1.1.3-1\n\nPackage: nftables\nStatus: install ok installed\n\
Version: 1.1.3-1\n\n";

impl NftInstall {
    pub fn trixie() -> Self {
        Self {
            lib: nft_fixture("1.1.3", "/usr/lib/x86_64-linux-gnu/libnftables.so.1.1.0"),
            nft: nft_fixture("1.1.3", "/usr/sbin/nft"),
            status: NFT_STATUS_1_1_3.to_string(),
        }
    }

    /// The entries, with `status` as the dpkg status file.
    pub fn entries_with_status<'a>(&'a self, status: &'a str) -> Vec<E<'a>> {
        vec![
            E::Dir("./usr/lib/x86_64-linux-gnu/"),
            E::File("./usr/lib/x86_64-linux-gnu/libnftables.so.1.1.0", &self.lib),
            E::Symlink(
                "./usr/lib/x86_64-linux-gnu/libnftables.so.1",
                "libnftables.so.1.1.0",
            ),
            E::File("./usr/sbin/nft", &self.nft),
            E::File("./var/lib/dpkg/status", status.as_bytes()),
        ]
    }

    pub fn entries(&self) -> Vec<E<'_>> {
        self.entries_with_status(&self.status)
    }
}

/// `debian_install` with trixie's nftables installed in the same layer
/// (one dpkg status naming both).
pub fn debian_install_and_nft(release: &str, pkg_version: &str, backend: &str) -> Vec<u8> {
    let nft = NftInstall::trixie();
    let (xt_nft, legacy) = (
        real_binary(release, "xtables-nft-multi"),
        real_binary(release, "xtables-legacy-multi"),
    );
    let status = format!(
        "Package: iptables\nStatus: install ok installed\nVersion: {pkg_version}\n\n{NFT_STATUS_1_1_3}"
    );
    let alt = format!("/usr/sbin/iptables-{backend}");
    let mut entries = iptables_entries(&alt, &xt_nft, &legacy);
    entries.extend(nft.entries_with_status(&status));
    tar(&entries)
}
