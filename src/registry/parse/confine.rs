//! The child's confinement, set before it reads a byte of its parent's
//! pipe: no file descriptor beyond stdin, stdout and stderr; hard memory
//! (data segment), CPU, file-size and core limits; `no_new_privs`; and a
//! seccomp filter that allows only what parsing needs (reading and writing
//! the pipes it has, memory, time, its own exit and abort). Everything else
//! fails with EPERM: opening any file (the ServiceAccount token), sockets,
//! starting programs, signalling or tracing other processes, reading their
//! memory, executable mappings. Unprivileged: no capability, no user
//! namespace, works under the container runtime's own filter.

#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("{what}: {source}")]
    Call {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("no seccomp filter for this architecture")]
    Architecture,
}

fn check(what: &'static str, ret: libc::c_int) -> Result<(), ConfineError> {
    if ret < 0 {
        return Err(ConfineError::Call {
            what,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

fn limit(
    what: &'static str,
    resource: libc::__rlimit_resource_t,
    soft: u64,
    hard: u64,
) -> Result<(), ConfineError> {
    let r = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: a plain system call on a stack value.
    check(what, unsafe { libc::setrlimit(resource, &r) })
}

/// Confine this process: `memory` bytes of data segment, `cpu_seconds` of CPU.
pub fn confine(memory: u64, cpu_seconds: u64) -> Result<(), ConfineError> {
    // SAFETY: closes descriptors this process never uses (it owns 0, 1, 2 only).
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    limit("limiting data memory", libc::RLIMIT_DATA, memory, memory)?;
    limit(
        "limiting CPU time",
        libc::RLIMIT_CPU,
        cpu_seconds,
        cpu_seconds + 1,
    )?;
    limit("limiting file size", libc::RLIMIT_FSIZE, 0, 0)?;
    limit("limiting core dumps", libc::RLIMIT_CORE, 0, 0)?;
    // SAFETY: prctl with integer arguments.
    check("setting no_new_privs", unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    })?;
    let program = filter(std::process::id())?;
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at `program`, alive for the call; the kernel copies it.
    check("installing the seccomp filter", unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const _,
        )
    })
}

#[cfg(target_arch = "x86_64")]
const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_EPERM: u32 = 0x0005_0000 | libc::EPERM as u32;
// Offsets into `struct seccomp_data` (little-endian: an argument's low word).
const NR: u32 = 0;
const ARCH_AT: u32 = 4;
const fn arg(i: u32) -> u32 {
    16 + 8 * i
}

fn op(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// System calls parsing needs, allowed whatever their arguments.
const ALLOWED: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_close,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_brk,
    libc::SYS_madvise,
    libc::SYS_futex,
    libc::SYS_sched_yield,
    libc::SYS_clock_gettime,
    libc::SYS_getrandom,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigprocmask,
    libc::SYS_sigaltstack,
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_restart_syscall,
    libc::SYS_exit,
    libc::SYS_exit_group,
];

/// The filter for a process with id `pid` (abort may signal only itself).
fn filter(pid: u32) -> Result<Vec<libc::sock_filter>, ConfineError> {
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        return Err(ConfineError::Architecture);
    }
    let mut p = vec![
        op(LD_W_ABS, ARCH_AT, 0, 0),
        op(JEQ_K, ARCH, 1, 0),
        op(RET_K, RET_KILL_PROCESS, 0, 0),
        op(LD_W_ABS, NR, 0, 0),
    ];
    if cfg!(target_arch = "x86_64") {
        // x32 system call numbers: another table, never ours.
        p.push(op(JGE_K, 0x4000_0000, 0, 1));
        p.push(op(RET_K, RET_KILL_PROCESS, 0, 0));
    }
    for nr in ALLOWED {
        p.push(op(JEQ_K, *nr as u32, 0, 1));
        p.push(op(RET_K, RET_ALLOW, 0, 0));
    }
    p.extend([
        // tgkill (abort's raise) only at this process.
        op(JEQ_K, libc::SYS_tgkill as u32, 0, 2),
        op(LD_W_ABS, arg(0), 0, 0),
        op(JEQ_K, pid, 4, 5),
        // mmap and mprotect never with PROT_EXEC.
        op(JEQ_K, libc::SYS_mmap as u32, 1, 0),
        op(JEQ_K, libc::SYS_mprotect as u32, 0, 3),
        op(LD_W_ABS, arg(2), 0, 0),
        op(JSET_K, libc::PROT_EXEC as u32, 1, 0),
        op(RET_K, RET_ALLOW, 0, 0),
        op(RET_K, RET_EPERM, 0, 0),
    ]);
    Ok(p)
}
