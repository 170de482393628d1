//! `stale --remove` judges a family's stale backend as one whole, and lets
//! a rule go without a twin in the live backend only by a short allowlist.
//! Judged by packets: a client in a namespace of its own connects over a
//! veth to the node (or, forwarded, to a server behind it) before and
//! after the removal; a port blocked before must stay blocked. Each test
//! in a network namespace of its own, against the real iptables-legacy /
//! iptables-nft.

mod common;

use common::OutputWithin as _;

use common::stale::{legacy_saves, nft_ruleset, stale, stderr, stdout, uncounted};
use common::Node;
use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A network namespace held by a sleeping process.
struct Peer {
    child: Child,
}

impl Peer {
    fn new() -> Peer {
        let child = Command::new("unshare")
            .args(["-n", "sleep", "600"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        // The namespace is the process's once unshare has exec'd sleep.
        let own = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
        let path = format!("/proc/{}/ns/net", child.id());
        while std::fs::read_link(&path).map(|l| l == own).unwrap_or(true) {
            std::thread::yield_now();
        }
        Peer { child }
    }

    fn sh(&self, script: &str) {
        let out = Command::new("nsenter")
            .args(["-t", &self.child.id().to_string(), "-n", "sh", "-ec", script])
            .output_within_limit()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs `task` in a thread inside this namespace.
    fn within<T: Send + 'static>(&self, task: impl FnOnce() -> T + Send + 'static) -> T {
        let ns = File::open(format!("/proc/{}/ns/net", self.child.id())).unwrap();
        std::thread::spawn(move || {
            assert_eq!(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }, 0);
            task()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client at 10.0.0.2 and fd00::2 whose route is the node at 10.0.0.1
/// (fd00::1 beside it), and with
/// `forwarding` a server at 10.0.1.2 the node routes to (10.0.1.1); each
/// listening side listens on `ports`.
struct Lab {
    client: Peer,
    _server: Option<Peer>,
    _listeners: Vec<TcpListener>,
}

impl Lab {
    fn new(node: &Node, ports: &[u16], forwarding: bool) -> Lab {
        let client = Peer::new();
        node.sh(&format!(
            "ip link set lo up
ip link add vh type veth peer name vc
ip link set vc netns {}
ip addr add 10.0.0.1/24 dev vh
ip addr add fd00::1/64 dev vh nodad
ip link set vh up",
            client.child.id()
        ));
        client.sh(
            "ip link set lo up; ip addr add 10.0.0.2/24 dev vc; ip addr add fd00::2/64 dev vc nodad
ip link set vc up; ip route add default via 10.0.0.1",
        );
        let server = forwarding.then(|| {
            let server = Peer::new();
            node.sh(&format!(
                "ip link add vh2 type veth peer name vs
ip link set vs netns {}
ip addr add 10.0.1.1/24 dev vh2
ip link set vh2 up
echo 1 > /proc/sys/net/ipv4/ip_forward",
                server.child.id()
            ));
            server.sh("ip link set lo up; ip addr add 10.0.1.2/24 dev vs; ip link set vs up; ip route add default via 10.0.1.1");
            server
        });
        // Connections complete in the backlog: nothing needs to accept.
        let ports = ports.to_vec();
        let listen = move || {
            ports
                .iter()
                .map(|p| TcpListener::bind(("::", *p)).unwrap())
                .collect::<Vec<_>>()
        };
        let listeners = match &server {
            Some(server) => server.within(listen),
            None => listen(),
        };
        Lab {
            client,
            _server: server,
            _listeners: listeners,
        }
    }

    /// Whether the client's TCP connect to `to` completes within a few
    /// tries: for a port nothing blocks, while a new link settles (IPv6
    /// neighbour discovery on a fresh veth).
    fn reaches(&self, to: &str) -> bool {
        (0..5).any(|_| self.connects(to))
    }

    /// Whether the client's TCP connect to `to` completes.
    fn connects(&self, to: &str) -> bool {
        let to: SocketAddr = to.parse().unwrap();
        self.client
            .within(move || TcpStream::connect_timeout(&to, Duration::from_secs(2)).is_ok())
    }
}

/// A node whose host link says nft, with one unrelated rule in nft (so
/// that nft holding nothing does not refuse first), and `legacy` written
/// before `live` (each a shell script).
fn node_with(name: &str, legacy: &str, live: &str) -> Node {
    let node = Node::new(name);
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh(&format!(
        "{legacy}\niptables-nft -A OUTPUT -d 192.0.2.9 -j ACCEPT\n{live}"
    ));
    node
}

/// Asserts that `probe` is blocked and `open` passes, that `stale
/// --remove` leaves every legacy table as it was (exit 1, saying `why`),
/// and that `probe` is still blocked afterwards.
fn assert_stays_blocked(node: &Node, lab: &Lab, probe: &str, open: &str, why: &str) {
    let name = node.dir.display();
    assert!(lab.reaches(open), "{name}: {open} passes before");
    assert!(!lab.connects(probe), "{name}: {probe} is blocked before");
    let before = uncounted(&legacy_saves(node));
    let out = stale(node, &["--remove"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(text.contains(why), "{text}");
    assert!(!text.contains("emptied:"), "{text}");
    assert_eq!(uncounted(&legacy_saves(node)), before);
    assert!(!lab.connects(probe), "{probe} is still blocked after: {text}");
    assert!(lab.connects(open), "{open} still passes");
}

#[test]
fn a_held_filter_holds_the_tables_that_feed_it() {
    common::root_or_skip!();
    let cases = [
        (
            "judge-mark",
            "iptables-legacy -t mangle -A PREROUTING -p tcp --dport 8080 -j MARK --set-mark 1
iptables-legacy -A INPUT -m mark --mark 1 -j DROP",
        ),
        (
            "judge-notrack",
            "iptables-legacy -t raw -A PREROUTING -p tcp --dport 8080 -j CT --notrack
iptables-legacy -A INPUT -m conntrack --ctstate UNTRACKED -j DROP",
        ),
        (
            "judge-connmark",
            "iptables-legacy -t mangle -A PREROUTING -p tcp --dport 8080 -j CONNMARK --set-mark 1
iptables-legacy -A INPUT -m connmark --mark 1 -j DROP",
        ),
    ];
    for (name, legacy) in cases {
        let node = node_with(name, legacy, "");
        let lab = Lab::new(&node, &[8080, 8081], false);
        assert_stays_blocked(&node, &lab, "10.0.0.1:8080", "10.0.0.1:8081", "holds no twin of");
    }
    // A DNAT into a port the stale filter drops: nat stays with filter,
    // by its own witness (nft's rule keeps defragmentation on without the
    // DNAT).
    let node = node_with(
        "judge-dnat",
        "iptables-legacy -t nat -A PREROUTING -p tcp --dport 9999 -j DNAT --to-destination 10.0.0.1:8080
iptables-legacy -A INPUT -p tcp --dport 8080 -j DROP",
        "iptables-nft -A OUTPUT -m conntrack --ctstate INVALID -j DROP",
    );
    let lab = Lab::new(&node, &[8080, 8081, 9999], false);
    assert_stays_blocked(
        &node,
        &lab,
        "10.0.0.1:9999",
        "10.0.0.1:8081",
        "legacy ipv4 nat: removing it opens: tcp any → any:9999, arriving for the host by any interface, NEW (now: dropped legacy nat PREROUTING rule 1 DNAT --to-destination 10.0.0.1:8080 then legacy filter INPUT rule 1 DROP",
    );
}

#[test]
fn a_change_goes_only_where_the_live_backend_makes_it_too_whoever_reads_it() {
    common::root_or_skip!();
    let mark = "iptables-legacy -t mangle -A PREROUTING -p tcp --dport 8080 -j MARK --set-mark 1";
    let cases = [
        // A live reader of what the stale MARK sets, through the connmark.
        (
            "judge-savemark",
            mark.to_string(),
            "iptables-nft -t mangle -A INPUT -j CONNMARK --save-mark
iptables-nft -A INPUT -m connmark --mark 1 -j DROP",
        ),
        (
            "judge-dscp",
            "iptables-legacy -t mangle -A PREROUTING -p tcp --dport 8080 -j DSCP --set-dscp 0x2e".to_string(),
            "iptables-nft -A INPUT -p tcp -m tos --tos 0xb8/0xfc -j DROP",
        ),
    ];
    for (name, legacy, live) in cases {
        let node = node_with(name, &legacy, live);
        let lab = Lab::new(&node, &[8080, 8081], false);
        assert_stays_blocked(&node, &lab, "10.0.0.1:8080", "10.0.0.1:8081", "holds no twin of");
    }
    // A reader outside iptables: a kill switch's fwmark rule, for what the
    // node forwards.
    let node = node_with("judge-fwmark", mark, "ip rule add fwmark 1 prohibit");
    let lab = Lab::new(&node, &[8080, 8081], true);
    assert_stays_blocked(&node, &lab, "10.0.1.2:8080", "10.0.1.2:8081", "holds no twin of");
    // A TTL of 1 set before routing stops what the node forwards.
    let node = node_with(
        "judge-ttl",
        "iptables-legacy -t mangle -A PREROUTING -p tcp --dport 8080 -j TTL --ttl-set 1",
        "",
    );
    let lab = Lab::new(&node, &[8080, 8081], true);
    assert_stays_blocked(
        &node,
        &lab,
        "10.0.1.2:8080",
        "10.0.1.2:8081",
        "-A PREROUTING -p tcp -m tcp --dport 8080 -j TTL --ttl-set 1",
    );
}

#[test]
fn the_rules_before_a_drop_must_be_the_same_rules() {
    common::root_or_skip!();
    // The live ACCEPT lets all of 10.0.0.0/8 through; the stale one only
    // 192.168.0.1: the client at 10.0.0.2 would pass once legacy is gone.
    let node = node_with(
        "judge-which",
        "iptables-legacy -A INPUT -s 192.168.0.1 -j ACCEPT
iptables-legacy -A INPUT -p tcp --dport 8080 -j DROP",
        "iptables-nft -A INPUT -s 10.0.0.0/8 -j ACCEPT
iptables-nft -A INPUT -p tcp --dport 8080 -j DROP",
    );
    let lab = Lab::new(&node, &[8080, 8081], false);
    assert_stays_blocked(
        &node,
        &lab,
        "10.0.0.1:8080",
        "10.0.0.1:8081",
        "-A INPUT -p tcp -m tcp --dport 8080 -j DROP",
    );
    drop(lab);
    // As many rules before it, but another: a stale MARK (held itself, as
    // a change) where the live copy accepts 10.0.0.0/8. The DROP is held
    // as well, not taken for reached the same way.
    let node = node_with(
        "judge-which-as-many",
        "iptables-legacy -A INPUT -s 192.168.0.1 -j MARK --set-mark 1
iptables-legacy -A INPUT -p tcp --dport 8080 -j DROP",
        "iptables-nft -A INPUT -s 10.0.0.0/8 -j ACCEPT
iptables-nft -A INPUT -p tcp --dport 8080 -j DROP",
    );
    let lab = Lab::new(&node, &[8080, 8081], false);
    assert_stays_blocked(
        &node,
        &lab,
        "10.0.0.1:8080",
        "10.0.0.1:8081",
        "2 items that nft holds no twin of (principle of the first: a change, a shared state or a name not known needs its whole chain's twin): -A INPUT -s 192.168.0.1/32 -j MARK --set-xmark 0x1/0xffffffff; -A INPUT -p tcp -m tcp --dport 8080 -j DROP",
    );
}

#[test]
fn a_family_duplicated_in_the_live_backend_goes_and_stays_blocked() {
    common::root_or_skip!();
    let rules = "-t raw -A PREROUTING -p tcp --dport 8082 -j CT --notrack
-t mangle -A PREROUTING -p tcp --dport 8080 -j MARK --set-mark 1
-t mangle -A PREROUTING -p tcp --dport 8083 -j CONNMARK --set-mark 2
-t nat -A PREROUTING -p tcp --dport 9999 -j DNAT --to-destination 10.0.0.1:8084
-A INPUT -m mark --mark 1 -j DROP
-A INPUT -m conntrack --ctstate UNTRACKED -j DROP
-A INPUT -m connmark --mark 2 -j DROP
-A INPUT -p tcp --dport 8084 -j DROP";
    let both = |tool: &str| rules.lines().map(|l| format!("{tool} {l}\n")).collect::<String>();
    // nft's in the same order: a changing rule's twin is its whole chain's
    // twin (reordered, a mark set later could undo an earlier one).
    let live = both("iptables-nft");
    let node = Node::new("judge-dup");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh(&format!("{}{live}", both("iptables-legacy")));
    let lab = Lab::new(&node, &[8080, 8081, 8082, 8083, 8084, 9999], false);
    let blocked = ["10.0.0.1:8080", "10.0.0.1:8082", "10.0.0.1:8083", "10.0.0.1:9999"];
    for probe in blocked {
        assert!(!lab.connects(probe), "{probe} is blocked before");
    }
    let nft_before = nft_ruleset(&node);
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(!legacy_saves(&node).contains("-A"), "{}", legacy_saves(&node));
    assert_eq!(nft_ruleset(&node), nft_before);
    for probe in blocked {
        assert!(!lab.connects(probe), "{probe} is still blocked after");
    }
    assert!(lab.connects("10.0.0.1:8081"));
}

#[test]
fn an_empty_writer_chain_does_not_stand_for_the_writers_state() {
    common::root_or_skip!();
    // Docker still writes legacy (a published port's DNAT, its MASQUERADE,
    // its filter chains); an admin's `iptables -N DOCKER-USER` in nft.
    let node = node_with(
        "judge-docker-user",
        "iptables-legacy -N DOCKER-USER; iptables-legacy -A DOCKER-USER -j RETURN
iptables-legacy -N DOCKER; iptables-legacy -A FORWARD -j DOCKER-USER; iptables-legacy -A FORWARD -o docker0 -j DOCKER
iptables-legacy -t nat -N DOCKER; iptables-legacy -t nat -A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
iptables-legacy -t nat -A DOCKER ! -i docker0 -p tcp --dport 8080 -j DNAT --to-destination 172.17.0.2:80
iptables-legacy -t nat -A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE",
        "iptables-nft -N DOCKER-USER",
    );
    let before = legacy_saves(&node);
    let out = stale(&node, &["--remove"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{}{err}", stdout(&out));
    assert!(
        err.contains("legacy ipv4 holds Docker's chains that nft does not hold alike (filter DOCKER, filter DOCKER-USER with 1 rule, nat DOCKER with 1 rule)"),
        "{err}"
    );
    assert_eq!(legacy_saves(&node), before);
    // Docker's chains in nft as in legacy (empty where they are empty):
    // it moved, and the removal goes ahead.
    node.sh("iptables-nft -A DOCKER-USER -j RETURN
iptables-nft -N DOCKER
iptables-nft -t nat -N DOCKER
iptables-nft -t nat -A DOCKER ! -i docker0 -p tcp --dport 8080 -j DNAT --to-destination 172.17.0.2:80");
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn each_family_is_judged_on_its_own() {
    common::root_or_skip!();
    // IPv4's stale state is duplicated in nft: it goes. IPv6's mark feeds
    // its own stale DROP: the whole family stays.
    let node = Node::new("judge-families");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    node.sh("for t in iptables-legacy iptables-nft; do
  $t -t mangle -A PREROUTING -p tcp --dport 8080 -j MARK --set-mark 1
  $t -A INPUT -m mark --mark 1 -j DROP
done
ip6tables-legacy -t mangle -A PREROUTING -p tcp --dport 8080 -j MARK --set-mark 1
ip6tables-legacy -A INPUT -m mark --mark 1 -j DROP
ip6tables-nft -A OUTPUT -d 2001:db8::9 -j ACCEPT");
    let lab = Lab::new(&node, &[8080, 8081], false);
    for open in ["10.0.0.1:8081", "[fd00::1]:8081"] {
        assert!(lab.reaches(open), "{open} passes before");
    }
    for probe in ["10.0.0.1:8080", "[fd00::1]:8080"] {
        assert!(!lab.connects(probe), "{probe} is blocked before");
    }
    let out = stale(&node, &["--remove"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(
        text.contains("emptied: legacy ipv4 mangle") && text.contains("emptied: legacy ipv4 filter"),
        "{text}"
    );
    assert!(
        text.contains("left as it was: legacy ipv6 mangle: removing it opens: tcp any → any:8080, arriving for the host by any interface, NEW (now: dropped legacy mangle PREROUTING rule 1 MARK --set-xmark 0x1/0xffffffff then legacy filter INPUT rule 1 DROP")
            && text.contains("removing it is not proven safe")
            && text.contains("left as it was: legacy ipv6 filter: removing it opens: ")
            && text.contains("removing it may open the host (nft holds no `-A INPUT -m mark --mark 0x1 -j DROP`, which blocks)"),
        "{text}"
    );
    let (ipv4, ipv6) = (node.sh("iptables-legacy-save"), node.sh("ip6tables-legacy-save"));
    assert!(!ipv4.contains("-A "), "{ipv4}");
    assert_eq!(ipv6.matches("-A ").count(), 2, "{ipv6}");
    for probe in ["10.0.0.1:8080", "[fd00::1]:8080"] {
        assert!(!lab.connects(probe), "{probe} is still blocked after: {text}");
    }
}

#[test]
fn a_return_to_a_drop_policy_is_not_the_accept_before_it() {
    common::root_or_skip!();
    // Equal counts of rules before the policy, not equal rules: the stale
    // RETURN sends 8080 to the DROP policy, the live ACCEPT lets it in.
    let node = node_with(
        "judge-return",
        "iptables-legacy -P INPUT DROP
iptables-legacy -A INPUT -p tcp --dport 8081 -j ACCEPT
iptables-legacy -A INPUT -p tcp --dport 8080 -j RETURN",
        "iptables-nft -P INPUT DROP
iptables-nft -A INPUT -p tcp --dport 8081 -j ACCEPT
iptables-nft -A INPUT -p tcp --dport 8080 -j ACCEPT",
    );
    let lab = Lab::new(&node, &[8080, 8081], false);
    assert_stays_blocked(&node, &lab, "10.0.0.1:8080", "10.0.0.1:8081", ":INPUT DROP");
}

/// Rules for `tool`: a DROP policy, a user chain that accepts `accepted`
/// ports, and one that drops 9002 after it.
fn user_chain_rules(tool: &str, accepted: &[u16]) -> String {
    let mut rules = format!(
        "{tool} -P INPUT DROP
{tool} -N user-input
{tool} -N after-input
{tool} -A INPUT -j user-input
{tool} -A INPUT -j after-input
{tool} -A after-input -p tcp --dport 9002 -j DROP
"
    );
    for port in accepted {
        rules.push_str(&format!("{tool} -A user-input -p tcp --dport {port} -j ACCEPT\n"));
    }
    rules
}

#[test]
fn a_stale_copy_that_only_accepts_more_goes_and_nothing_opens() {
    common::root_or_skip!();
    let node = node_with(
        "judge-permissive",
        &user_chain_rules("iptables-legacy", &[9000, 9001]),
        &user_chain_rules("iptables-nft", &[9000]),
    );
    let lab = Lab::new(&node, &[9000, 9001, 9002, 9003], false);
    let blocked = ["10.0.0.1:9001", "10.0.0.1:9002", "10.0.0.1:9003"];
    assert!(lab.reaches("10.0.0.1:9000"));
    for probe in blocked {
        assert!(!lab.connects(probe), "{probe} is blocked before");
    }
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(!legacy_saves(&node).contains("-A"), "{}", legacy_saves(&node));
    for probe in blocked {
        assert!(!lab.connects(probe), "{probe} is still blocked after");
    }
    assert!(lab.connects("10.0.0.1:9000"));
}

#[test]
fn a_stale_copy_that_accepts_less_is_held_naming_where_it_differs() {
    common::root_or_skip!();
    let node = node_with(
        "judge-stricter",
        &user_chain_rules("iptables-legacy", &[9000]),
        &user_chain_rules("iptables-nft", &[9000, 9001]),
    );
    let lab = Lab::new(&node, &[9000, 9001], false);
    assert_stays_blocked(
        &node,
        &lab,
        "10.0.0.1:9001",
        "10.0.0.1:9000",
        "chain user-input, rule 2: legacy none, nft `-A user-input -p tcp -m tcp --dport 9001 -j ACCEPT`",
    );
    // Shown, the held chain stale against live, rule against rule.
    let out = stale(&node, &[]);
    let text = stdout(&out);
    assert!(
        text.contains(
            "    chain user-input\n      both    -A user-input -p tcp -m tcp --dport 9000 -j ACCEPT\n      nft     -A user-input -p tcp -m tcp --dport 9001 -j ACCEPT\n"
        ),
        "{text}"
    );
}
