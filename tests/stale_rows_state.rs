//! Rows of the table of effects by the state a name keeps on or writes,
//! shown by packets through real namespaces (tests/common/row_lab.rs),
//! each with the removal's verdict on the real binary: what a row says it
//! keeps on, the kernel keeps on (and no more), and what it says it
//! writes, a live rule reads.

mod common;

use common::row_lab::{RowLab, NODE, NODE6};

/// The port the datagrams go to.
const PORT: u16 = 5000;

/// `mark` keeps nothing on: with only a live `-m mark` rule, a 3,000-byte
/// datagram arrives in fragments that a live `-m length --length
/// 2000:65535` drop does not match. A stale `-m state` rule keeps
/// connection tracking, and with it defragmentation, on: the whole
/// datagram meets the drop. So the stale rule holds its family (it keeps
/// on what no live rule does), and the datagram stays stopped.
#[test]
fn mark_keeps_nothing_on_so_a_stale_state_rule_keeping_defragmentation_on_holds() {
    common::root_or_skip!();
    let lab = RowLab::new("rows-mark");
    let plain = lab.socket(PORT, None);
    lab.node.sh(
        "iptables-nft -t mangle -A PREROUTING -p udp -m length --length 2000:65535 -j DROP
iptables-nft -A INPUT -p udp -m mark --mark 0x1 -j ACCEPT",
    );
    assert!(lab.arrives(&plain, 1000), "a whole datagram under 2,000 bytes");
    assert!(
        lab.arrives(&plain, 3000),
        "-m mark keeps defragmentation off: the fragments pass the length drop"
    );
    lab.node
        .sh("iptables-legacy -A INPUT -m state --state ESTABLISHED -j ACCEPT");
    assert!(
        !lab.arrives(&plain, 3000),
        "-m state keeps it on: the whole datagram is dropped"
    );
    lab.removal_holds("filter", "is not proven safe", "keeps on what no live rule keeps on");
    assert!(!lab.arrives(&plain, 3000), "still dropped whole");
    lab.node.sh("iptables-legacy -F INPUT");
    assert!(
        lab.arrives(&plain, 3000),
        "without the stale rule the fragments pass: the removal held what it had to"
    );
}

/// `socket` writes: `--restore-skmark` gives a packet the mark of the
/// socket it is for, and a live `-m mark --mark 1 -j DROP` reads it. The
/// stale rule (no verdict, the live backend keeping conntrack on, so
/// only what it writes counts) holds its family, and the datagram to the
/// marked socket stays dropped.
#[test]
fn socket_writes_the_mark_a_live_rule_reads() {
    common::root_or_skip!();
    let lab = RowLab::new("rows-socket");
    let marked = lab.socket(PORT, Some(1));
    lab.node
        .sh("iptables-nft -A INPUT -m conntrack --ctstate INVALID -j DROP
iptables-nft -A INPUT -p udp --dport 5000 -m mark --mark 0x1 -j DROP");
    assert!(lab.arrives(&marked, 100), "nothing marks it yet");
    lab.node
        .sh("iptables-legacy -t mangle -A PREROUTING -p udp --dport 5000 -m socket --restore-skmark");
    assert!(
        !lab.arrives(&marked, 100),
        "the socket's mark restored: the live rule drops it"
    );
    lab.removal_holds(
        "mangle",
        "is not proven safe",
        "-A PREROUTING -p udp -m udp --dport 5000 -m socket --restore-skmark",
    );
    assert!(!lab.arrives(&marked, 100), "still dropped");
    lab.node.sh("iptables-legacy -t mangle -F PREROUTING");
    assert!(
        lab.arrives(&marked, 100),
        "without the stale rule it arrives: the removal held what it had to"
    );
}

/// A target that writes what a live rule reads: the stale rule (mangle
/// PREROUTING) writes it for udp/5000, and the live filter rule reading
/// it drops the datagram.
struct Writer {
    target: &'static str,
    setup: &'static str,
    stale: &'static str,
    live: &'static str,
    /// Undoes what the stale rule wrote, once it is gone.
    undo: &'static str,
}

const WRITERS: &[Writer] = &[
    Writer {
        target: "SET",
        setup: "ipset create S hash:ip",
        stale: "-j SET --add-set S src",
        live: "-m set --match-set S src",
        undo: "ipset flush S",
    },
    Writer {
        target: "DSCP",
        setup: "",
        stale: "-j DSCP --set-dscp 0x01",
        live: "-m dscp --dscp 0x01",
        undo: "",
    },
    Writer {
        target: "TOS",
        setup: "",
        stale: "-j TOS --set-tos 0x10",
        live: "-m tos --tos 0x10",
        undo: "",
    },
];

/// `SET` (a named set), `DSCP` and `TOS` (the packet's header) change
/// what a live rule reads: each stale writer holds its family ("not
/// proven safe", a change needs its whole chain's twin), and the datagram
/// stays dropped; without it, it arrives.
#[test]
fn set_dscp_and_tos_write_what_a_live_rule_reads() {
    common::root_or_skip!();
    for case in WRITERS {
        let lab = RowLab::new(&format!("rows-writes-{}", case.target.to_lowercase()));
        let plain = lab.socket(PORT, None);
        lab.node.sh(&format!(
            "{}
iptables-nft -A INPUT -p udp --dport 5000 {} -j DROP",
            case.setup, case.live
        ));
        assert!(lab.arrives(&plain, 100), "{}: nothing written yet", case.target);
        lab.node.sh(&format!(
            "iptables-legacy -t mangle -A PREROUTING -p udp --dport 5000 {}",
            case.stale
        ));
        assert!(
            !lab.arrives(&plain, 100),
            "{}: written, the live rule drops it",
            case.target
        );
        lab.removal_holds(
            "mangle",
            "is not proven safe",
            &format!("-A PREROUTING -p udp -m udp --dport 5000 -j {}", case.target),
        );
        assert!(!lab.arrives(&plain, 100), "{}: still dropped", case.target);
        lab.node
            .sh(&format!("iptables-legacy -t mangle -F PREROUTING\n{}", case.undo));
        assert!(
            lab.arrives(&plain, 100),
            "{}: without it the datagram arrives: the removal held what it had to",
            case.target
        );
    }
}

/// `TCPMSS` rewrites a SYN's maximum segment size, which a live `-m
/// tcpmss --mss 1:500 -j DROP` reads: the stale writer holds its family,
/// and the connection stays refused; without it, it completes.
#[test]
fn tcpmss_writes_the_size_a_live_rule_reads() {
    common::root_or_skip!();
    let lab = RowLab::new("rows-writes-tcpmss");
    let listener = std::net::TcpListener::bind((NODE, PORT)).unwrap();
    lab.node
        .sh("iptables-nft -A INPUT -p tcp --dport 5000 -m tcpmss --mss 1:500 -j DROP");
    assert!(lab.connects(&listener), "the client's own MSS: it connects");
    lab.node.sh(
        "iptables-legacy -t mangle -A PREROUTING -p tcp --dport 5000 --tcp-flags SYN,RST SYN -j TCPMSS --set-mss 400",
    );
    assert!(!lab.connects(&listener), "clamped to 400: the live rule drops the SYN");
    lab.removal_holds("mangle", "is not proven safe", "-j TCPMSS --set-mss 400");
    assert!(!lab.connects(&listener), "still dropped");
    lab.node.sh("iptables-legacy -t mangle -F PREROUTING");
    assert!(
        lab.connects(&listener),
        "without it the connection completes: the removal held what it had to"
    );
}

/// `HL` sets an IPv6 packet's hop limit, which a live `-m hl --hl-eq 1 -j
/// DROP` reads: the stale writer holds its family (legacy ipv6), and the
/// datagram stays dropped; without it, it arrives.
#[test]
fn hl_writes_the_hop_limit_a_live_rule_reads() {
    common::root_or_skip!();
    let lab = RowLab::new("rows-writes-hl");
    let plain = lab.socket_at(NODE6, PORT, None);
    lab.node
        .sh("ip6tables-nft -A INPUT -p udp --dport 5000 -m hl --hl-eq 1 -j DROP");
    assert!(lab.arrives(&plain, 100), "the client's own hop limit: it arrives");
    lab.node
        .sh("ip6tables-legacy -t mangle -A PREROUTING -p udp --dport 5000 -j HL --hl-set 1");
    assert!(!lab.arrives(&plain, 100), "set to 1: the live rule drops it");
    lab.removal_holds_in(
        "ipv6",
        "mangle",
        "is not proven safe",
        "-A PREROUTING -p udp -m udp --dport 5000 -j HL --hl-set 1",
    );
    assert!(!lab.arrives(&plain, 100), "still dropped");
    lab.node.sh("ip6tables-legacy -t mangle -F PREROUTING");
    assert!(
        lab.arrives(&plain, 100),
        "without it the datagram arrives: the removal held what it had to"
    );
}
