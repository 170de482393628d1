//! Rows of the table of effects by what a target does to a packet, shown
//! by packets through real namespaces (tests/common/row_lab.rs), each with
//! the removal's verdict on the real binary: a row read wrong either way
//! opens a flow here, or holds what the kernel shows may go.

mod common;

use common::row_lab::RowLab;

/// The port the datagrams go to.
const PORT: u16 = 5000;

/// `NFQUEUE` queues: with nothing listening on its queue, the kernel
/// drops the packet, or with `--queue-bypass` accepts it, so a live
/// `NFQUEUE --queue-bypass` is no block: packets it accepts never reach
/// the live twin of a stale `DROP` after it, and that stale `DROP` holds
/// its family ("may open the host": removing it, udp/5000 passes).
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
