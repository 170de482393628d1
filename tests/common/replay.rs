//! Witnesses replayed by real packets: a state written into a router
//! between a client and a server (tests/common/netns_topology.rs) with the
//! addresses and ports of tests/common/witness.rs added, each witness's
//! packet sent from the client before (it must be stopped) and after
//! `stale --remove --allow-opening` (it must pass), and every topology
//! flow sent before and after a removal (what opens). It decides what a
//! replayed witness's outcome is.

use super::differential::{stale_by, write_state};
use super::netns_topology::{Flow, Netns, Topology};
use super::rule_grammar::State;
use super::witness::{Replay, Send, EXTRA_PORT, EXTRA_ROUTER, EXTRA_SERVER, EXTRA_SOURCE};
use super::Node;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

static NODES: AtomicUsize = AtomicUsize::new(0);

/// A router holding `state`, its topology, the addresses no rule names and
/// listeners on [`EXTRA_PORT`] and on `ports` (TCP, port) beside the
/// topology's own.
pub struct Lab {
    pub node: Node,
    pub topology: Topology,
    stop: Arc<AtomicBool>,
    listeners: Option<std::thread::JoinHandle<()>>,
}

impl Lab {
    pub fn new(state: &State, ports: &[(bool, u16)]) -> Lab {
        let node = Node::new(&format!("diff-{}", NODES.fetch_add(1, Ordering::Relaxed)));
        let topology = Topology::around_this_thread();
        let [s4, s6] = EXTRA_SOURCE;
        let [r4, r6] = EXTRA_ROUTER;
        let [v4, v6] = EXTRA_SERVER;
        topology
            .client
            .sh(&format!("ip addr add {s4}/32 dev lo\nip -6 addr add {s6}/128 dev lo"));
        topology
            .server
            .sh(&format!("ip addr add {v4}/32 dev lo\nip -6 addr add {v6}/128 dev lo"));
        topology.router.sh(&format!(
            "ip addr add {r4}/32 dev lo
ip -6 addr add {r6}/128 dev lo
ip route add {s4}/32 via 10.1.0.5
ip -6 route add {s6}/128 via fd00:1::5
ip route add {v4}/32 via 10.2.0.2
ip -6 route add {v6}/128 via fd00:2::2"
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let listeners = {
            let (stop, server, router) = (stop.clone(), topology.server.handle(), topology.router.handle());
            let mut ports = ports.to_vec();
            ports.extend([(true, EXTRA_PORT), (false, EXTRA_PORT)]);
            ports.sort();
            ports.dedup();
            let (ready, started) = std::sync::mpsc::channel();
            let handle = std::thread::spawn(move || {
                let server_addresses = ["10.2.0.2", v4, "fd00:2::2", v6];
                let router_addresses = ["10.1.0.1", "10.2.0.1", r4, "fd00:1::1", "fd00:2::1", r6];
                let namespaces = [(server, &server_addresses[..]), (router, &router_addresses[..])];
                serve(&namespaces, &ports, &stop, ready)
            });
            started.recv().unwrap();
            handle
        };
        write_state(&node, state);
        Lab {
            node,
            topology,
            stop,
            listeners: Some(listeners),
        }
    }

    /// Empties every `recent` list of the router: each witness starts as
    /// the model's packets do, with only what its own first packet writes.
    pub fn clear_lists(&self) {
        self.node
            .sh("for f in /proc/net/xt_recent/*; do [ -e \"$f\" ] && echo / > \"$f\"; done; true");
    }

    /// Sends `send` from the client; true if answered within `wait`.
    pub fn answered(&self, send: Send, wait: Duration) -> bool {
        let client = &self.topology.client;
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    client.enter();
                    exchange(send, wait).is_ok()
                })
                .join()
                .unwrap()
        })
    }

    /// Sends `send` from the client; true if it arrived where addressed
    /// (the server, else the router) within `wait`, whatever met its reply.
    pub fn arrived(&self, send: Send, wait: Duration) -> bool {
        let servers = ["10.2.0.2", EXTRA_SERVER[0], "fd00:2::2", EXTRA_SERVER[1]];
        let to_server = servers.iter().any(|a| a.parse() == Ok(send.to.ip()));
        let at = if to_server {
            &self.topology.server
        } else {
            &self.topology.router
        };
        let client = &self.topology.client;
        super::arrival::arrived(at, send.tcp, send.to, wait, move || {
            client.enter();
            let _ = exchange(send, wait);
        })
    }

    /// `replay` sent twice (after its first packet, if any): whether each
    /// of the two was answered (or, its reply stopped, arrived).
    pub fn sent_twice(&self, replay: &Replay, wait: Duration) -> [bool; 2] {
        if replay.primer.is_some() || self.node.sh("ls /proc/net/xt_recent 2>/dev/null || true").trim() != "" {
            self.clear_lists();
        }
        let mut answered = [false; 2];
        for slot in answered.iter_mut() {
            if let Some(primer) = replay.primer {
                self.answered(primer, wait);
            }
            *slot = match replay.reply_stopped {
                true => self.arrived(replay.send, wait),
                false => self.answered(replay.send, wait),
            };
        }
        answered
    }

    /// Every flow of the topology, sent at once.
    pub fn probe_all(&self, wait: Duration) -> Vec<bool> {
        self.topology.probe(&Topology::flows(), wait)
    }

    /// `stale --remove [--allow-opening]` by the wrapper under test.
    pub fn remove(&self, allow_opening: bool) -> std::process::Output {
        let args: &[&str] = if allow_opening {
            &["--remove", "--allow-opening"]
        } else {
            &["--remove"]
        };
        let out = stale_by(&self.node, super::WRAPPER, args);
        self.clear_lists();
        self.node.sh("conntrack -F 2>/dev/null || true");
        out
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(listeners) = self.listeners.take() {
            listeners.join().unwrap();
        }
    }
}

/// The flows of `flows` whose `before` is false and `after` true.
pub fn opened(before: &[bool], after: &[bool]) -> Vec<Flow> {
    Topology::flows()
        .into_iter()
        .zip(before.iter().zip(after))
        .filter(|(_, (b, a))| !**b && **a)
        .map(|(f, _)| f)
        .collect()
}

/// A TCP connection from `send.source` with one byte echoed, or a UDP
/// datagram echoed.
fn exchange(send: Send, wait: Duration) -> std::io::Result<()> {
    let mut reply = [0u8; 1];
    let from = SocketAddr::new(send.source, 0);
    if !send.tcp {
        let socket = UdpSocket::bind(from)?;
        socket.connect(send.to)?;
        socket.set_read_timeout(Some(wait))?;
        socket.send(b"p")?;
        socket.recv(&mut reply)?;
        return Ok(());
    }
    let mut stream = connect_from(from, send.to, wait)?;
    stream.set_read_timeout(Some(wait))?;
    stream.write_all(b"p")?;
    stream.read_exact(&mut reply)?;
    Ok(())
}

/// A socket address as the kernel takes it.
fn raw(address: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data, large enough for either
    // family's address, written through its own type.
    unsafe {
        let mut storage: libc::sockaddr_storage = std::mem::zeroed();
        match address {
            SocketAddr::V4(v4) => {
                let sin = &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in);
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_port = v4.port().to_be();
                sin.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
                (storage, std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
            }
            SocketAddr::V6(v6) => {
                let sin6 = &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in6);
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_port = v6.port().to_be();
                sin6.sin6_addr.s6_addr = v6.ip().octets();
                (storage, std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t)
            }
        }
    }
}

/// A TCP connection from `from` to `to`, given up after `wait`.
fn connect_from(from: SocketAddr, to: SocketAddr, wait: Duration) -> std::io::Result<std::net::TcpStream> {
    let domain = if to.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: plain socket calls on a descriptor this function owns; it is
    // handed to TcpStream (which closes it) before any early return.
    unsafe {
        let fd = libc::socket(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = std::net::TcpStream::from_raw_fd(fd);
        let (local, local_len) = raw(from);
        if libc::bind(fd, &local as *const _ as *const libc::sockaddr, local_len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let (remote, remote_len) = raw(to);
        if libc::connect(fd, &remote as *const _ as *const libc::sockaddr, remote_len) != 0 {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EINPROGRESS) {
                return Err(error);
            }
        }
        let mut polled = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        if libc::poll(&mut polled, 1, wait.as_millis() as libc::c_int) != 1 {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        if let Some(error) = stream.take_error()? {
            return Err(error);
        }
        stream.set_nonblocking(false)?;
        Ok(stream)
    }
}

/// Listens in each namespace on `ports` (TCP or UDP) where the topology
/// does not (TCP dual-stack, UDP on each of the namespace's addresses, so
/// each answer comes from the address asked), and echoes one byte per
/// connection or datagram until `stop`.
fn serve(
    namespaces: &[(Netns, &[&str])],
    ports: &[(bool, u16)],
    stop: &AtomicBool,
    ready: std::sync::mpsc::Sender<()>,
) {
    let (mut tcp, mut udp) = (Vec::new(), Vec::new());
    for (netns, addresses) in namespaces {
        netns.enter();
        for (is_tcp, port) in ports {
            if *is_tcp {
                if let Ok(listener) = TcpListener::bind(("::", *port)) {
                    listener.set_nonblocking(true).unwrap();
                    tcp.push(listener);
                }
                continue;
            }
            for address in addresses.iter() {
                let address: std::net::IpAddr = address.parse().unwrap();
                if let Ok(socket) = UdpSocket::bind((address, *port)) {
                    socket.set_nonblocking(true).unwrap();
                    udp.push(socket);
                }
            }
        }
    }
    ready.send(()).unwrap();
    super::netns_topology::echo_until(&tcp, &udp, stop);
}
