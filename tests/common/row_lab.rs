//! A node for one row of the table of effects, shown by packets: the
//! calling thread's namespace is the node (its host link naming nft, so
//! legacy is the stale backend), a client one veth away sends it UDP
//! datagrams or connects over TCP, and a socket of the node's (marked, if
//! asked) says whether one arrived; then `stale --remove` judges what the
//! node holds.

use super::netns_topology::Netns;
use super::stale::{legacy_saves, stale, stderr, stdout, uncounted};
use super::Node;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// The node's addresses on the client's link, and the client's.
pub const NODE: &str = "10.7.0.1";
pub const NODE6: &str = "fd07::1";
const CLIENT: &str = "10.7.0.2";
const CLIENT6: &str = "fd07::2";

/// How long one datagram is waited for.
const WAIT: Duration = Duration::from_millis(400);
/// Datagrams sent before one is taken as stopped (the first on a fresh
/// link may wait for the neighbour's address).
const TRIES: usize = 3;

pub struct RowLab {
    pub node: Node,
    client: Netns,
}

impl RowLab {
    /// The node (host link: nft) and its client, linked; nothing loaded.
    pub fn new(name: &str) -> RowLab {
        let node = Node::new(name);
        node.set_host_link("iptables", "/usr/sbin/iptables-nft");
        node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
        let client = Netns::new();
        node.sh(&format!(
            "ip link set lo up
ip link add nc type veth peer name cn netns {}
ip addr add {NODE}/24 dev nc
ip -6 addr add {NODE6}/64 dev nc nodad
ip link set nc up",
            client.path()
        ));
        client.sh(&format!(
            "ip link set lo up; ip addr add {CLIENT}/24 dev cn; ip -6 addr add {CLIENT6}/64 dev cn nodad; ip link set cn up"
        ));
        RowLab { node, client }
    }

    /// A socket of the node's bound to `port` (with `SO_MARK` `mark`,
    /// where given), kept for the whole test: bound again and again, a
    /// port may still be held by a child another test forked meanwhile
    /// (its copy of the descriptor lives until it execs).
    pub fn socket(&self, port: u16, mark: Option<u32>) -> UdpSocket {
        self.socket_at(NODE, port, mark)
    }

    /// [`RowLab::socket`] at `address` (of [`NODE`], [`NODE6`]).
    pub fn socket_at(&self, address: &str, port: u16, mark: Option<u32>) -> UdpSocket {
        let socket = UdpSocket::bind((address, port)).unwrap();
        if let Some(mark) = mark {
            // SAFETY: setsockopt reads an initialised u32 of the size given.
            let set = unsafe {
                libc::setsockopt(
                    socket.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_MARK,
                    std::ptr::addr_of!(mark).cast(),
                    std::mem::size_of::<u32>() as libc::socklen_t,
                )
            };
            assert_eq!(set, 0, "SO_MARK: {}", std::io::Error::last_os_error());
        }
        socket.set_read_timeout(Some(WAIT)).unwrap();
        socket
    }

    /// Whether a UDP datagram of `size` bytes from the client reaches
    /// `socket` (of [`RowLab::socket`]), in any of a few tries: larger
    /// than the link's 1,500 bytes, it leaves the client in fragments.
    pub fn arrives(&self, socket: &UdpSocket, size: usize) -> bool {
        let to = socket.local_addr().unwrap();
        let mut buffer = vec![0u8; 65536];
        socket.set_nonblocking(true).unwrap();
        while socket.recv(&mut buffer).is_ok() {}
        socket.set_nonblocking(false).unwrap();
        (0..TRIES).any(|_| {
            let client = self.client.handle();
            std::thread::spawn(move || {
                client.enter();
                let sender = UdpSocket::bind(if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).unwrap();
                sender.send_to(&vec![b'x'; size], to).unwrap();
            })
            .join()
            .unwrap();
            matches!(socket.recv(&mut buffer), Ok(n) if n == size)
        })
    }

    /// Whether the client's TCP connection to the node's `port` (where
    /// `listener`, of the caller's, listens) completes, in any of a few
    /// tries; the handshake completes in the backlog.
    pub fn connects(&self, listener: &TcpListener) -> bool {
        let to = listener.local_addr().unwrap();
        (0..TRIES).any(|_| {
            let client = self.client.handle();
            std::thread::spawn(move || {
                client.enter();
                TcpStream::connect_timeout(&to, WAIT).is_ok()
            })
            .join()
            .unwrap()
        })
    }

    /// `stale --remove` leaves legacy as it was (exit 1), naming `held`
    /// with `verdict` ("may open the host", "is not proven safe") for
    /// legacy ipv4 `table`; the text it printed.
    pub fn removal_holds(&self, table: &str, verdict: &str, held: &str) -> String {
        self.removal_holds_in("ipv4", table, verdict, held)
    }

    /// [`RowLab::removal_holds`] for legacy `family` ("ipv4", "ipv6").
    pub fn removal_holds_in(&self, family: &str, table: &str, verdict: &str, held: &str) -> String {
        let before = uncounted(&legacy_saves(&self.node));
        let out = stale(&self.node, &["--remove"]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
        // A held table's line may name its witness or what the fates could
        // not model first ("removing it opens: ...; ", "cannot tell: ...; ").
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("left as it was: legacy {family} {table}: ")))
            .unwrap_or_else(|| panic!("legacy {family} {table} is not left: {text}"));
        assert!(line.contains(&format!("removing it {verdict}")), "{text}");
        assert!(text.contains(held), "{held} is named: {text}");
        assert_eq!(uncounted(&legacy_saves(&self.node)), before, "{text}");
        text
    }
}
