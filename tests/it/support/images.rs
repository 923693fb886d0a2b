//! Test support: build real OCI images (layer tars from a list of entries,
//! config, manifest, index) and push them over HTTP to a registry on
//! loopback. Big layers are generated and pushed streaming (never held in
//! memory). Also lays out real Debian iptables releases from the fixtures.
//!
//! ```ignore
//! use crate::support::images;
//! use images::*;
//! let work = tempfile::tempdir().unwrap();
//! let base = build_layer(work.path(), &debian_iptables("1.8.9", Alt::Nft), Compression::Gzip);
//! let img = push_image(&reg.host(), "app", "v1", &[base], &ImageConfig::default());
//! // img.reference == "127.0.0.1:PORT/app:v1", img.digest == "sha256:..."
//! ```
// The benches include this file too (benches/image_inspect.rs,
// benches/webhook_admission.rs) and use a part of it.
#![allow(dead_code)]

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One thing in a layer. Paths are absolute in the image ("/usr/sbin/iptables").
#[derive(Debug, Clone)]
pub enum Entry {
    File {
        path: String,
        data: Vec<u8>,
        mode: u32,
    },
    /// A regular file of `size` incompressible bytes, generated while writing.
    Random {
        path: String,
        size: u64,
        seed: u64,
    },
    /// A regular file of `size` zero bytes (compresses to nearly nothing).
    Zeros {
        path: String,
        size: u64,
    },
    Symlink {
        path: String,
        target: String,
    },
    Dir {
        path: String,
    },
    /// OCI whiteout: hides `path` of lower layers (written as `.wh.NAME`).
    Whiteout {
        path: String,
    },
    /// OCI opaque marker: hides every lower child of directory `dir`.
    Opaque {
        dir: String,
    },
    /// Copy a host directory tree (files, symlinks, dirs) under `prefix`.
    Tree {
        src: PathBuf,
        prefix: String,
    },
}

pub fn file(path: &str, data: impl Into<Vec<u8>>) -> Entry {
    Entry::File {
        path: path.into(),
        data: data.into(),
        mode: 0o644,
    }
}
pub fn exe(path: &str, data: impl Into<Vec<u8>>) -> Entry {
    Entry::File {
        path: path.into(),
        data: data.into(),
        mode: 0o755,
    }
}
pub fn symlink(path: &str, target: &str) -> Entry {
    Entry::Symlink {
        path: path.into(),
        target: target.into(),
    }
}
pub fn dir(path: &str) -> Entry {
    Entry::Dir { path: path.into() }
}
pub fn whiteout(path: &str) -> Entry {
    Entry::Whiteout { path: path.into() }
}
pub fn opaque(dir: &str) -> Entry {
    Entry::Opaque { dir: dir.into() }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn media_type(self) -> &'static str {
        match self {
            Compression::None => "application/vnd.oci.image.layer.v1.tar",
            Compression::Gzip => "application/vnd.oci.image.layer.v1.tar+gzip",
            Compression::Zstd => "application/vnd.oci.image.layer.v1.tar+zstd",
        }
    }
}

/// A blob on disk, ready to push.
#[derive(Debug, Clone)]
pub struct Blob {
    pub path: PathBuf,
    pub digest: String,
    pub size: u64,
    pub media_type: String,
    /// sha256 of the uncompressed tar (the config's diff_id).
    pub diff_id: String,
}

struct HashWriter<W> {
    inner: W,
    hasher: Sha256,
    n: u64,
}

impl<W: Write> Write for HashWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W> HashWriter<W> {
    fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            n: 0,
        }
    }
    fn digest(&self) -> String {
        format!("sha256:{}", hex::encode(self.hasher.clone().finalize()))
    }
}

enum Encoder<W: Write> {
    None(W),
    Gzip(flate2::write::GzEncoder<W>),
    Zstd(zstd::stream::write::Encoder<'static, W>),
}

impl<W: Write> Write for Encoder<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Encoder::None(w) => w.write(buf),
            Encoder::Gzip(w) => w.write(buf),
            Encoder::Zstd(w) => w.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Encoder::None(w) => w.flush(),
            Encoder::Gzip(w) => w.flush(),
            Encoder::Zstd(w) => w.flush(),
        }
    }
}

impl<W: Write> Encoder<W> {
    fn finish(self) -> io::Result<W> {
        match self {
            Encoder::None(w) => Ok(w),
            Encoder::Gzip(w) => w.finish(),
            Encoder::Zstd(w) => w.finish(),
        }
    }
}

/// Incompressible bytes from a seed (xorshift), produced on the fly.
pub struct RandomReader {
    state: u64,
}

impl RandomReader {
    pub fn new(seed: u64) -> Self {
        Self { state: seed | 1 }
    }
}

impl Read for RandomReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        for chunk in buf.chunks_mut(8) {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            let b = self.state.to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
        Ok(buf.len())
    }
}

fn rel(path: &str) -> String {
    path.trim_start_matches('/').to_string()
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(1_700_000_000);
    h.set_uid(0);
    h.set_gid(0);
    h
}

fn append_entry<W: Write>(b: &mut tar::Builder<W>, e: &Entry) -> io::Result<()> {
    match e {
        Entry::File { path, data, mode } => {
            let mut h = header(tar::EntryType::Regular, *mode, data.len() as u64);
            b.append_data(&mut h, rel(path), &data[..])
        }
        Entry::Random { path, size, seed } => {
            let mut h = header(tar::EntryType::Regular, 0o644, *size);
            b.append_data(&mut h, rel(path), RandomReader::new(*seed).take(*size))
        }
        Entry::Zeros { path, size } => {
            let mut h = header(tar::EntryType::Regular, 0o644, *size);
            b.append_data(&mut h, rel(path), io::repeat(0).take(*size))
        }
        Entry::Symlink { path, target } => {
            let mut h = header(tar::EntryType::Symlink, 0o777, 0);
            b.append_link(&mut h, rel(path), target)
        }
        Entry::Dir { path } => {
            let mut h = header(tar::EntryType::Directory, 0o755, 0);
            b.append_data(&mut h, format!("{}/", rel(path)), io::empty())
        }
        Entry::Whiteout { path } => {
            let p = Path::new(path);
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let parent = p.parent().map(|d| d.to_string_lossy().into_owned());
            let wh = match parent.as_deref() {
                Some("/") | Some("") | None => format!(".wh.{name}"),
                Some(d) => format!("{}/.wh.{name}", rel(d)),
            };
            let mut h = header(tar::EntryType::Regular, 0o644, 0);
            b.append_data(&mut h, wh, io::empty())
        }
        Entry::Opaque { dir } => {
            let mut h = header(tar::EntryType::Regular, 0o644, 0);
            b.append_data(&mut h, format!("{}/.wh..wh..opq", rel(dir)), io::empty())
        }
        Entry::Tree { src, prefix } => append_tree(b, src, &rel(prefix)),
    }
}

fn append_tree<W: Write>(b: &mut tar::Builder<W>, src: &Path, prefix: &str) -> io::Result<()> {
    let mut names: Vec<_> = std::fs::read_dir(src)?
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .map(|e| e.path())
        .collect();
    names.sort();
    for path in names {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let inside = if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}/{name}")
        };
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path)?;
            append_entry(
                b,
                &symlink(&format!("/{inside}"), &target.to_string_lossy()),
            )?;
        } else if meta.is_dir() {
            append_entry(b, &dir(&format!("/{inside}")))?;
            append_tree(b, &path, &inside)?;
        } else if meta.is_file() {
            use std::os::unix::fs::PermissionsExt;
            let mut h = header(
                tar::EntryType::Regular,
                meta.permissions().mode() & 0o7777,
                meta.len(),
            );
            b.append_data(&mut h, inside, File::open(&path)?)?;
        }
    }
    Ok(())
}

/// Write a layer blob into `work` and return its descriptor data.
pub fn build_layer(work: &Path, entries: &[Entry], compression: Compression) -> Blob {
    build_layer_as(work, entries, compression, compression.media_type())
}

/// Like `build_layer` but announcing `media_type` (e.g. to lie about compression).
pub fn build_layer_as(
    work: &Path,
    entries: &[Entry],
    compression: Compression,
    media_type: &str,
) -> Blob {
    let tmp = tempfile::NamedTempFile::new_in(work).expect("temp layer file");
    let (file, tmp_path) = tmp.keep().expect("keep temp layer");
    let outer = HashWriter::new(BufWriter::with_capacity(1 << 20, file));
    let enc = match compression {
        Compression::None => Encoder::None(outer),
        Compression::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
            outer,
            flate2::Compression::fast(),
        )),
        Compression::Zstd => {
            Encoder::Zstd(zstd::stream::write::Encoder::new(outer, 1).expect("zstd"))
        }
    };
    let mut builder = tar::Builder::new(HashWriter::new(enc));
    builder.follow_symlinks(false);
    for e in entries {
        append_entry(&mut builder, e).expect("append tar entry");
    }
    let inner = builder.into_inner().expect("finish tar");
    let diff_id = inner.digest();
    let mut outer = inner.inner.finish().expect("finish compression");
    outer.flush().expect("flush layer");
    let digest = outer.digest();
    let size = outer.n;
    let path = work.join(digest.replace(':', "_"));
    std::fs::rename(&tmp_path, &path).expect("rename layer");
    Blob {
        path,
        digest,
        size,
        media_type: media_type.into(),
        diff_id,
    }
}

/// An arbitrary file pushed as a layer as is (hostile blobs).
pub fn raw_layer(path: &Path, media_type: &str) -> Blob {
    let mut hw = HashWriter::new(io::sink());
    io::copy(&mut File::open(path).expect("open raw layer"), &mut hw).expect("hash raw layer");
    let digest = hw.digest();
    Blob {
        path: path.to_path_buf(),
        digest: digest.clone(),
        size: hw.n,
        media_type: media_type.into(),
        diff_id: digest,
    }
}

#[derive(Debug, Clone)]
pub struct ImageConfig {
    pub os: String,
    pub architecture: String,
    pub labels: BTreeMap<String, String>,
}

impl Default for ImageConfig {
    fn default() -> Self {
        Self {
            os: "linux".into(),
            architecture: "amd64".into(),
            labels: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Pushed {
    /// `HOST:PORT/repo:tag`
    pub reference: String,
    /// Manifest digest.
    pub digest: String,
    pub manifest_size: u64,
    pub config_digest: String,
    pub layers: Vec<Blob>,
    pub platform: (String, String),
}

impl Pushed {
    /// Config + layer bytes.
    pub fn total_bytes(&self) -> u64 {
        self.layers.iter().map(|l| l.size).sum()
    }
}

fn block_on<F>(f: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(f)
        })
        .join()
        .expect("push thread")
    })
}

fn absolute(host: &str, location: &str) -> String {
    if location.starts_with("http") {
        location.to_string()
    } else {
        format!("http://{host}{location}")
    }
}

async fn push_blob_async(
    http: &reqwest::Client,
    host: &str,
    repo: &str,
    digest: &str,
    mut source: impl Read,
) {
    let head = http
        .head(format!("http://{host}/v2/{repo}/blobs/{digest}"))
        .send()
        .await
        .expect("HEAD blob");
    if head.status().is_success() {
        return;
    }
    let start = http
        .post(format!("http://{host}/v2/{repo}/blobs/uploads/"))
        .send()
        .await
        .expect("start upload");
    assert_eq!(start.status().as_u16(), 202, "start upload");
    let mut location = absolute(host, start.headers()["location"].to_str().unwrap());
    // Chunked PATCHes keep memory bounded for 250 MB layers.
    let mut offset: u64 = 0;
    let mut buf = vec![0u8; 16 << 20];
    loop {
        let mut filled = 0;
        while filled < buf.len() {
            let n = source.read(&mut buf[filled..]).expect("read blob");
            if n == 0 {
                break;
            }
            filled += n;
        }
        if filled == 0 {
            break;
        }
        let resp = http
            .patch(&location)
            .header("Content-Type", "application/octet-stream")
            .header(
                "Content-Range",
                format!("{}-{}", offset, offset + filled as u64 - 1),
            )
            .body(buf[..filled].to_vec())
            .send()
            .await
            .expect("PATCH blob");
        assert_eq!(resp.status().as_u16(), 202, "PATCH blob chunk");
        location = absolute(host, resp.headers()["location"].to_str().unwrap());
        offset += filled as u64;
    }
    let sep = if location.contains('?') { '&' } else { '?' };
    let put = http
        .put(format!("{location}{sep}digest={digest}"))
        .header("Content-Length", "0")
        .send()
        .await
        .expect("PUT blob");
    assert_eq!(put.status().as_u16(), 201, "finish upload of {digest}");
}

async fn put_manifest_async(
    http: &reqwest::Client,
    host: &str,
    repo: &str,
    tag: &str,
    media_type: &str,
    body: Vec<u8>,
) {
    let resp = http
        .put(format!("http://{host}/v2/{repo}/manifests/{tag}"))
        .header("Content-Type", media_type)
        .body(body)
        .send()
        .await
        .expect("PUT manifest");
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    assert_eq!(status.as_u16(), 201, "PUT manifest {repo}:{tag}: {text}");
}

/// Upload a blob (streamed from `path`).
pub fn push_blob(host: &str, repo: &str, blob: &Blob) {
    block_on(async {
        let http = reqwest::Client::new();
        let f = File::open(&blob.path).expect("open blob");
        push_blob_async(&http, host, repo, &blob.digest, f).await;
    })
}

/// Upload raw manifest bytes under `tag` (a tag or a digest).
pub fn push_manifest(host: &str, repo: &str, tag: &str, media_type: &str, body: &[u8]) {
    let body = body.to_vec();
    block_on(async {
        let http = reqwest::Client::new();
        put_manifest_async(&http, host, repo, tag, media_type, body).await;
    })
}

pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// The config and manifest JSON for `layers` (bottom layer first).
pub fn manifest_json(layers: &[Blob], config: &ImageConfig) -> (Vec<u8>, Vec<u8>) {
    let config_json = serde_json::to_vec(&serde_json::json!({
        "architecture": config.architecture,
        "os": config.os,
        "config": { "Labels": config.labels },
        "rootfs": { "type": "layers", "diff_ids": layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>() },
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": sha256(&config_json),
            "size": config_json.len(),
        },
        "layers": layers.iter().map(|l| serde_json::json!({
            "mediaType": l.media_type, "digest": l.digest, "size": l.size,
        })).collect::<Vec<_>>(),
    }))
    .unwrap();
    (config_json, manifest)
}

/// Push the layers (bottom first), config and manifest as `repo:tag`.
pub fn push_image(
    host: &str,
    repo: &str,
    tag: &str,
    layers: &[Blob],
    config: &ImageConfig,
) -> Pushed {
    let (config_json, manifest) = manifest_json(layers, config);
    let config_digest = sha256(&config_json);
    block_on(async {
        let http = reqwest::Client::new();
        for l in layers {
            let f = File::open(&l.path).expect("open layer");
            push_blob_async(&http, host, repo, &l.digest, f).await;
        }
        push_blob_async(&http, host, repo, &config_digest, &config_json[..]).await;
        put_manifest_async(
            &http,
            host,
            repo,
            tag,
            "application/vnd.oci.image.manifest.v1+json",
            manifest.clone(),
        )
        .await;
    });
    Pushed {
        reference: format!("{host}/{repo}:{tag}"),
        digest: sha256(&manifest),
        manifest_size: manifest.len() as u64,
        config_digest,
        layers: layers.to_vec(),
        platform: (config.os.clone(), config.architecture.clone()),
    }
}

/// A one-layer linux/amd64 image pushed as `repo:v1`.
pub fn push_layer(host: &str, repo: &str, layer: Blob) -> Pushed {
    push_image(host, repo, "v1", &[layer], &ImageConfig::default())
}

/// `nfguard inspect image` of `reference` in the plain-HTTP registry `reg`,
/// with JSON output: the arguments every inspecting test and bench starts with.
pub fn inspect_image_args<'a>(reference: &'a str, reg: &'a str) -> [&'a str; 7] {
    [
        "inspect",
        "image",
        reference,
        "--insecure-registry",
        reg,
        "-o",
        "json",
    ]
}

/// Push an OCI index over already pushed images (same repo) as `repo:tag`;
/// returns the index digest.
pub fn push_index(host: &str, repo: &str, tag: &str, images: &[&Pushed]) -> String {
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": images.iter().map(|i| serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": i.digest, "size": i.manifest_size,
            "platform": { "os": i.platform.0, "architecture": i.platform.1 },
        })).collect::<Vec<_>>(),
    }))
    .unwrap();
    push_manifest(
        host,
        repo,
        tag,
        "application/vnd.oci.image.index.v1+json",
        &index,
    );
    sha256(&index)
}

// ---- Real Debian iptables releases from the fixtures ----

/// `$NFGUARD_FIXTURES` or `<crate>/target/fixtures`.
pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("NFGUARD_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/fixtures"))
}

pub fn iptables_release(version: &str) -> PathBuf {
    let d = fixtures_dir().join("iptables").join(version);
    assert!(
        d.join("root").is_dir() && d.join("debs").is_dir(),
        "missing fixture {} (run scripts/fetch-iptables.sh)",
        d.display()
    );
    d
}

/// The `.deb` of `package` in release `version`.
pub fn deb(version: &str, package: &str) -> PathBuf {
    let debs = iptables_release(version).join("debs");
    std::fs::read_dir(&debs)
        .expect("read debs")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{package}_")))
        })
        .unwrap_or_else(|| panic!("no {package} deb in {}", debs.display()))
}

/// A dpkg status stanza for an installed `.deb`, from its real control fields.
// Its twin `netns::installed_stanza` stays: benches include this file
// without `netns`, and `reporter_bench` includes `netns` without this one.
pub fn dpkg_stanza(deb: &Path) -> String {
    let out = Command::new("dpkg-deb")
        .arg("-f")
        .arg(deb)
        .output()
        .expect("run dpkg-deb");
    assert!(out.status.success(), "dpkg-deb -f {}", deb.display());
    let control = String::from_utf8(out.stdout).expect("control is UTF-8");
    let mut stanza = String::new();
    for line in control.lines() {
        stanza.push_str(line);
        stanza.push('\n');
        if line.starts_with("Package:") {
            stanza.push_str("Status: install ok installed\n");
        }
    }
    stanza
}

/// Every package of the release, as dpkg status stanzas (`(package, stanza)`).
pub fn release_stanzas(version: &str) -> Vec<(String, String)> {
    stanzas_of(&iptables_release(version).join("debs"))
}

/// The default `iptables` the alternatives point at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alt {
    Nft,
    Legacy,
    /// The iptables-wrapper script (kubernetes-sigs/iptables-wrappers style).
    Wrapper,
    /// No alternatives links at all.
    None,
}

/// A small iptables-wrapper like kubernetes-sigs/iptables-wrappers installs.
pub const IPTABLES_WRAPPER: &str = r#"#!/bin/sh
# Detect whether the base system is using iptables-legacy or iptables-nft
# from kubelet's marker chains, then point the alternatives there.
set -e
nft_kubelet_rules=$( (iptables-nft-save -t mangle || true; ip6tables-nft-save -t mangle || true) 2>/dev/null | grep -E '^:(KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY)' | wc -l)
if [ "${nft_kubelet_rules}" -ne 0 ]; then
    mode=nft
else
    legacy_kubelet_rules=$( (iptables-legacy-save || true; ip6tables-legacy-save || true) 2>/dev/null | grep -E '^:(KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY)' | wc -l)
    if [ "${legacy_kubelet_rules}" -ne 0 ]; then mode=legacy; else mode=nft; fi
fi
update-alternatives --set iptables "/usr/sbin/iptables-${mode}" > /dev/null
update-alternatives --set ip6tables "/usr/sbin/ip6tables-${mode}" > /dev/null
exec "$0" "$@"
"#;

/// The alternatives links for `alt` (`/usr/sbin/iptables -> /etc/alternatives/iptables -> ...`).
pub fn alternatives(alt: Alt) -> Vec<Entry> {
    let target = match alt {
        Alt::Nft => "/usr/sbin/iptables-nft",
        Alt::Legacy => "/usr/sbin/iptables-legacy",
        Alt::Wrapper => "/usr/sbin/iptables-wrapper",
        Alt::None => return vec![],
    };
    let mut v = vec![dir("/etc"), dir("/etc/alternatives")];
    for tool in ["iptables", "iptables-save", "iptables-restore"] {
        let t = if alt == Alt::Wrapper {
            target.to_string()
        } else {
            format!("{target}{}", &tool["iptables".len()..])
        };
        v.push(symlink(&format!("/etc/alternatives/{tool}"), &t));
        v.push(symlink(
            &format!("/usr/sbin/{tool}"),
            &format!("/etc/alternatives/{tool}"),
        ));
    }
    if alt == Alt::Wrapper {
        v.push(exe("/usr/sbin/iptables-wrapper", IPTABLES_WRAPPER));
    }
    v
}

/// The dpkg status file listing every package of the release (plus a base package).
pub fn dpkg_status(version: &str) -> String {
    let mut s = String::from(
        "Package: base-files\nStatus: install ok installed\nVersion: 12.4\nArchitecture: amd64\nDescription: Debian base system miscellaneous files\n\n",
    );
    for (_, stanza) in release_stanzas(version) {
        s.push_str(&stanza);
        s.push('\n');
    }
    s
}

/// A Debian-like root with the real iptables `version` installed: the
/// extracted package tree, /var/lib/dpkg/status and the alternatives for `alt`.
pub fn debian_iptables(version: &str, alt: Alt) -> Vec<Entry> {
    let mut v = vec![
        symlink("/sbin", "usr/sbin"),
        symlink("/lib", "usr/lib"),
        Entry::Tree {
            src: iptables_release(version).join("root"),
            prefix: "/".into(),
        },
        dir("/var"),
        dir("/var/lib"),
        dir("/var/lib/dpkg"),
        file("/var/lib/dpkg/status", dpkg_status(version)),
    ];
    v.extend(alternatives(alt));
    v
}

/// Distroless layout: one stanza per package in /var/lib/dpkg/status.d/.
pub fn distroless_iptables(version: &str, alt: Alt) -> Vec<Entry> {
    let mut v = vec![
        Entry::Tree {
            src: iptables_release(version).join("root"),
            prefix: "/".into(),
        },
        dir("/var"),
        dir("/var/lib"),
        dir("/var/lib/dpkg"),
        dir("/var/lib/dpkg/status.d"),
    ];
    for (name, stanza) in release_stanzas(version) {
        v.push(file(&format!("/var/lib/dpkg/status.d/{name}"), stanza));
    }
    v.extend(alternatives(alt));
    v
}

/// Only the xtables binaries and their links, no package database at all.
pub fn bare_iptables(version: &str, alt: Alt) -> Vec<Entry> {
    let root = iptables_release(version).join("root");
    let mut v = vec![dir("/usr"), dir("/usr/sbin")];
    for name in ["xtables-nft-multi", "xtables-legacy-multi"] {
        let data = std::fs::read(root.join("usr/sbin").join(name)).expect("read xtables binary");
        v.push(exe(&format!("/usr/sbin/{name}"), data));
    }
    for (link, to) in [
        ("iptables-nft", "xtables-nft-multi"),
        ("iptables-nft-save", "xtables-nft-multi"),
        ("iptables-nft-restore", "xtables-nft-multi"),
        ("iptables-legacy", "xtables-legacy-multi"),
        ("iptables-legacy-save", "xtables-legacy-multi"),
        ("iptables-legacy-restore", "xtables-legacy-multi"),
    ] {
        v.push(symlink(&format!("/usr/sbin/{link}"), to));
    }
    v.extend(alternatives(alt));
    v
}

// ---- Real Debian nftables releases from the fixtures ----

/// `<fixtures>/nftables/<version>` of scripts/fetch-nftables.sh.
pub fn nftables_release(version: &str) -> PathBuf {
    let d = fixtures_dir().join("nftables").join(version);
    assert!(
        d.join("root").is_dir() && d.join("debs").is_dir(),
        "missing fixture {} (run scripts/fetch-nftables.sh)",
        d.display()
    );
    d
}

/// Every package of a fixture directory's debs, as dpkg status stanzas
/// (`(package, stanza)`), sorted by file name.
fn stanzas_of(debs: &Path) -> Vec<(String, String)> {
    let mut paths: Vec<_> = std::fs::read_dir(debs)
        .expect("read debs")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.split('_').next())
                .unwrap_or_default()
                .to_string();
            (name, dpkg_stanza(p))
        })
        .collect()
}

/// The nftables release's packages (nftables, libnftables1, libnftnl11 and,
/// for trixie and later, libc6) as dpkg status stanzas.
pub fn nftables_stanzas(version: &str) -> Vec<(String, String)> {
    stanzas_of(&nftables_release(version).join("debs"))
}

/// The Debian package version of the release's `libnftables1` ("1.1.3-1").
pub fn nftables_package_version(version: &str) -> String {
    nftables_stanzas(version)
        .iter()
        .find(|(name, _)| name == "libnftables1")
        .and_then(|(_, s)| s.lines().find_map(|l| l.strip_prefix("Version: ")))
        .expect("libnftables1 stanza with a Version")
        .to_string()
}

/// The extracted nftables release: nft, libnftables and its links, no
/// package database.
pub fn bare_nftables(version: &str) -> Vec<Entry> {
    vec![Entry::Tree {
        src: nftables_release(version).join("root"),
        prefix: "/".into(),
    }]
}

/// A Debian-like root with nftables `version` installed: the tree and a
/// dpkg status listing its packages.
pub fn debian_nftables(version: &str) -> Vec<Entry> {
    let mut status =
        String::from("Package: base-files\nStatus: install ok installed\nVersion: 12.4\n\n");
    for (_, stanza) in nftables_stanzas(version) {
        status.push_str(&stanza);
        status.push('\n');
    }
    let mut v = bare_nftables(version);
    v.extend([
        dir("/var"),
        dir("/var/lib"),
        dir("/var/lib/dpkg"),
        file("/var/lib/dpkg/status", status),
    ]);
    v
}

/// Distroless layout: the tree and one stanza per package in status.d.
pub fn distroless_nftables(version: &str) -> Vec<Entry> {
    let mut v = bare_nftables(version);
    v.extend([
        dir("/var"),
        dir("/var/lib"),
        dir("/var/lib/dpkg"),
        dir("/var/lib/dpkg/status.d"),
    ]);
    for (name, stanza) in nftables_stanzas(version) {
        let stanza = stanza.replace("Status: install ok installed\n", "");
        v.push(file(&format!("/var/lib/dpkg/status.d/{name}"), stanza));
    }
    v
}

/// A Debian-like root with both iptables `ipt` (alternatives at `alt`) and
/// nftables `nft` installed, one dpkg status listing every package.
pub fn debian_iptables_and_nftables(ipt: &str, alt: Alt, nft: &str) -> Vec<Entry> {
    let mut status = dpkg_status(ipt);
    for (_, stanza) in nftables_stanzas(nft) {
        status.push_str(&stanza);
        status.push('\n');
    }
    let mut v = vec![Entry::Tree {
        src: iptables_release(ipt).join("root"),
        prefix: "/".into(),
    }];
    v.extend(bare_nftables(nft));
    v.extend([
        dir("/var"),
        dir("/var/lib"),
        dir("/var/lib/dpkg"),
        file("/var/lib/dpkg/status", status),
    ]);
    v.extend(alternatives(alt));
    v
}

/// What `nfguard inspect image` printed, run through the CLI binary with no
/// docker config: its exit code, its JSON (null when none) and stderr.
pub struct InspectRun {
    pub code: i32,
    pub json: serde_json::Value,
    pub stderr: String,
}

/// `nfguard inspect image REFERENCE` against the test registry `reg`, with
/// `extra` arguments; a panic in the binary fails the test.
pub fn inspect_cli(reg: &str, reference: &str, extra: &[&str]) -> InspectRun {
    let out = assert_cmd::Command::cargo_bin("nfguard")
        .unwrap()
        .args(inspect_image_args(reference, reg))
        .args(extra)
        .env_remove("DOCKER_CONFIG")
        .env("HOME", "/nonexistent")
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    InspectRun {
        code: out.status.code().unwrap_or(-1),
        json: serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null),
        stderr,
    }
}
