//! Three network namespaces joined by veths (a client, a forwarding
//! router, a server), listeners on TCP and UDP ports of the server and the
//! router in both families, and probe flows from the client: which flows a
//! firewall in the router lets through. Namespaces are held by open files
//! (no name under /run/netns) and end when those are closed.

use super::OutputWithin as _;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn command(self) -> &'static str {
        match self {
            Family::V4 => "iptables",
            Family::V6 => "ip6tables",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::V4 => "ipv4",
            Family::V6 => "ipv6",
        }
    }
}

/// One host's address in each family.
pub struct Host {
    pub v4: &'static str,
    pub v6: &'static str,
}

impl Host {
    pub fn of(&self, family: Family) -> &'static str {
        match family {
            Family::V4 => self.v4,
            Family::V6 => self.v6,
        }
    }
}

pub const CLIENT: Host = Host {
    v4: "10.1.0.5",
    v6: "fd00:1::5",
};
/// The router's address on the client's side (its INPUT flows go there).
pub const ROUTER: Host = Host {
    v4: "10.1.0.1",
    v6: "fd00:1::1",
};
pub const SERVER: Host = Host {
    v4: "10.2.0.2",
    v6: "fd00:2::2",
};

pub const SERVER_TCP: [u16; 5] = [22, 80, 443, 8080, 9999];
pub const SERVER_UDP: [u16; 4] = [53, 123, 8080, 9999];
pub const ROUTER_TCP: [u16; 2] = [22, 8080];
pub const ROUTER_UDP: [u16; 1] = [53];

/// A network namespace, alive while this is.
pub struct Netns(File);

impl Netns {
    /// A new, empty namespace (made by a thread that ends at once).
    pub fn new() -> Netns {
        std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET) needs root");
            Netns::current()
        })
        .join()
        .unwrap()
    }

    /// The calling thread's namespace.
    pub fn current() -> Netns {
        Netns(File::open("/proc/thread-self/ns/net").unwrap())
    }

    /// A path another process can open to reach it (`ip link ... netns PATH`).
    pub fn path(&self) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), self.0.as_raw_fd())
    }

    /// Another handle on it, for another thread.
    pub fn handle(&self) -> Netns {
        Netns(self.0.try_clone().unwrap())
    }

    /// Moves the calling thread into it.
    pub fn enter(&self) {
        nix::sched::setns(&self.0, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
    }

    /// Runs a shell script in it; panics if it fails.
    pub fn sh(&self, script: &str) {
        let fd: RawFd = self.0.as_raw_fd();
        let mut command = Command::new("sh");
        command.arg("-ec").arg(script);
        // SAFETY: setns is async-signal-safe; the descriptor stays open
        // until exec (close-on-exec).
        unsafe {
            command.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = command.output_within_limit().unwrap();
        assert!(
            out.status.success(),
            "script failed: {script}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The client and the server around a router: the calling thread's
/// namespace, in which the router's setup runs. The listeners serve until
/// this is dropped.
pub struct Topology {
    pub client: Netns,
    pub server: Netns,
    pub router: Netns,
    stop: Arc<AtomicBool>,
    listeners: Option<std::thread::JoinHandle<()>>,
}

const NO_DAD: &str =
    "echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad\necho 0 > /proc/sys/net/ipv6/conf/all/accept_dad\n";

impl Topology {
    /// Links the calling thread's namespace (the router) to a new client
    /// and a new server, forwarding on, listeners started.
    pub fn around_this_thread() -> Topology {
        let client = Netns::new();
        let server = Netns::new();
        let router = Netns::current();
        for netns in [&client, &server, &router] {
            netns.sh(NO_DAD);
        }
        router.sh(&format!(
            "ip link add rc type veth peer name cr netns {}
ip link add rs type veth peer name sr netns {}
ip link set lo up
ip link set rc up
ip link set rs up
ip addr add 10.1.0.1/24 dev rc
ip addr add 10.2.0.1/24 dev rs
ip -6 addr add fd00:1::1/64 dev rc nodad
ip -6 addr add fd00:2::1/64 dev rs nodad
echo 1 > /proc/sys/net/ipv4/ip_forward
echo 1 > /proc/sys/net/ipv6/conf/all/forwarding",
            client.path(),
            server.path()
        ));
        for (netns, link, prefix4, prefix6, host) in [
            (&client, "cr", "10.1.0", "fd00:1:", "5"),
            (&server, "sr", "10.2.0", "fd00:2:", "2"),
        ] {
            netns.sh(&format!(
                "ip link set lo up
ip link set {link} up
ip addr add {prefix4}.{host}/24 dev {link}
ip -6 addr add {prefix6}:{host}/64 dev {link} nodad
ip route add default via {prefix4}.1
ip -6 route add default via {prefix6}:1"
            ));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (ready, started) = std::sync::mpsc::channel();
        let listeners = {
            let stop = stop.clone();
            let server = Netns(server.0.try_clone().unwrap());
            let router = Netns(router.0.try_clone().unwrap());
            std::thread::spawn(move || serve(&server, &router, &stop, ready))
        };
        started.recv().expect("the listeners started");
        Topology {
            client,
            server,
            router,
            stop,
            listeners: Some(listeners),
        }
    }

    /// Every flow the probes send: each listened port of the server and the
    /// router, TCP and UDP, in both families.
    pub fn flows() -> Vec<Flow> {
        let mut flows = Vec::new();
        for family in [Family::V4, Family::V6] {
            for (host, tcp, udp) in [
                (&SERVER, &SERVER_TCP[..], &SERVER_UDP[..]),
                (&ROUTER, &ROUTER_TCP[..], &ROUTER_UDP[..]),
            ] {
                let address: IpAddr = host.of(family).parse().unwrap();
                flows.extend(tcp.iter().map(|&port| Flow {
                    tcp: true,
                    to: SocketAddr::new(address, port),
                }));
                flows.extend(udp.iter().map(|&port| Flow {
                    tcp: false,
                    to: SocketAddr::new(address, port),
                }));
            }
        }
        flows
    }

    /// Sends every flow at once from the client; true for each answered
    /// within `wait` (a TCP connect and a byte echoed, a UDP datagram
    /// echoed).
    pub fn probe(&self, flows: &[Flow], wait: Duration) -> Vec<bool> {
        self.probe_from(&self.client, flows, wait)
    }

    /// [`Topology::probe`], sent by `from` (the router: sent by the host
    /// holding the rules).
    pub fn probe_from(&self, from: &Netns, flows: &[Flow], wait: Duration) -> Vec<bool> {
        std::thread::scope(|scope| {
            let probes: Vec<_> = flows
                .iter()
                .map(|flow| {
                    scope.spawn(move || {
                        from.enter();
                        flow.answered(wait).is_ok()
                    })
                })
                .collect();
            probes.into_iter().map(|p| p.join().unwrap()).collect()
        })
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(listeners) = self.listeners.take() {
            listeners.join().unwrap();
        }
    }
}

/// One probe: a TCP connection or a UDP exchange with `to`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Flow {
    pub tcp: bool,
    pub to: SocketAddr,
}

impl std::fmt::Display for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{} client -> {}", if self.tcp { "tcp" } else { "udp" }, self.to)
    }
}

impl Flow {
    pub fn answered(&self, wait: Duration) -> std::io::Result<()> {
        let mut reply = [0u8; 1];
        if self.tcp {
            let mut stream = TcpStream::connect_timeout(&self.to, wait)?;
            stream.set_read_timeout(Some(wait))?;
            stream.write_all(b"p")?;
            stream.read_exact(&mut reply)?;
        } else {
            let any: SocketAddr = if self.to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().unwrap();
            let socket = UdpSocket::bind(any)?;
            socket.connect(self.to)?;
            socket.set_read_timeout(Some(wait))?;
            socket.send(b"p")?;
            socket.recv(&mut reply)?;
        }
        Ok(())
    }
}

/// Listens (dual-stack) on the server's and the router's ports and echoes
/// one byte per connection or datagram until `stop`.
fn serve(server: &Netns, router: &Netns, stop: &AtomicBool, ready: std::sync::mpsc::Sender<()>) {
    let mut tcp = Vec::new();
    let mut udp = Vec::new();
    for (netns, tcp_ports, udp_ports) in [
        (server, &SERVER_TCP[..], &SERVER_UDP[..]),
        (router, &ROUTER_TCP[..], &ROUTER_UDP[..]),
    ] {
        netns.enter();
        for port in tcp_ports {
            let listener = TcpListener::bind(("::", *port)).unwrap();
            listener.set_nonblocking(true).unwrap();
            tcp.push(listener);
        }
        for port in udp_ports {
            let socket = UdpSocket::bind(("::", *port)).unwrap();
            socket.set_nonblocking(true).unwrap();
            udp.push(socket);
        }
    }
    ready.send(()).unwrap();
    echo_until(&tcp, &udp, stop);
}

/// Echoes one byte per connection on `tcp` and per datagram on `udp`
/// (non-blocking sockets) until `stop`.
pub fn echo_until(tcp: &[TcpListener], udp: &[UdpSocket], stop: &AtomicBool) {
    let mut polled: Vec<libc::pollfd> = tcp
        .iter()
        .map(|l| l.as_raw_fd())
        .chain(udp.iter().map(|s| s.as_raw_fd()))
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: `polled` is a valid array of pollfd for its length.
        unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, 50) };
        for listener in tcp {
            while let Ok((mut stream, _)) = listener.accept() {
                std::thread::spawn(move || {
                    let mut byte = [0u8; 1];
                    let _ = stream.set_nonblocking(false);
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(3)));
                    if stream.read_exact(&mut byte).is_ok() {
                        let _ = stream.write_all(&byte);
                    }
                });
            }
        }
        for socket in udp {
            let mut byte = [0u8; 16];
            while let Ok((_, from)) = socket.recv_from(&mut byte) {
                let _ = socket.send_to(&byte[..1], from);
            }
        }
    }
}
