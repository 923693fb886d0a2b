//! A minimal, read-only nfnetlink client: one `AF_NETLINK/NETLINK_NETFILTER`
//! socket, GET requests and dumps, and a bounds-checked attribute walker.
//! Only what the nf_tables reader needs; no message here can change state
//! (every request is a NFT_MSG_GET* with NLM_F_REQUEST).

use super::KernelError;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NETLINK_NETFILTER: i32 = 12;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
pub const NLM_F_DUMP_INTR: u16 = 0x10;
const NLMSG_HDRLEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
pub const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// Largest dump datagram we accept; the kernel sends at most a few pages per datagram.
const RECV_BUF: usize = 256 * 1024;

/// One netlink message of a reply: its nf_tables message type, the nfgenmsg
/// family and the attribute payload.
pub struct Message<'a> {
    pub msg_type: u16,
    pub family: u8,
    pub attrs: &'a [u8],
}

pub struct Socket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

impl Socket {
    pub fn open() -> Result<Self, KernelError> {
        // SAFETY: plain socket(2) call; the result is checked before use.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_NETFILTER,
            )
        };
        if fd < 0 {
            return Err(KernelError::io(
                "opening a NETLINK_NETFILTER socket",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: fd is a fresh, valid descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // A receive timeout so a misbehaving kernel can never hang the probe.
        let tv = libc::timeval {
            tv_sec: 5,
            tv_usec: 0,
        };
        // SAFETY: valid fd, pointer to a live timeval of the right size.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
        }
        Ok(Self {
            fd,
            seq: 0x6e66_0000,
            buf: vec![0u8; RECV_BUF],
        })
    }

    fn send(&mut self, msg: u16, family: u8, dump: bool, attrs: &[u8]) -> Result<u32, KernelError> {
        self.seq = self.seq.wrapping_add(1);
        let mut req = vec![0u8; NLMSG_HDRLEN + NFGENMSG_LEN];
        req.extend_from_slice(attrs);
        let len = req.len() as u32;
        req[0..4].copy_from_slice(&len.to_ne_bytes());
        let ty = (NFNL_SUBSYS_NFTABLES << 8) | msg;
        req[4..6].copy_from_slice(&ty.to_ne_bytes());
        let flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { 0 };
        req[6..8].copy_from_slice(&flags.to_ne_bytes());
        req[8..12].copy_from_slice(&self.seq.to_ne_bytes());
        // pid 0: the kernel. nfgenmsg: family, version 0, res_id 0.
        req[16] = family;
        // SAFETY: sockaddr_nl zeroed is a valid "kernel" destination.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: valid fd, buffer and address of the stated sizes.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                req.as_ptr() as *const libc::c_void,
                req.len(),
                0,
                &addr as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(KernelError::io(
                "sending a netlink request",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(self.seq)
    }

    fn recv(&mut self) -> Result<usize, KernelError> {
        loop {
            // SAFETY: valid fd and buffer of buf.len() bytes.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr() as *mut libc::c_void,
                    self.buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(KernelError::io("receiving a netlink reply", e));
            }
            let n = n as usize;
            if n > self.buf.len() {
                return Err(KernelError::Protocol(format!(
                    "netlink datagram of {n} bytes exceeds the {RECV_BUF} byte buffer"
                )));
            }
            return Ok(n);
        }
    }

    /// Send one request (a dump when `dump`) and feed every reply message to
    /// `on_msg` until the dump ends. Returns Ok(false) when the kernel flagged
    /// the dump as interrupted (NLM_F_DUMP_INTR): the caller restarts it.
    pub fn request(
        &mut self,
        msg: u16,
        family: u8,
        dump: bool,
        on_msg: impl FnMut(&Message<'_>) -> Result<(), KernelError>,
    ) -> Result<bool, KernelError> {
        self.request_with(msg, family, dump, &[], on_msg)
    }

    /// `request` with request attributes (e.g. a dump filter), already encoded.
    pub fn request_with(
        &mut self,
        msg: u16,
        family: u8,
        dump: bool,
        attrs: &[u8],
        mut on_msg: impl FnMut(&Message<'_>) -> Result<(), KernelError>,
    ) -> Result<bool, KernelError> {
        let seq = self.send(msg, family, dump, attrs)?;
        let mut intact = true;
        loop {
            let n = self.recv()?;
            let mut off = 0usize;
            let mut done = !dump;
            while off + NLMSG_HDRLEN <= n {
                let b = &self.buf[off..n];
                let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
                let ty = u16::from_ne_bytes([b[4], b[5]]);
                let flags = u16::from_ne_bytes([b[6], b[7]]);
                let mseq = u32::from_ne_bytes([b[8], b[9], b[10], b[11]]);
                if len < NLMSG_HDRLEN || len > b.len() {
                    return Err(KernelError::Protocol(format!(
                        "bad netlink message length {len}"
                    )));
                }
                let body = &b[NLMSG_HDRLEN..len];
                off += align4(len);
                if mseq != seq {
                    continue; // a stale reply from an earlier request
                }
                if flags & NLM_F_DUMP_INTR != 0 {
                    intact = false;
                }
                match ty {
                    NLMSG_DONE => {
                        done = true;
                        break;
                    }
                    NLMSG_ERROR => {
                        let code = body
                            .get(0..4)
                            .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
                            .unwrap_or(-libc::EPROTO);
                        if code == 0 {
                            done = true; // an ACK
                            break;
                        }
                        return Err(KernelError::Netlink(std::io::Error::from_raw_os_error(
                            -code,
                        )));
                    }
                    _ => {
                        if body.len() < NFGENMSG_LEN {
                            return Err(KernelError::Protocol("short nfgenmsg".into()));
                        }
                        on_msg(&Message {
                            msg_type: ty & 0xff,
                            family: body[0],
                            attrs: &body[NFGENMSG_LEN..],
                        })?;
                    }
                }
            }
            if done {
                return Ok(intact);
            }
        }
    }
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Encode one string attribute (NUL-terminated, padded).
pub fn put_str(out: &mut Vec<u8>, ty: u16, s: &str) {
    let len = 4 + s.len() + 1;
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// A bounds-checked walk over netlink attributes (`nla_len`, `nla_type`, payload, pad).
pub struct Attrs<'a> {
    rest: &'a [u8],
}

pub fn attrs(b: &[u8]) -> Attrs<'_> {
    Attrs { rest: b }
}

impl<'a> Iterator for Attrs<'a> {
    /// (type without the NESTED/BYTEORDER flags, payload)
    type Item = (u16, &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([self.rest[0], self.rest[1]]) as usize;
        let ty = u16::from_ne_bytes([self.rest[2], self.rest[3]]) & 0x3fff;
        if len < 4 || len > self.rest.len() {
            self.rest = &[];
            return None; // malformed: stop rather than read out of bounds
        }
        let payload = &self.rest[4..len];
        let adv = align4(len).min(self.rest.len());
        self.rest = &self.rest[adv..];
        Some((ty, payload))
    }
}

/// A NUL-terminated netlink string attribute.
pub fn attr_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// A big-endian u32 attribute (nf_tables sends its integers in network order).
pub fn attr_be32(b: &[u8]) -> Option<u32> {
    b.get(0..4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_walk_stops_on_malformed_input() {
        // One good attribute (type 1, "ab\0"), then a length that overruns.
        let mut b = vec![7, 0, 1, 0, b'a', b'b', 0, 0];
        b.extend_from_slice(&[200, 0, 2, 0, 1, 2]);
        let got: Vec<_> = attrs(&b).collect();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 1);
        assert_eq!(attr_str(got[0].1), "ab");
        assert_eq!(attrs(&[1, 0]).count(), 0);
        assert_eq!(attrs(&[2, 0, 0, 0]).count(), 0, "len < 4 is malformed");
    }

    #[test]
    fn be32_needs_four_bytes() {
        assert_eq!(attr_be32(&[0, 0, 0, 3]), Some(3));
        assert_eq!(attr_be32(&[0, 0, 3]), None);
    }
}
