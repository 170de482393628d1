//! Rows of the table of effects by what a target does to a packet, shown
//! by packets through real namespaces (tests/common/row_lab.rs), each with
//! the removal's verdict on the real binary: a row read wrong either way
//! opens a flow here, or holds what the kernel shows may go.

mod common;

use common::row_lab::RowLab;
use common::stale::{legacy_saves, stale, stderr, stdout};

/// The port the datagrams go to.
const PORT: u16 = 5000;

/// `NFQUEUE` queues: with nothing listening on its queue, the kernel
/// drops the packet, or with `--queue-bypass` accepts it, so a live
/// `NFQUEUE --queue-bypass` is no block: packets it accepts never reach
/// the live twin of a stale `DROP` after it, and that stale `DROP` holds
/// its family ("not proven safe": the live copy holds it, reached
/// otherwise; removing it, udp/5000 passes).
#[test]
fn nfqueue_queues_and_with_bypass_accepts_where_nothing_listens() {
    common::root_or_skip!();
    let lab = RowLab::new("rows-nfqueue");
    let plain = lab.socket(PORT, None);
    assert!(lab.arrives(&plain, 100), "nothing loaded: it arrives");
    lab.node
        .sh("iptables-nft -A INPUT -p udp --dport 5000 -j NFQUEUE --queue-num 7");
    assert!(!lab.arrives(&plain, 100), "queued to nothing: dropped");
    lab.node.sh("iptables-nft -F INPUT
iptables-nft -A INPUT -p udp --dport 5000 -j NFQUEUE --queue-num 7 --queue-bypass
iptables-nft -A INPUT -p udp --dport 5000 -j DROP");
    assert!(
        lab.arrives(&plain, 100),
        "--queue-bypass with nothing listening accepts: the DROP after it never sees it"
    );
    lab.node.sh("iptables-legacy -A INPUT -p udp --dport 5000 -j DROP");
    assert!(!lab.arrives(&plain, 100), "the stale DROP stops it");
    lab.removal_holds(
        "filter",
        "is not proven safe",
        "-A INPUT -p udp -m udp --dport 5000 -j DROP",
    );
    assert!(!lab.arrives(&plain, 100), "still stopped");
    lab.node.sh("iptables-legacy -F INPUT");
    assert!(
        lab.arrives(&plain, 100),
        "without the stale DROP it passes: the removal held what it had to"
    );
}

/// The targets that leave the host as it was: placed before a `DROP` of
/// the same chain, a packet passes where the target ends the chain
/// (`accepts`; `returns`, from a built-in chain to its `ACCEPT` policy)
/// and meets the `DROP` where it only observes (`LOG`, `NFLOG`, `AUDIT`,
/// and `TRACE` in raw). Alone, none stops a packet, and each goes without
/// a twin (exit 0), the datagram passing before and after.
#[test]
fn accepts_returns_and_observes_stop_nothing_and_go() {
    common::root_or_skip!();
    for (table, chain, target, ends_the_chain) in [
        ("filter", "INPUT", "ACCEPT", true),
        ("filter", "INPUT", "RETURN", true),
        ("filter", "INPUT", "LOG", false),
        ("filter", "INPUT", "NFLOG", false),
        ("filter", "INPUT", "AUDIT --type accept", false),
        ("raw", "PREROUTING", "TRACE", false),
    ] {
        let name = target.split(' ').next().unwrap();
        let lab = RowLab::new(&format!("rows-goes-{}", name.to_lowercase()));
        let plain = lab.socket(PORT, None);
        lab.node.sh(&format!(
            "iptables-nft -A OUTPUT -d 192.0.2.9 -j ACCEPT
iptables-legacy -t {table} -A {chain} -p udp --dport 5000 -j {target}
iptables-legacy -t {table} -A {chain} -p udp --dport 5000 -j DROP"
        ));
        assert_eq!(
            lab.arrives(&plain, 100),
            ends_the_chain,
            "{name} before a DROP of its chain"
        );
        lab.node.sh(&format!(
            "iptables-legacy -t {table} -D {chain} -p udp --dport 5000 -j DROP"
        ));
        assert!(lab.arrives(&plain, 100), "{name} alone stops nothing");
        let out = stale(&lab.node, &["--remove"]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}{}", stdout(&out), stderr(&out));
        assert!(!legacy_saves(&lab.node).contains("-A "), "{name}: emptied");
        assert!(lab.arrives(&plain, 100), "{name}: it still passes");
    }
}

/// `DROP`, `REJECT`, and `QUEUE` with nothing listening: each stops the
/// datagram. Each, stale and alone, holds its family ("may open the
/// host"); without it the datagram passes.
#[test]
fn blocks_and_a_queue_nothing_reads_stop_it_and_hold() {
    common::root_or_skip!();
    for target in ["DROP", "REJECT", "QUEUE"] {
        let lab = RowLab::new(&format!("rows-blocks-{}", target.to_lowercase()));
        let plain = lab.socket(PORT, None);
        lab.node.sh(&format!(
            "iptables-nft -A OUTPUT -d 192.0.2.9 -j ACCEPT
iptables-legacy -A INPUT -p udp --dport 5000 -j {target}"
        ));
        assert!(!lab.arrives(&plain, 100), "{target} stops it");
        lab.removal_holds(
            "filter",
            "may open the host",
            &format!("-A INPUT -p udp -m udp --dport 5000 -j {target}"),
        );
        assert!(!lab.arrives(&plain, 100), "{target}: still stopped");
        lab.node.sh("iptables-legacy -F INPUT");
        assert!(lab.arrives(&plain, 100), "without the stale {target} it passes");
    }
}
