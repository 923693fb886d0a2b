//! nf_tables change notifications: a `NETLINK_NETFILTER` socket joined to
//! the multicast group `NFNLGRP_NFTABLES`. The kernel sends every committed
//! change (new/deleted table, chain, rule, set, generation) to this group;
//! the reporter only needs to know *that* something changed, so messages are
//! counted, not decoded. Listening cannot change any state.
//!
//! Lives here rather than in `kernel::netlink` (owned by the node helper),
//! which only does request/response.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use tokio::io::unix::AsyncFd;

const NETLINK_NETFILTER: i32 = 12;
/// `NFNLGRP_NFTABLES` from linux/netfilter/nfnetlink.h.
pub const NFNLGRP_NFTABLES: u32 = 7;
/// A burst of thousands of rule messages (iptables-restore) should fit
/// before the kernel reports an overflow; overflow is handled anyway.
const RCVBUF: libc::c_int = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: io::Error,
    },
}

fn io_err(what: &'static str) -> WatchError {
    WatchError::Io {
        what,
        source: io::Error::last_os_error(),
    }
}

/// What one read from the socket saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// At least one nf_tables change notification.
    Changed,
    /// The kernel dropped notifications (receive buffer overflow): some
    /// change happened that we did not see, so treat it as a change.
    Overflow,
}

pub struct NftWatcher {
    fd: AsyncFd<OwnedFd>,
    buf: Vec<u8>,
}

impl NftWatcher {
    /// Subscribe in the calling thread's network namespace. Needs a tokio
    /// runtime (the socket is non-blocking and driven by the reactor).
    pub fn subscribe() -> Result<Self, WatchError> {
        let fd = open_socket()?;
        // SAFETY: `fd` is an open descriptor owned by the OwnedFd that the
        // AsyncFd takes over; it stays open and unchanged until dropped.
        let fd = unsafe { AsyncFd::register(fd) }.map_err(|e| WatchError::Io {
            what: "registering the netlink socket with the runtime",
            source: io::Error::other(e.to_string()),
        })?;
        Ok(Self {
            fd,
            buf: vec![0u8; 64 * 1024],
        })
    }

    /// Wait for the next notification(s); drains everything queued so one
    /// call reports a whole batch.
    pub async fn next(&mut self) -> Result<Event, WatchError> {
        loop {
            let mut guard = self.fd.readable().await.map_err(|source| WatchError::Io {
                what: "waiting on the netlink socket",
                source,
            })?;
            let mut seen: Option<Event> = None;
            loop {
                let fd = guard.get_inner().as_raw_fd();
                // SAFETY: valid fd and a buffer of buf.len() bytes.
                let n = unsafe {
                    libc::recv(
                        fd,
                        self.buf.as_mut_ptr() as *mut libc::c_void,
                        self.buf.len(),
                        libc::MSG_DONTWAIT,
                    )
                };
                if n >= 0 {
                    seen.get_or_insert(Event::Changed);
                    continue;
                }
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::ENOBUFS) => {
                        seen = Some(Event::Overflow);
                        continue;
                    }
                    Some(libc::EAGAIN) => {
                        guard.clear_ready();
                        break;
                    }
                    _ => {
                        return Err(WatchError::Io {
                            what: "receiving nf_tables notifications",
                            source: e,
                        });
                    }
                }
            }
            if let Some(ev) = seen {
                return Ok(ev);
            }
        }
    }
}

fn open_socket() -> Result<OwnedFd, WatchError> {
    // SAFETY: plain socket(2); checked below.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            NETLINK_NETFILTER,
        )
    };
    if raw < 0 {
        return Err(io_err("opening a NETLINK_NETFILTER socket"));
    }
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: sockaddr_nl zeroed = let the kernel pick our port id.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    // SAFETY: valid fd and address of the stated size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &addr as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io_err("binding the netlink socket"));
    }
    let group = NFNLGRP_NFTABLES;
    // SAFETY: valid fd, pointer to a live u32 of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_NETLINK,
            libc::NETLINK_ADD_MEMBERSHIP,
            &group as *const u32 as *const libc::c_void,
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io_err(
            "joining NFNLGRP_NFTABLES (needs CAP_NET_ADMIN in the network namespace)",
        ));
    }
    // Best effort: a larger buffer means fewer overflows; overflow is handled.
    // SAFETY: valid fd, pointer to a live c_int.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &RCVBUF as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    Ok(fd)
}
