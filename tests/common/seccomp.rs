//! Seccomp filters for the tests: which system calls a test's child process
//! (and every process it runs) is refused. One call by its number and
//! register arguments ([`refuse_syscall`]), or sockets by what they are and
//! which program asks ([`refuse_sockets`]): there a supervisor thread in the
//! test process decides each `socket` call, since a filter alone cannot
//! see its arguments where glibc opens sockets through `socketcall(2)`
//! (s390x: Debian's glibc, built for kernels older than 4.3, which had no
//! `socket` call there, passes them in memory), nor tell two programs
//! apart that open the same socket (libiptc from iptables 1.8.10 on opens
//! the wrapper's own `SOCK_RAW | SOCK_CLOEXEC`).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Command;

/// The running architecture's `AUDIT_ARCH_*` (linux/audit.h): a seccomp
/// filter checks it before it trusts a system call number.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;
#[cfg(target_arch = "arm")]
const AUDIT_ARCH: u32 = 0x4000_0028;
#[cfg(all(target_arch = "powerpc64", target_endian = "little"))]
const AUDIT_ARCH: u32 = 0xc000_0015;
#[cfg(target_arch = "riscv64")]
const AUDIT_ARCH: u32 = 0xc000_00f3;
#[cfg(target_arch = "s390x")]
const AUDIT_ARCH: u32 = 0x8000_0016;

/// Offsets in `struct seccomp_data`.
const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;
/// Argument `index`'s low 32 bits: each argument is 64 bits in the
/// machine's byte order, so its low half comes second on a big-endian
/// machine.
fn argument(index: u32) -> u32 {
    16 + 8 * index + if cfg!(target_endian = "big") { 4 } else { 0 }
}

/// A filter returning `action` for a call of this architecture that
/// matches one of `alternatives` (each a list of `(offset, value)` words,
/// all equal), and allowing every other call.
fn filter(alternatives: &[Vec<(u32, u32)>], action: u32) -> Vec<libc::sock_filter> {
    let statement = |code: u32, k| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    // Each alternative: a load and a jump for the architecture and for
    // each of its words.
    let allow = 2 * alternatives.iter().map(|checks| checks.len() + 1).sum::<usize>();
    let mut program = Vec::new();
    for checks in alternatives {
        let next = program.len() + 2 * (checks.len() + 1);
        let words: Vec<_> = [(SECCOMP_DATA_ARCH, AUDIT_ARCH)]
            .into_iter()
            .chain(checks.iter().copied())
            .collect();
        for (i, &(offset, value)) in words.iter().enumerate() {
            program.push(statement(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, offset));
            let here = program.len();
            let mut jump = statement(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, value);
            // Equal: the next word, or the action after the last one.
            if i + 1 == words.len() {
                jump.jt = (allow + 1 - here - 1) as u8;
            }
            // Not equal: the next alternative, or allow after the last one.
            jump.jf = (next - here - 1) as u8;
            program.push(jump);
        }
    }
    program.push(statement(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW));
    program.push(statement(libc::BPF_RET | libc::BPF_K, action));
    program
}

/// Installs `program` in `command`'s child between fork and exec; with
/// `listener_to`, as a user-notification filter whose listener descriptor
/// the child sends there before it execs.
fn install(command: &mut Command, program: Vec<libc::sock_filter>, listener_to: Option<OwnedFd>) {
    // SAFETY: only system calls between fork and exec; the program outlives
    // them (moved into the closure).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command, move || {
            let fprog = libc::sock_fprog {
                len: program.len() as u16,
                filter: program.as_ptr() as *mut libc::sock_filter,
            };
            let flags = if listener_to.is_some() {
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
            } else {
                0
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let fd = libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, flags, &fprog);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(to) = &listener_to {
                let sent = send_fd(to.as_raw_fd(), fd as RawFd);
                libc::close(fd as RawFd);
                sent?;
            }
            Ok(())
        })
    };
}

/// Makes `command`'s child refuse one system call with EPERM, when each
/// `(argument index, value)` in `when` matches the low 32 bits of that
/// argument; every other call is allowed.
pub fn refuse_syscall<'a>(command: &'a mut Command, number: libc::c_long, when: &[(u32, u32)]) -> &'a mut Command {
    let mut checks = vec![(SECCOMP_DATA_NR, number as u32)];
    checks.extend(when.iter().map(|&(index, value)| (argument(index), value)));
    install(
        command,
        filter(&[checks], libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        None,
    );
    command
}

/// One `socket` call, as [`refuse_sockets`]'s supervisor sees it.
#[derive(Debug)]
pub struct SocketCall {
    /// The calling process's executable (`/proc/PID/exe`).
    pub program: PathBuf,
    pub domain: i32,
    /// The type, with its flags (`SOCK_CLOEXEC`).
    pub kind: i32,
    pub protocol: i32,
}

/// Makes `command`'s child, and every process it runs, refuse with EPERM
/// each socket `refuse` says so of; every other call goes on as if no
/// filter were there.
pub fn refuse_sockets(command: &mut Command, refuse: impl Fn(&SocketCall) -> bool + Send + 'static) -> &mut Command {
    let alternatives = [
        vec![(SECCOMP_DATA_NR, libc::SYS_socket as u32)],
        #[cfg(target_arch = "s390x")]
        vec![
            (SECCOMP_DATA_NR, libc::SYS_socketcall as u32),
            (argument(0), 1), // SYS_SOCKET of linux/net.h
        ],
    ];
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    install(
        command,
        filter(&alternatives, libc::SECCOMP_RET_USER_NOTIF),
        Some(theirs.into()),
    );
    std::thread::spawn(move || supervise(&ours, refuse));
    command
}

/// Refuses raw sockets (`SOCK_RAW`, `IPPROTO_RAW`) to every program but
/// the legacy backend (`xtables-legacy-multi`): the wrapper's legacy
/// getsockopt reads fail and it falls back to `iptables-legacy-save`,
/// which works.
pub fn refuse_wrapper_raw_sockets(command: &mut Command) -> &mut Command {
    refuse_sockets(command, |call| {
        call.kind & 0xf == libc::SOCK_RAW
            && call.protocol == libc::IPPROTO_RAW
            && call.program.file_name() != Some("xtables-legacy-multi".as_ref())
    })
}

/// Sends descriptor `fd` over the Unix socket `over` (no allocation: this
/// runs between fork and exec).
unsafe fn send_fd(over: RawFd, fd: RawFd) -> std::io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut space = [0u64; 4];
    let mut message: libc::msghdr = std::mem::zeroed();
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = space.as_mut_ptr().cast();
    message.msg_controllen = libc::CMSG_SPACE(size_of::<RawFd>() as u32) as _;
    let header = libc::CMSG_FIRSTHDR(&message);
    (*header).cmsg_level = libc::SOL_SOCKET;
    (*header).cmsg_type = libc::SCM_RIGHTS;
    (*header).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
    std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<RawFd>(), fd);
    if libc::sendmsg(over, &message, 0) < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The descriptor the child sends over `from`; None if it sends none.
fn receive_fd(from: &UnixStream) -> Option<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut space = [0u64; 4];
    // SAFETY: the message points at buffers that live through the call, and
    // the descriptor read is the one the kernel just installed.
    unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = space.as_mut_ptr().cast();
        message.msg_controllen = std::mem::size_of_val(&space) as _;
        if libc::recvmsg(from.as_raw_fd(), &mut message, libc::MSG_CMSG_CLOEXEC) <= 0 {
            return None;
        }
        let header = libc::CMSG_FIRSTHDR(&message);
        if header.is_null() || (*header).cmsg_type != libc::SCM_RIGHTS {
            return None;
        }
        Some(OwnedFd::from_raw_fd(std::ptr::read_unaligned(
            libc::CMSG_DATA(header).cast::<RawFd>(),
        )))
    }
}

/// Answers the filter's notifications until no process is left under it
/// (the listener hangs up).
fn supervise(from: &UnixStream, refuse: impl Fn(&SocketCall) -> bool) {
    let Some(listener) = receive_fd(from) else { return };
    let fd = listener.as_raw_fd();
    loop {
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: plain system calls on the listener, with structures of
        // the kernel's layout (the request zeroed, as the kernel requires).
        unsafe {
            if libc::poll(&mut poll, 1, -1) < 0 {
                continue;
            }
            if poll.revents & libc::POLLIN == 0 {
                return;
            }
            let mut request: libc::seccomp_notif = std::mem::zeroed();
            if libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut request) != 0 {
                continue; // the caller is gone
            }
            let refused = socket_call(&request)
                // Read while the caller still waits: not another process's memory.
                .filter(|_| libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &request.id) == 0)
                .is_some_and(|call| refuse(&call));
            let response = libc::seccomp_notif_resp {
                id: request.id,
                val: 0,
                error: if refused { -libc::EPERM } else { 0 },
                flags: if refused {
                    0
                } else {
                    libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32
                },
            };
            libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SEND, &response);
        }
    }
}

/// The call `request` stands for: `socket`'s arguments from its registers,
/// `socketcall`'s from the caller's memory.
fn socket_call(request: &libc::seccomp_notif) -> Option<SocketCall> {
    let pid = request.pid;
    let args = request.data.args;
    let [domain, kind, protocol] = if request.data.nr as libc::c_long == libc::SYS_socket {
        [args[0] as i32, args[1] as i32, args[2] as i32]
    } else {
        const WORD: usize = size_of::<libc::c_ulong>();
        let mut words = [0u8; 3 * WORD];
        std::fs::File::open(format!("/proc/{pid}/mem"))
            .and_then(|mem| mem.read_exact_at(&mut words, args[1]))
            .ok()?;
        let word = |i: usize| libc::c_ulong::from_ne_bytes(words[i * WORD..][..WORD].try_into().unwrap()) as i32;
        [word(0), word(1), word(2)]
    };
    Some(SocketCall {
        program: std::fs::read_link(format!("/proc/{pid}/exe")).ok()?,
        domain,
        kind,
        protocol,
    })
}
