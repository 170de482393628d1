//! `stale` and `stale --remove` decided by packet fates, proven by
//! packets: in a router holding both backends (tests/common/netns_topology.rs),
//! a stale legacy copy whose removal opens a flow though the judgement by
//! twins found nothing to hold, or held it without saying what opens. Each
//! case asserts the family is held with "opens:" and the witness, sends
//! the witness's flow (stopped), removes with `--allow-opening`, and sends
//! it again (it passes): the witness is what the packets meet.

mod common;

use common::netns_topology::{Flow, Topology, ROUTER, SERVER};
use common::stale::{json, stale, stderr, stdout};
use common::Node;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const WAIT: Duration = Duration::from_millis(500);

static NODES: AtomicUsize = AtomicUsize::new(0);

fn flow(tcp: bool, to: &str, port: u16) -> Flow {
    Flow {
        tcp,
        to: SocketAddr::new(to.parse().unwrap(), port),
    }
}

/// The router with `legacy` (stale) and `nft` (the host's, by its link)
/// restored into it, around a client and a server.
fn router(legacy: &str, nft: &str, ipv6: bool) -> (Node, Topology) {
    let node = Node::new(&format!("fates-{}", NODES.fetch_add(1, Ordering::Relaxed)));
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    let topology = Topology::around_this_thread();
    let (legacy_file, nft_file) = (node.path("legacy.rules"), node.path("nft.rules"));
    std::fs::write(&legacy_file, legacy).unwrap();
    std::fs::write(&nft_file, nft).unwrap();
    let tool = if ipv6 { "ip6tables" } else { "iptables" };
    node.sh(&format!(
        "{tool}-legacy-restore < {}\n{tool}-nft-restore < {}",
        legacy_file.display(),
        nft_file.display()
    ));
    (node, topology)
}

/// The whole case: the family held by the fates with `witness` (each part
/// said), `flow` stopped; removed with `--allow-opening`, `flow` passes.
/// `between`: what runs in the router between the removal and the last
/// probe (a list's entries of the probes before, cleared).
fn opens(legacy: &str, nft: &str, table: &str, witness: &[&str], flow: Flow, between: &str) {
    held_by(OPENS, Sent::default(), legacy, nft, table, witness, flow, between)
}

/// How a case's flow is sent: after which flows, and whether by the
/// router (the host holding the rules) rather than the client.
#[derive(Default)]
struct Sent<'a> {
    after: &'a [Flow],
    by_the_router: bool,
    /// Run in the router before anything is judged (`ip rule ...`).
    router_setup: &'a str,
    /// The flow stays stopped after the removal: what the table is held
    /// for is not a flow the packets open (said as "cannot tell").
    stays_stopped: bool,
    /// The witness's reply is stopped after: its packet is sent and seen
    /// arriving (tests/common/arrival.rs); no exchange completes, before
    /// or after.
    reply_stopped: bool,
}

const OPENS: &str = "removing it opens: ";

/// What holds a table whose rule not modelled decides a packet that passes
/// without it.
const CANNOT_TELL: &str = "cannot tell: ";

/// [`opens`] for a table held by what `verdict` begins, each probe of
/// `flow` sent after `primers` (a witness sent after a packet the stale
/// rules write a list entry for).
#[allow(clippy::too_many_arguments)]
fn held_by(
    verdict: &str,
    sent: Sent,
    legacy: &str,
    nft: &str,
    table: &str,
    witness: &[&str],
    flow: Flow,
    between: &str,
) {
    let ipv6 = flow.to.is_ipv6();
    let (family, save) = if ipv6 {
        ("ipv6", "ip6tables-legacy-save")
    } else {
        ("ipv4", "iptables-legacy-save")
    };
    let (node, topology) = router(legacy, nft, ipv6);
    if !sent.router_setup.is_empty() {
        node.sh(sent.router_setup);
    }
    let from = if sent.by_the_router {
        &topology.router
    } else {
        &topology.client
    };
    let to_server = [SERVER.v4, SERVER.v6].iter().any(|a| a.parse() == Ok(flow.to.ip()));
    let at = if to_server { &topology.server } else { &topology.router };
    let probe = |flow: Flow| {
        if !sent.after.is_empty() {
            topology.probe(sent.after, WAIT);
        }
        match sent.reply_stopped {
            false => topology.probe_from(from, &[flow], WAIT)[0],
            true => common::arrival::arrived(at, flow.tcp, flow.to, WAIT, move || {
                from.enter();
                let _ = flow.answered(WAIT);
            }),
        }
    };
    let shown = stale(&node, &[]);
    let said = stdout(&shown);
    let line = said
        .lines()
        .find(|l| l.contains(verdict))
        .unwrap_or_else(|| panic!("no witness shown:\n{said}"));
    eprintln!("{line}");
    for part in witness {
        assert!(line.contains(part), "`{part}` not in: {line}");
    }
    // The side-by-side view starts at the stale rule the packet met first
    // (of the held table), or the one the model cannot tell past.
    let next = said
        .lines()
        .skip_while(|l| !l.contains(verdict))
        .nth(1)
        .unwrap_or_default();
    let starts = match verdict {
        OPENS => format!("the witness meets first legacy {table} "),
        _ => format!("the model cannot tell past legacy {table} "),
    };
    assert!(next.trim_start().starts_with(&starts), "{said}");
    let report = json(&stale(&node, &["--json"]));
    let finding = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["backend"] == "legacy" && f["family"] == family)
        .unwrap()
        .clone();
    assert!(finding["packets_tried"].as_u64().unwrap_or_default() > 0, "{finding}");
    let held = finding["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == table)
        .unwrap()
        .clone();
    let opening = held["opening"].as_str().unwrap_or_default();
    assert!(
        opening.starts_with(verdict) && witness.iter().all(|p| opening.contains(p)),
        "--json: {opening}"
    );
    // A witness's parts, each on its own.
    let packet = held["witness"]["packet"].as_str().unwrap_or_default();
    assert_eq!(verdict == OPENS, !packet.is_empty() && line.contains(packet), "{held}");
    let count = format!("{save} | grep -c -- '^-A' || true");
    let before = node.sh(&count);
    let held = stale(&node, &["--remove"]);
    assert_eq!(held.status.code(), Some(1), "{}{}", stdout(&held), stderr(&held));
    let out = stdout(&held) + &stderr(&held);
    assert!(out.contains(verdict), "{out}");
    assert_eq!(node.sh(&count), before);
    // One after the other: a witness may be a second such packet.
    let stopped = [probe(flow), probe(flow)];
    let second_only = line.contains("(a second such packet");
    assert!(
        !stopped[1] && (second_only || !stopped[0]),
        "{flow} passed before the removal: {stopped:?}"
    );
    let removed = stale(&node, &["--remove", "--allow-opening"]);
    assert_eq!(
        removed.status.code(),
        Some(0),
        "{}{}",
        stdout(&removed),
        stderr(&removed)
    );
    if !between.is_empty() {
        node.sh(between);
    }
    match sent.stays_stopped {
        false => assert!(probe(flow), "{flow}, the witness, still stopped after the removal"),
        true => assert!(!probe(flow), "{flow} passes after the removal"),
    }
    if sent.reply_stopped {
        assert!(
            !topology.probe_from(from, &[flow], WAIT)[0],
            "{flow} answered after the removal"
        );
    }
}

/// A stale nat `MARK` (kube-proxy's drop bit) that a live filter drops on:
/// the mark goes with the nat table, and tcp/8080 opens.
#[test]
fn a_stale_nat_mark_read_by_a_live_drop_holds_with_its_witness() {
    common::root_or_skip!();
    opens(
        "*nat\n-A PREROUTING -p tcp -m tcp --dport 8080 -j MARK --set-xmark 0x8000/0x8000\nCOMMIT\n",
        "*filter\n-A INPUT -m mark --mark 0x8000/0x8000 -j DROP\n-A INPUT -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n",
        "nat",
        &[
            "tcp any → any:8080, arriving for the host",
            "now: dropped legacy nat PREROUTING rule 1 MARK --set-xmark 0x8000/0x8000 then nft filter INPUT rule 1 DROP",
            "after: passes",
        ],
        flow(true, ROUTER.v4, 8080),
        "",
    );
}

/// A stale `DNAT` of :9999 to :8080, which a live filter drops: removing it
/// lets :9999 through as it is.
#[test]
fn a_stale_dnat_into_a_live_drop_holds_with_its_witness() {
    common::root_or_skip!();
    opens(
        "*nat\n-A PREROUTING -d 10.2.0.2/32 -p tcp -m tcp --dport 9999 -j DNAT --to-destination 10.2.0.2:8080\nCOMMIT\n",
        "*filter\n-A FORWARD -p tcp -m tcp --dport 8080 -j DROP\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n",
        "nat",
        &[
            "tcp any → 10.2.0.2:9999, forwarded",
            "DNAT --to-destination 10.2.0.2:8080 then nft filter FORWARD rule 1 DROP",
            "after: passes",
        ],
        flow(true, SERVER.v4, 9999),
        "",
    );
}

/// A stale `recent --set` feeding a live `--rcheck ... -j DROP`: without
/// it, a source not yet listed passes (the probes' own entries, written
/// before the removal, are cleared as they would age out).
#[test]
fn a_stale_recent_list_read_by_a_live_check_holds_with_its_witness() {
    common::root_or_skip!();
    opens(
        "*filter\n-A INPUT -p udp -m udp --dport 53 -m recent --set --name SCAN --mask 255.255.255.255 --rsource\nCOMMIT\n",
        "*filter\n-A INPUT -m recent --rcheck --name SCAN --mask 255.255.255.255 --rsource -j DROP\nCOMMIT\n",
        "filter",
        &["udp any → any:53, arriving for the host", "recent --set --name SCAN", "then nft filter INPUT rule 1 DROP"],
        flow(false, ROUTER.v4, 53),
        "echo / > /proc/net/xt_recent/SCAN",
    );
}

/// A live user chain that accepts tcp/8080 before the drop both copies
/// hold: the stale copy's drop alone stops tcp/8080.
#[test]
fn a_live_user_chain_accepting_before_a_shared_drop_holds_with_its_witness() {
    common::root_or_skip!();
    opens(
        "*filter\n:guard - [0:0]\n-A INPUT -j guard\n-A guard -p tcp -j DROP\nCOMMIT\n",
        "*filter\n:guard - [0:0]\n-A INPUT -j guard\n-A guard -p tcp -m tcp --dport 8080 -j ACCEPT\n-A guard -p tcp -j DROP\nCOMMIT\n",
        "filter",
        &[
            "tcp any → any:8080, arriving for the host",
            "now: dropped legacy filter guard rule 1 DROP",
            "after: passes nft filter guard rule 1 ACCEPT",
        ],
        flow(true, ROUTER.v4, 8080),
        "",
    );
}

/// A stale `RETURN` into an `INPUT DROP` policy, where the live copy
/// accepts: udp/53 opens.
#[test]
fn a_stale_return_into_a_drop_policy_holds_with_its_witness() {
    common::root_or_skip!();
    opens(
        "*filter\n:INPUT DROP [0:0]\n-A INPUT -p udp -m udp --dport 53 -j RETURN\n-A INPUT -j ACCEPT\nCOMMIT\n",
        "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp -m udp --dport 53 -j ACCEPT\nCOMMIT\n",
        "filter",
        &[
            "udp any → any:53, arriving for the host",
            "now: dropped legacy filter INPUT rule 1 RETURN then legacy filter INPUT policy DROP",
            "after: passes nft filter INPUT rule 1 ACCEPT",
        ],
        flow(false, ROUTER.v4, 53),
        "",
    );
}

/// A stale `DNAT` from one source, into what a live filter drops on one
/// interface: only a packet naming both meets both, and it opens.
#[test]
fn a_stale_dnat_from_one_source_into_a_live_drop_on_one_interface_holds_with_its_witness() {
    common::root_or_skip!();
    opens(
        "*nat\n-A PREROUTING -s 10.1.0.5/32 -p tcp -m tcp --dport 9999 -j DNAT --to-destination 10.2.0.2:8080\nCOMMIT\n",
        "*filter\n-A FORWARD -i rc -p tcp -m tcp --dport 8080 -j DROP\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n",
        "nat",
        &[
            "tcp 10.1.0.5 → any:9999",
            "by rc",
            "DNAT --to-destination 10.2.0.2:8080 then nft filter FORWARD rule 1 DROP",
            "after: passes",
        ],
        flow(true, SERVER.v4, 9999),
        "",
    );
}

/// A stale `DNAT` of :9999 to :8080 where a live filter drops what was
/// DNATed (`--ctstate DNAT`): removing it lets :9999 through.
#[test]
fn a_stale_dnat_read_by_a_live_ctstate_dnat_drop_holds_with_its_witness() {
    common::root_or_skip!();
    opens(
        "*nat\n-A PREROUTING -d 10.2.0.2/32 -p tcp -m tcp --dport 9999 -j DNAT --to-destination 10.2.0.2:8080\nCOMMIT\n",
        "*filter\n-A FORWARD -m conntrack --ctstate DNAT -j DROP\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n",
        "nat",
        &[
            "tcp any → 10.2.0.2:9999, forwarded",
            "DNAT --to-destination 10.2.0.2:8080 then nft filter FORWARD rule 1 DROP",
            "after: passes",
        ],
        flow(true, SERVER.v4, 9999),
        "",
    );
}

/// A stale `REDIRECT` of :22 to :8080, which a live filter drops: removing
/// it lets :22 through.
#[test]
fn a_stale_redirect_into_a_live_drop_holds_with_its_witness() {
    common::root_or_skip!();
    opens(
        "*nat\n-A PREROUTING -p tcp -m tcp --dport 22 -j REDIRECT --to-ports 8080\nCOMMIT\n",
        "*filter\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\n-A INPUT -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n",
        "nat",
        &[
            "tcp any → any:22, arriving for the host",
            "REDIRECT --to-ports 8080 then nft filter INPUT rule 1 DROP",
            "after: passes",
        ],
        flow(true, ROUTER.v4, 22),
        "",
    );
}

/// A stale `recent --set` on udp/53 feeding a live `--rcheck` on tcp/22:
/// tcp/22 sent after udp/53 from the same source is stopped, and passes
/// once the stale copy is gone.
#[test]
fn a_stale_recent_list_written_on_one_port_and_read_on_another_holds_with_its_witness() {
    common::root_or_skip!();
    held_by(
        OPENS,
        Sent {
            after: &[flow(false, ROUTER.v4, 53)],
            ..Sent::default()
        },
        "*filter\n-A INPUT -p udp -m udp --dport 53 -m recent --set --name SCAN --mask 255.255.255.255 --rsource\nCOMMIT\n",
        "*filter\n-A INPUT -p tcp -m tcp --dport 22 -m recent --rcheck --name SCAN --mask 255.255.255.255 --rsource -j DROP\nCOMMIT\n",
        "filter",
        &[
            "tcp any → any:22, arriving for the host",
            "sent after udp any → any:53, arriving for the host by any interface, NEW, whose address the legacy rules put in list SCAN",
            "now: dropped nft filter INPUT rule 1 DROP",
            "after: passes",
        ],
        flow(true, ROUTER.v4, 22),
        "echo / > /proc/net/xt_recent/SCAN",
    );
}

/// A stale `NETMAP` (to an address of its range the model does not pick)
/// where a live filter drops that range: held as "cannot tell", naming
/// both rules and the packet, which is indeed stopped now and passes
/// without the stale copy.
#[test]
fn a_stale_nat_target_not_modelled_holds_as_cannot_tell_naming_its_packet() {
    common::root_or_skip!();
    held_by(
        CANNOT_TELL,
        Sent::default(),
        "*nat\n-A PREROUTING -d 10.2.0.2/32 -p tcp -m tcp --dport 9999 -j NETMAP --to 10.9.0.0/24\nCOMMIT\n",
        "*filter\n-A FORWARD -d 10.9.0.0/24 -j DROP\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n",
        "nat",
        &[
            "after `-A PREROUTING -d 10.2.0.2/32 -p tcp -m tcp --dport 9999 -j NETMAP --to 10.9.0.0/24` (legacy nat PREROUTING rule 1), the model cannot tell what `-A FORWARD -d 10.9.0.0/24 -j DROP` (nft filter FORWARD rule 1) does to tcp any → 10.2.0.2:9999, forwarded",
            "which without the legacy copy passes",
        ],
        flow(true, SERVER.v4, 9999),
        "",
    );
}

/// Docker's pattern: a stale container's `DNAT` behind `addrtype LOCAL`
/// sends what arrives for the host on to a server port a live filter
/// drops when forwarded; removing it lets the host's own :22 answer.
#[test]
fn a_stale_docker_dnat_of_the_hosts_port_into_a_forward_drop_holds_with_its_witness() {
    common::root_or_skip!();
    opens(
        "*nat\n:DOCKER - [0:0]\n-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER\n-A DOCKER -p tcp -m tcp --dport 22 -j DNAT --to-destination 10.2.0.2:8080\nCOMMIT\n",
        "*nat\n:DOCKER - [0:0]\n-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER\n-A DOCKER -p tcp -m tcp --dport 9000 -j DNAT --to-destination 10.2.0.2:9999\nCOMMIT\n*filter\n-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A FORWARD -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n",
        "nat",
        &[
            "tcp any → any:22, arriving for the host",
            "DNAT --to-destination 10.2.0.2:8080 then nft filter FORWARD rule 2 DROP",
            "after: passes",
        ],
        flow(true, ROUTER.v4, 22),
        "",
    );
}

/// A stale OUTPUT `REDIRECT` of what the host sends to a server's :80 to
/// its own :8080, which a live filter drops arriving: removing it lets the
/// host reach the server.
#[test]
fn a_stale_output_redirect_looped_into_a_live_input_drop_holds_with_its_witness() {
    common::root_or_skip!();
    held_by(
        OPENS,
        Sent {
            by_the_router: true,
            ..Sent::default()
        },
        "*nat\n-A OUTPUT -d 10.2.0.2/32 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 8080\nCOMMIT\n",
        "*filter\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\n-A INPUT -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n",
        "nat",
        &[
            "tcp any → 10.2.0.2:80, sent by the host",
            "REDIRECT --to-ports 8080 then nft filter INPUT rule 1 DROP",
            "after: passes",
        ],
        flow(true, SERVER.v4, 80),
        "",
    );
}

/// A stale `MASQUERADE` whose connections' replies a live filter drops
/// (`--ctstate SNAT`): the client's connections to the server fail now,
/// and pass without the stale copy.
#[test]
fn a_reply_a_live_filter_drops_for_a_stale_masquerade_holds_with_its_witness() {
    common::root_or_skip!();
    opens(
        "*nat\n-A POSTROUTING -o rs -j MASQUERADE\nCOMMIT\n",
        "*filter\n-A FORWARD -m conntrack --ctstate SNAT -j DROP\nCOMMIT\n",
        "nat",
        &[
            "the reply to tcp any → any:any, forwarded in by any interface, out by rs",
            "now: dropped legacy nat POSTROUTING rule 1 MASQUERADE then nft filter FORWARD rule 1 DROP",
            "after: passes",
        ],
        flow(true, SERVER.v4, 22),
        "",
    );
}

/// A stale mark that a routing rule reads (`ip rule fwmark 0x1 lookup 7`,
/// table 7 a blackhole): the marked packet is stopped by routing, which
/// the model does not follow, so the table is held as "cannot tell",
/// naming the routing rule; without the stale copy the flow passes.
#[test]
fn a_stale_mark_a_routing_rule_reads_holds_as_cannot_tell() {
    common::root_or_skip!();
    held_by(
        CANNOT_TELL,
        Sent {
            router_setup: "ip rule add fwmark 0x1 lookup 7 priority 100\nip route add blackhole default table 7",
            ..Sent::default()
        },
        "*mangle\n-A PREROUTING -p tcp -m tcp --dport 8080 -j MARK --set-xmark 0x1/0xffffffff\nCOMMIT\n",
        "*filter\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n",
        "mangle",
        &[
            "after `-A PREROUTING -p tcp -m tcp --dport 8080 -j MARK --set-xmark 0x1/0xffffffff` (legacy mangle PREROUTING rule 1), the model cannot tell what `ip rule 100: fwmark 0x1/0xffffffff lookup 7` (a routing rule, routes not modelled) does to tcp any → any:8080",
            "which without the legacy copy passes",
        ],
        flow(true, SERVER.v4, 8080),
        "",
    );
}

/// IPv6, where the live copy drops what is untracked on INPUT: neighbour
/// discovery is stopped, so the stale drop of :22 hides no flow that can
/// pass (unless the client's neighbour entry were static). Held as "cannot
/// tell", naming the discovery's fate; the flow stays stopped after.
#[test]
fn an_ipv6_witness_whose_neighbour_discovery_the_live_copy_stops_holds_as_cannot_tell() {
    common::root_or_skip!();
    held_by(
        CANNOT_TELL,
        Sent {
            stays_stopped: true,
            ..Sent::default()
        },
        "*filter\n-A INPUT -p tcp -m tcp --dport 22 -j DROP\nCOMMIT\n",
        "*filter\n-A INPUT -m conntrack --ctstate UNTRACKED -j DROP\nCOMMIT\n",
        "filter",
        &[
            "would pass without the legacy copy, but only where its neighbours are already known: neighbour discovery (icmpv6 any → any:any, arriving for the host by any interface, UNTRACKED) is dropped nft filter INPUT rule 1 DROP",
        ],
        flow(true, ROUTER.v6, 22),
        "",
    );
}

/// A stale nat rule consuming a `hashlimit` bucket that a live filter
/// reads by the same name (the fates do not follow `hashlimit`): the first
/// connection of a source is dropped today because the stale rule took its
/// token. The nat exception no longer lets the rule go without a twin: a
/// plain `--remove` holds the family (before, it emptied it and the first
/// connection of each new source passed).
#[test]
fn a_stale_nat_hashlimit_a_live_filter_reads_by_name_holds_its_family() {
    common::root_or_skip!();
    let limit = "-m hashlimit --hashlimit-upto 1/hour --hashlimit-burst 1 --hashlimit-mode srcip --hashlimit-name HL";
    let above = "-m hashlimit --hashlimit-above 1/hour --hashlimit-burst 1 --hashlimit-mode srcip --hashlimit-name HL";
    let (node, topology) = router(
        &format!(
            "*nat\n-A PREROUTING -p tcp -m tcp --dport 9999 {limit} -j MARK --set-xmark 0x10/0xffffffff\nCOMMIT\n"
        ),
        &format!("*filter\n-A FORWARD -p tcp -m tcp --dport 9999 -m conntrack --ctstate NEW {above} -j DROP\nCOMMIT\n"),
        false,
    );
    let before = node.sh("iptables-legacy-save -t nat | grep -c -- '^-A' || true");
    let held = stale(&node, &["--remove"]);
    assert_eq!(held.status.code(), Some(1), "{}{}", stdout(&held), stderr(&held));
    let said = stdout(&held) + &stderr(&held);
    eprintln!("{said}");
    assert!(
        said.contains("legacy ipv4 nat: cannot tell: what `-A PREROUTING -p tcp -m tcp --dport 9999 -m hashlimit")
            && said.contains("removing it is not proven safe: 1 item that nft holds no twin of"),
        "{said}"
    );
    assert_eq!(
        node.sh("iptables-legacy-save -t nat | grep -c -- '^-A' || true"),
        before
    );
    // Today the stale rule takes the client's first token: stopped.
    let first = topology.probe(&[flow(true, SERVER.v4, 9999)], WAIT)[0];
    assert!(
        !first,
        "the first connection passed though the stale rule took its token"
    );
}

/// A stale `SNAT` of what leaves by `rs` to the router's own address:
/// the server's replies arrive addressed to 10.2.0.1, which raw and
/// mangle PREROUTING see before the kernel undoes the rewrite, and a live
/// raw rule drops them; without the stale copy the replies go to the
/// client's address and pass.
#[test]
fn a_reply_to_a_stale_snat_a_live_raw_rule_drops_holds_with_its_witness() {
    common::root_or_skip!();
    opens(
        "*nat\n-A POSTROUTING -o rs -j SNAT --to-source 10.2.0.1\nCOMMIT\n",
        "*raw\n-A PREROUTING -d 10.2.0.1/32 -i rs -p tcp -j DROP\nCOMMIT\n*filter\n-A INPUT -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n",
        "nat",
        &[
            "the reply to tcp",
            "SNAT --to-source 10.2.0.1 then nft raw PREROUTING rule 1 DROP",
        ],
        flow(true, SERVER.v4, 80),
        "",
    );
}

/// A stale `REDIRECT` of the router's :8080 to its :22: the replies
/// leave from :22, which a live OUTPUT rule drops; without the stale copy
/// the connection reaches :8080 and its replies leave from there.
#[test]
fn a_reply_to_a_stale_redirect_a_live_output_rule_drops_holds_with_its_witness() {
    common::root_or_skip!();
    opens(
        "*nat\n-A PREROUTING -p tcp -m tcp --dport 8080 -j REDIRECT --to-ports 22\nCOMMIT\n",
        "*filter\n-A OUTPUT -p tcp -m tcp --sport 22 -j DROP\n-A INPUT -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n",
        "nat",
        &[
            "the reply to tcp",
            "REDIRECT --to-ports 22 then nft filter OUTPUT rule 1 DROP",
        ],
        flow(true, ROUTER.v4, 8080),
        "",
    );
}

/// What the model assumes of nat: a nat table alone (iptables-nft's, with
/// only a `MARK`) keeps no connection tracking on, so no packet meets it;
/// a rule whose row keeps it on does. Read from the kernel's own table of
/// connections after a datagram through the router.
#[test]
fn a_nat_table_alone_keeps_no_connection_tracking_on() {
    common::root_or_skip!();
    for (nft, tracked) in [
        (
            "*nat\n-A PREROUTING -p udp -j MARK --set-xmark 0x1/0x1\nCOMMIT\n",
            false,
        ),
        (
            "*filter\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n",
            true,
        ),
    ] {
        let (node, topology) = router("", nft, false);
        let udp = flow(false, SERVER.v4, 9999);
        assert!(topology.probe(&[udp], WAIT)[0], "{udp}");
        let entries = node.sh("conntrack -L 2>/dev/null | grep -c 'dport=9999' || true");
        assert_eq!(entries.trim() != "0", tracked, "{nft}: {entries} entries");
    }
}

/// A stale nat `MARK` that a live `ACCEPT` reads (`! --mark`) before the
/// live `DROP` policy: today the mark keeps the packet from the accept,
/// and the policy drops it; without the stale copy it is accepted. No
/// live rule blocks, so the packet tried is the stale rule's with what
/// the live accept names.
#[test]
fn a_stale_nat_mark_a_live_accept_reads_before_a_drop_policy_holds_with_its_witness() {
    common::root_or_skip!();
    opens(
        "*nat\n-A PREROUTING -p tcp -m tcp --dport 80 -j MARK --set-xmark 0x10/0xffffffff\nCOMMIT\n",
        "*filter\n:FORWARD DROP [0:0]\n-A FORWARD -m state --state RELATED,ESTABLISHED -j ACCEPT\n-A FORWARD -s 10.1.0.5/32 -m mark ! --mark 0x10 -j ACCEPT\nCOMMIT\n",
        "nat",
        &[
            "tcp 10.1.0.5 → any:80, forwarded",
            "then nft filter FORWARD policy DROP; after: passes nft filter FORWARD rule 2 ACCEPT",
        ],
        flow(true, SERVER.v4, 80),
        "",
    );
}

/// A stale drop of tcp/8080 where the live copy drops what the router
/// sends from :8080: removing it lets the connection's first packet in,
/// and the witness says its reply stays dropped (no exchange completes).
/// Another stale drop whose reply passes after is the witness where
/// there is one.
#[test]
fn a_witness_whose_reply_is_dropped_after_says_so_and_arrives() {
    common::root_or_skip!();
    let live = "*filter\n-A OUTPUT -p tcp -m tcp --sport 8080 -j DROP\nCOMMIT\n";
    held_by(
        OPENS,
        Sent {
            reply_stopped: true,
            ..Sent::default()
        },
        "*filter\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n",
        live,
        "filter",
        &[
            " → any:8080, arriving for the host",
            "after: passes (no rule meets it), but its reply is dropped nft filter OUTPUT rule 1 DROP",
        ],
        flow(true, ROUTER.v4, 8080),
        "",
    );
    held_by(
        OPENS,
        Sent::default(),
        "*filter\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\n-A INPUT -p tcp -m tcp --dport 22 -j DROP\nCOMMIT\n",
        live,
        "filter",
        &[" → any:22, arriving for the host", "after: passes (no rule meets it))"],
        flow(true, ROUTER.v4, 22),
        "",
    );
}

/// What the router sends itself comes back by `lo` to INPUT: a stale SNAT
/// in POSTROUTING makes it `--ctstate SNAT` there, which the live copy
/// drops; removing it opens tcp/8080 from 127.0.0.1 to 127.0.0.1.
#[test]
fn what_the_host_sends_itself_after_a_stale_snat_holds_with_its_witness() {
    common::root_or_skip!();
    held_by(
        OPENS,
        Sent {
            by_the_router: true,
            ..Sent::default()
        },
        "*nat\n-A POSTROUTING -p tcp -m tcp --dport 8080 -j SNAT --to-source 10.2.0.1\nCOMMIT\n",
        "*filter\n:INPUT DROP [0:0]\n-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A INPUT -m conntrack --ctstate SNAT -j DROP\n-A INPUT -p tcp -j ACCEPT\nCOMMIT\n",
        "nat",
        &["tcp 127.0.0.1 → 127.0.0.1:8080, sent by the host", "nft filter INPUT rule 2 DROP", "after: passes"],
        flow(true, "127.0.0.1", 8080),
        "",
    );
}

/// A live `DNAT` to where a packet already goes rewrites nothing, so the
/// kernel does not count it (`--ctstate DNAT` does not match): the reply
/// of what the stale SNAT rewrote is what the live copy drops.
#[test]
fn a_live_dnat_to_where_a_packet_goes_sets_no_dnat_state() {
    common::root_or_skip!();
    held_by(
        OPENS,
        Sent::default(),
        "*nat\n-A POSTROUTING -p tcp -m tcp --dport 8080 -j SNAT --to-source 10.2.0.1\nCOMMIT\n",
        "*nat\n-A PREROUTING -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.2.0.2:8080\nCOMMIT\n*filter\n-A FORWARD -m conntrack --ctstate SNAT -j DROP\n-A FORWARD -m conntrack --ctstate DNAT -j DROP\nCOMMIT\n",
        "nat",
        &["the reply to tcp any → 10.2.0.2:8080, forwarded", "after: passes"],
        flow(true, SERVER.v4, 8080),
        "",
    );
}

/// The order of the two copies is the kernel's per hook: nft's nat
/// PREROUTING made first runs last, legacy's nat after it, then nft's
/// POSTROUTING runs first. Only that mixed order stops tcp/8080 (the
/// legacy DNAT binds, so the live MARK is skipped, so the live SNAT binds
/// and mangle drops the reply to its address); the witness names it.
#[test]
fn a_packet_stopped_only_in_a_mixed_order_holds_with_its_witness() {
    common::root_or_skip!();
    let setup = "printf '*nat\\n:PREROUTING ACCEPT [0:0]\\n-A PREROUTING -p tcp -m tcp --dport 8080 -j MARK --set-xmark 0x1/0xffffffff\\nCOMMIT\\n' | iptables-nft-restore
printf '*nat\\n-A PREROUTING -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.2.0.2:8080\\n-A POSTROUTING -p tcp -m tcp --dport 8080 -j SNAT --to-source 10.1.0.5\\nCOMMIT\\n' | iptables-legacy-restore
printf '*nat\\n:POSTROUTING ACCEPT [0:0]\\n-A POSTROUTING -p tcp -m tcp --dport 8080 -m mark ! --mark 0x1 -j SNAT --to-source 10.2.0.1\\nCOMMIT\\n*mangle\\n-A PREROUTING -d 10.2.0.1/32 -p tcp -m tcp --sport 8080 -j DROP\\nCOMMIT\\n' | iptables-nft-restore --noflush";
    held_by(
        OPENS,
        Sent {
            router_setup: setup,
            ..Sent::default()
        },
        "",
        "",
        "nat",
        &[
            "the reply to tcp any → ",
            ":8080, forwarded",
            "legacy first at PREROUTING, nft first at POSTROUTING",
            "after: passes",
        ],
        flow(true, SERVER.v4, 8080),
        "",
    );
}

/// A stale DNAT of :9999 to :8080, nothing live reading either: removing
/// it changes where tcp/9999 goes (it holds nothing, and goes). `stale`
/// lists the change with its packet, and packets show it: before, what is
/// sent to :9999 arrives at the server's :8080; after, at :9999.
#[test]
fn a_stale_redirect_is_listed_as_a_change_and_goes() {
    common::root_or_skip!();
    let (node, topology) = router(
        "*nat\n-A PREROUTING -d 10.2.0.2/32 -p tcp -m tcp --dport 9999 -j DNAT --to-destination 10.2.0.2:8080\nCOMMIT\n",
        "*filter\n-A FORWARD -p tcp -m tcp --dport 22 -j DROP\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n",
        false,
    );
    let said = stdout(&stale(&node, &[]));
    let line = said
        .lines()
        .find(|l| l.contains("removing it changes, holding nothing: "))
        .unwrap_or_else(|| panic!("no change shown:\n{said}"));
    assert!(line.contains("tcp any → 10.2.0.2:9999, forwarded"), "{line}");
    assert!(
        line.contains("now: passes legacy nat PREROUTING rule 1 DNAT --to-destination 10.2.0.2:8080"),
        "{line}"
    );
    let report = json(&stale(&node, &["--json"]));
    let nat = report["findings"][0]["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "nat")
        .unwrap()
        .clone();
    assert!(
        nat["change"]["packet"]
            .as_str()
            .unwrap_or_default()
            .contains("10.2.0.2:9999"),
        "{nat}"
    );
    let arrives_at = |port: u16| {
        let to_9999 = flow(true, SERVER.v4, 9999);
        let client = &topology.client;
        common::arrival::arrived(
            &topology.server,
            true,
            flow(true, SERVER.v4, port).to,
            WAIT,
            move || {
                client.enter();
                let _ = to_9999.answered(WAIT);
            },
        )
    };
    assert_eq!([arrives_at(8080), arrives_at(9999)], [true, false], "before");
    let removed = stale(&node, &["--remove"]);
    assert_eq!(
        removed.status.code(),
        Some(0),
        "{}{}",
        stdout(&removed),
        stderr(&removed)
    );
    node.sh("conntrack -F 2>/dev/null || true");
    assert_eq!([arrives_at(8080), arrives_at(9999)], [false, true], "after");
}

/// A live MARK that spares the client's prefix (`! -s 10.1.0.0/24`): from
/// inside it, the stale DNAT to :8080 (legacy made last, so run first)
/// meets the live drop of :8080; removing it lets tcp/80 through.
#[test]
fn a_packet_from_inside_an_excluded_prefix_holds_with_its_witness() {
    common::root_or_skip!();
    let mark =
        "-A PREROUTING -d 10.2.0.2/32 ! -s 10.1.0.0/24 -p tcp -m tcp --dport 80 -j MARK --set-xmark 0x4000/0x4000";
    let legacy = format!("*nat\\n{mark}\\n-A PREROUTING -d 10.2.0.2/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.2.0.2:8080\\nCOMMIT\\n");
    let setup = format!("printf '{legacy}' | iptables-legacy-restore");
    held_by(
        OPENS,
        Sent {
            router_setup: &setup,
            ..Sent::default()
        },
        "",
        &format!("*nat\n{mark}\n-A PREROUTING -d 10.2.0.2/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.2.0.2:80\nCOMMIT\n*filter\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\n-A FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT\n-A FORWARD -d 10.2.0.2/32 -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n"),
        "nat",
        &["tcp 10.1.0.0 → 10.2.0.2:80, forwarded", "legacy first at each hook", "after: passes"],
        flow(true, SERVER.v4, 80),
        "",
    );
}

/// The reply to what a stale SNAT sent from the router's address comes
/// back to that address from :80, which a live raw rule drops.
#[test]
fn a_reply_to_a_stale_snat_dropped_by_address_and_port_holds_with_its_witness() {
    common::root_or_skip!();
    opens(
        "*nat\n-A POSTROUTING -o rs -j SNAT --to-source 10.2.0.1\nCOMMIT\n",
        "*raw\n-A PREROUTING -d 10.2.0.1/32 -p tcp -m tcp --sport 80 -j DROP\nCOMMIT\n*filter\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n",
        "nat",
        &["the reply to tcp any → any:80, forwarded", "after: passes"],
        flow(true, SERVER.v4, 80),
        "",
    );
}
