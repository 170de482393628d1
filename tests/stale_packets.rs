//! `stale --remove` proven by packets: random states from a grammar of
//! realistic rules (tests/common/rule_grammar.rs), each in real namespaces
//! (a client, a forwarding router holding both backends, a server), probe
//! flows before and after the removal; and fixed cases, one per known way
//! a removal judged rule by rule opened a flow or split a backend
//! (`known_opening_*`, each runnable alone: `cargo test --test
//! stale_packets known_opening_ttl`), and a stale DNAT into a live block,
//! once a documented limit, held by its witness. What each state must keep is in
//! tests/common/packet_run.rs.
//!
//! `IPTW_STALE_STATES=N` runs N random states (default 200), from
//! `IPTW_STALE_SEED=S` (default: from the clock; printed, and each failure
//! names its own state's seed to replay it alone), on
//! `IPTW_STALE_WORKERS` threads at once (default 3).

mod common;

use common::netns_topology::{Family, Flow, SERVER};
use common::packet_run::{run, Tally};
use common::rule_grammar::{lines, Backend, Line, LiveCopy, Rng, State};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

fn setting(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value}: expected a whole number")),
        Err(_) => default,
    }
}

fn verdict(tally: &Tally) {
    eprintln!("{}", tally.counts());
    for slow in &tally.slow {
        eprintln!("slow before, passed when rebuilt: {slow}");
    }
    assert!(
        tally.failures.is_empty(),
        "{} failures; the first:\n{}",
        tally.failures.len(),
        tally
            .failures
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n=====\n")
    );
}

#[test]
fn generated_states_never_open_a_flow() {
    common::root_or_skip!();
    let count = setting("IPTW_STALE_STATES", 200) as usize;
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let seed = setting("IPTW_STALE_SEED", clock % 1_000_000_000);
    let workers = setting("IPTW_STALE_WORKERS", 3).max(1);
    eprintln!("stale_packets: {count} states from IPTW_STALE_SEED={seed}, {workers} at once");
    let next = AtomicUsize::new(0);
    let tally = Mutex::new(Tally::default());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= count {
                    break;
                }
                let state = State::generate(seed.wrapping_add(index as u64));
                if state.is_empty() {
                    continue;
                }
                let outcome = run(&state);
                tally.lock().unwrap().add(outcome);
            });
        }
    });
    let tally = tally.into_inner().unwrap();
    for failure in &tally.failures {
        eprintln!("=====\n{failure}");
    }
    verdict(&tally);
}

fn tcp(host: &common::netns_topology::Host, family: Family, port: u16) -> Flow {
    Flow {
        tcp: true,
        to: SocketAddr::new(host.of(family).parse().unwrap(), port),
    }
}

/// Runs a fixed case: `blocked` must be stopped before the removal (the
/// case blocks what it means to), and every promise kept.
fn fixed(state: State, blocked: &[Flow]) {
    let tally = run(&state);
    for flow in blocked {
        assert!(
            tally.stopped_before.contains(flow),
            "the case does not stop {flow} before the removal: {:?}",
            tally.stopped_before
        );
    }
    verdict(&tally);
}

/// Something live in the family that changes no flow, so the host link is
/// not contradicted by a live backend holding nothing.
fn live_beside(family: Family) -> Vec<Line> {
    let other = match family {
        Family::V4 => "192.0.2.9",
        Family::V6 => "2001:db8::9",
    };
    lines("filter", &format!("INPUT -s {other} -j ACCEPT"))
}

fn legacy_stale(stale: Vec<Line>, live: Vec<Line>) -> State {
    State::fixed(Backend::Legacy, LiveCopy::Partial, vec![(Family::V4, stale, live)], &[])
}

fn with(mut first: Vec<Line>, table: &'static str, text: &str) -> Vec<Line> {
    first.extend(lines(table, text));
    first
}

#[test]
fn known_opening_sibling_mangle_mark() {
    common::root_or_skip!();
    let stale = with(
        lines("mangle", "PREROUTING -p tcp -m tcp --dport 80 -j MARK --set-mark 0x1"),
        "filter",
        "FORWARD -m mark --mark 0x1 -j DROP",
    );
    fixed(
        legacy_stale(stale, live_beside(Family::V4)),
        &[tcp(&SERVER, Family::V4, 80)],
    );
}

#[test]
fn known_opening_sibling_raw_notrack() {
    common::root_or_skip!();
    let stale = with(
        lines("raw", "PREROUTING -p tcp -m tcp --dport 443 -j CT --notrack"),
        "filter",
        "FORWARD -m conntrack --ctstate UNTRACKED -j DROP",
    );
    fixed(
        legacy_stale(stale, live_beside(Family::V4)),
        &[tcp(&SERVER, Family::V4, 443)],
    );
}

#[test]
fn known_opening_sibling_connmark() {
    common::root_or_skip!();
    let stale = with(
        lines(
            "mangle",
            "PREROUTING -p tcp -m tcp --dport 22 -j CONNMARK --set-mark 0x1",
        ),
        "filter",
        "FORWARD -m connmark --mark 0x1 -j DROP",
    );
    fixed(
        legacy_stale(stale, live_beside(Family::V4)),
        &[tcp(&SERVER, Family::V4, 22)],
    );
}

#[test]
fn known_opening_sibling_nat_dnat() {
    common::root_or_skip!();
    let stale = with(
        lines(
            "nat",
            "PREROUTING -d 10.2.0.2 -p tcp -m tcp --dport 9999 -j DNAT --to-destination 10.2.0.2:8080",
        ),
        "filter",
        "FORWARD -p tcp -m tcp --dport 8080 -j DROP",
    );
    fixed(
        legacy_stale(stale, live_beside(Family::V4)),
        &[tcp(&SERVER, Family::V4, 9999)],
    );
}

#[test]
fn known_opening_live_reader_connmark_save() {
    common::root_or_skip!();
    let stale = lines("mangle", "PREROUTING -p tcp -m tcp --dport 80 -j MARK --set-mark 0x1");
    let live = with(
        lines("mangle", "FORWARD -j CONNMARK --save-mark"),
        "filter",
        "FORWARD -m connmark --mark 0x1 -j DROP",
    );
    fixed(legacy_stale(stale, live), &[tcp(&SERVER, Family::V4, 80)]);
}

#[test]
fn known_opening_live_reader_tos() {
    common::root_or_skip!();
    let stale = lines("mangle", "PREROUTING -p tcp -m tcp --dport 80 -j DSCP --set-dscp 0x2e");
    let live = lines("filter", "FORWARD -m tos --tos 0xb8/0xfc -j DROP");
    fixed(legacy_stale(stale, live), &[tcp(&SERVER, Family::V4, 80)]);
}

#[test]
fn known_opening_unknown_verdict_undone_after_its_twin() {
    common::root_or_skip!();
    // HMARK, a verdict not known to the check, marks 5; the live copy
    // holds its twin, then a MARK that undoes it: only the stale copy's
    // mark reaches the live filter, which blocks port 80 on it.
    let hmark = "PREROUTING -j HMARK --hmark-src-prefix 32 --hmark-rnd 0x00000001 --hmark-mod 1 --hmark-offset 5";
    let live = with(
        with(
            lines("mangle", hmark),
            "mangle",
            "PREROUTING -j MARK --set-xmark 0x0/0xffffffff",
        ),
        "filter",
        "FORWARD -p tcp -m tcp --dport 80 -m mark --mark 0x5 -j DROP",
    );
    fixed(
        legacy_stale(lines("mangle", hmark), live),
        &[tcp(&SERVER, Family::V4, 80)],
    );
}

#[test]
fn known_opening_native_chain_between_the_copies() {
    common::root_or_skip!();
    // The live backend holds the stale one whole, but a native chain made
    // between the two clears the mark after the live copy sets it and
    // before the stale copy sets it again: only the stale copy's mark
    // reaches the filters.
    let marked = with(
        lines(
            "mangle",
            "PREROUTING -p tcp -m tcp --dport 80 -j MARK --set-xmark 0x5/0xffffffff",
        ),
        "filter",
        "FORWARD -m mark --mark 0x5 -j DROP",
    );
    let mut state = State::fixed(
        Backend::Legacy,
        LiveCopy::Whole,
        vec![(Family::V4, marked.clone(), marked)],
        &[],
    );
    state.node.add_between(
        "nft add table inet site && nft add chain inet site pre '{ type filter hook prerouting priority -150; }' && nft add rule inet site pre meta mark set 0".into(),
    );
    fixed(state, &[tcp(&SERVER, Family::V4, 80)]);
}

#[test]
fn known_opening_ip_rule_fwmark() {
    common::root_or_skip!();
    let stale = lines("mangle", "PREROUTING -p tcp -m tcp --dport 80 -j MARK --set-mark 0x1");
    let mut state = legacy_stale(stale, live_beside(Family::V4));
    state.node.add("ip -4 rule add fwmark 0x1 prohibit".into());
    fixed(state, &[tcp(&SERVER, Family::V4, 80)]);
}

#[test]
fn known_opening_ttl_expiry() {
    common::root_or_skip!();
    let state = State::fixed(
        Backend::Legacy,
        LiveCopy::Partial,
        vec![
            (
                Family::V4,
                lines("mangle", "PREROUTING -j TTL --ttl-set 1"),
                live_beside(Family::V4),
            ),
            (
                Family::V6,
                lines("mangle", "PREROUTING -j HL --hl-set 1"),
                live_beside(Family::V6),
            ),
        ],
        &[],
    );
    fixed(state, &[tcp(&SERVER, Family::V4, 443), tcp(&SERVER, Family::V6, 443)]);
}

/// Docker's legacy rules and, in nft, an empty `DOCKER-USER` an admin
/// made: its filter chains and its nat go together or stay together.
#[test]
fn known_opening_empty_writer_chain() {
    common::root_or_skip!();
    let mut rng = Rng::new(0);
    let mut node = common::rule_grammar::NodeSetup::default();
    let docker = common::rule_motifs::docker(&mut rng, &mut Rng::new(0), Family::V4, &mut node);
    let live = with(live_beside(Family::V4), "filter", "-N DOCKER-USER");
    fixed(legacy_stale(docker, live), &[]);
}

/// A ferm-like hand-written firewall: DROP policies, an accept list, a
/// port forward (the router's 8080 to the server's 80) and a block.
#[test]
fn known_opening_ferm_firewall() {
    common::root_or_skip!();
    let filter = lines(
        "filter",
        ":INPUT DROP
:FORWARD DROP
INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
INPUT -i lo -j ACCEPT
INPUT -p icmp -j ACCEPT
INPUT -p tcp -m tcp --dport 22 -j ACCEPT
FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
FORWARD -d 10.2.0.2 -p tcp -m tcp --dport 80 -j ACCEPT
FORWARD -p tcp -m tcp --dport 9999 -j ACCEPT",
    );
    let stale = with(
        filter,
        "nat",
        "PREROUTING -d 10.1.0.1 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 10.2.0.2:80
PREROUTING -d 10.2.0.2 -p tcp -m tcp --dport 443 -j DNAT --to-destination 10.2.0.2:9999
POSTROUTING -o rs -j MASQUERADE",
    );
    fixed(
        legacy_stale(stale, lines("filter", "FORWARD -s 192.0.2.9 -j DROP")),
        &[tcp(&SERVER, Family::V4, 8080)],
    );
}

/// A Calico-like upgrade: the same `cali-` chains reading the node's
/// ipsets in both backends, both families: removed, every rule having its
/// twin.
#[test]
fn known_opening_ipset_calico_wholly_copied() {
    common::root_or_skip!();
    let mut node = common::rule_grammar::NodeSetup::default();
    let mut families = Vec::new();
    for family in [Family::V4, Family::V6] {
        let calico = common::rule_motifs::calico(&mut Rng::new(7), &mut Rng::new(7), family, &mut node);
        families.push((family, calico.clone(), calico));
    }
    let mut state = State::fixed(Backend::Legacy, LiveCopy::Whole, families, &[]);
    state.node = node;
    fixed(state, &[]);
}

/// Similar accept lists before the same block: the live one accepts the
/// client's network, the stale one another address, so the stale block
/// stops the client and removing it would open the port.
#[test]
fn known_opening_similar_accepts_before_a_block() {
    common::root_or_skip!();
    let stale = lines(
        "filter",
        "FORWARD -s 192.168.0.1/32 -j ACCEPT
FORWARD -p tcp -m tcp --dport 80 -j DROP",
    );
    let live = lines(
        "filter",
        "FORWARD -s 10.0.0.0/8 -j ACCEPT
FORWARD -p tcp -m tcp --dport 80 -j DROP",
    );
    fixed(legacy_stale(stale, live), &[tcp(&SERVER, Family::V4, 80)]);
}

/// Once the documented limit: a stale-only DNAT (9999 to 8080) steering a
/// flow into a live block of 8080, whose removal let 9999 through as it is.
/// The fates find the witness (tcp to 9999), so the family is held.
#[test]
fn stale_dnat_into_a_live_block_is_held_by_its_witness() {
    common::root_or_skip!();
    let stale = lines(
        "nat",
        "PREROUTING -d 10.2.0.2 -p tcp -m tcp --dport 9999 -j DNAT --to-destination 10.2.0.2:8080",
    );
    // The live conntrack rule keeps defragmentation on without the DNAT.
    let live = with(
        lines("filter", "FORWARD -p tcp -m tcp --dport 8080 -j DROP"),
        "filter",
        "FORWARD -m conntrack --ctstate INVALID -j DROP",
    );
    let tally = run(&legacy_stale(stale, live));
    verdict(&tally);
    assert_eq!((tally.held, tally.nat_limit_flows), (1, 0), "{}", tally.counts());
}
