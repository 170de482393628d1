//! Whether a packet arrived where it was addressed, whatever happens to
//! its reply: a raw socket of its protocol, in the namespace it is
//! addressed to, sees each such packet the host takes in past its input
//! hook. It decides "arrives" for a witness whose reply is stopped (the
//! packet passes, no exchange completes).

use super::netns_topology::Netns;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Whether a `tcp` (else UDP) packet to `to` arrived in `at` while `send`
/// ran (it enters the sender's namespace itself), within `wait` after.
pub fn arrived(at: &Netns, tcp: bool, to: SocketAddr, wait: Duration, send: impl FnOnce() + Send) -> bool {
    let (ready, listening) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let seen = scope.spawn(move || {
            at.enter();
            let socket = raw_socket(tcp, to);
            ready.send(()).unwrap();
            seen_within(&socket, to, Instant::now() + wait * 2)
        });
        listening.recv().unwrap();
        scope.spawn(send).join().unwrap();
        seen.join().unwrap()
    })
}

fn raw_socket(tcp: bool, to: SocketAddr) -> OwnedFd {
    let domain = if to.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    let protocol = if tcp { libc::IPPROTO_TCP } else { libc::IPPROTO_UDP };
    // SAFETY: a plain socket call; the descriptor is owned from here on.
    let fd = unsafe { libc::socket(domain, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) };
    assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
    // SAFETY: fd was just opened and is owned by nothing else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Reads `socket` until `deadline` for a packet to `to`: IPv4 raw sockets
/// read the IP header (its destination checked), IPv6 ones the transport
/// header alone (the port checked).
fn seen_within(socket: &OwnedFd, to: SocketAddr, deadline: Instant) -> bool {
    use std::os::fd::AsRawFd;
    let mut buffer = [0u8; 2048];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut polled = libc::pollfd {
            fd: socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, a buffer of its stated length.
        let read = unsafe {
            if libc::poll(&mut polled, 1, left.as_millis() as libc::c_int) != 1 {
                continue;
            }
            libc::recv(socket.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len(), 0)
        };
        let Ok(read) = usize::try_from(read) else { continue };
        let packet = &buffer[..read];
        let (transport, addressed) = match to {
            SocketAddr::V4(v4) => {
                let header = usize::from(packet.first().copied().unwrap_or(0) & 0xf) * 4;
                let destination = packet.get(16..20).is_some_and(|d| d == v4.ip().octets());
                (packet.get(header..).unwrap_or_default(), destination)
            }
            SocketAddr::V6(_) => (packet, true),
        };
        if addressed && transport.get(2..4) == Some(&to.port().to_be_bytes()[..]) {
            return true;
        }
    }
}
