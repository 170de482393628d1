//! The motifs of the rule grammar: each one a coherent piece of a
//! firewall as a writer or an admin writes it (a block behind an accept
//! list, a mark set in `mangle` and read in `filter` or by a routing rule,
//! a DNAT and a filter behind it, a Docker-like or Calico-like writer's
//! chains), aimed at the probe flows of the topology. It decides which
//! words each rule holds.

use super::netns_topology::{Family, ROUTER, ROUTER_TCP, ROUTER_UDP, SERVER, SERVER_TCP, SERVER_UDP};
use super::rule_grammar::{lines, Line, NodeSetup, Rng};

fn in_family<'a>(family: Family, v4: &'a str, v6: &'a str) -> &'a str {
    match family {
        Family::V4 => v4,
        Family::V6 => v6,
    }
}

/// Sources an accept list picks from: the client's address, networks
/// holding it, and addresses near it that do not.
fn source(rng: &mut Rng, family: Family) -> &'static str {
    match family {
        Family::V4 => rng.pick(&[
            "10.1.0.5",
            "10.1.0.0/24",
            "10.0.0.0/8",
            "192.168.0.1",
            "172.16.0.0/12",
            "10.1.0.7",
        ]),
        Family::V6 => rng.pick(&[
            "fd00:1::5",
            "fd00:1::/64",
            "fd00::/8",
            "fd00:9::1",
            "2001:db8::/32",
            "fd00:1::7",
        ]),
    }
}

fn mark(rng: &mut Rng) -> &'static str {
    rng.pick(&["0x1", "0x2", "0x4"])
}

/// Where a motif aims: a probe flow's chain, protocol and port.
struct Aim {
    chain: &'static str,
    proto: &'static str,
    port: u16,
}

impl Aim {
    fn new(rng: &mut Rng, forwarded_only: bool) -> Aim {
        let tcp = rng.chance(65);
        let (chain, ports) = if !forwarded_only && rng.chance(30) {
            ("INPUT", if tcp { &ROUTER_TCP[..] } else { &ROUTER_UDP[..] })
        } else {
            ("FORWARD", if tcp { &SERVER_TCP[..] } else { &SERVER_UDP[..] })
        };
        Aim {
            chain,
            proto: if tcp { "tcp" } else { "udp" },
            port: rng.pick(ports),
        }
    }

    /// `-p tcp -m tcp --dport 80`.
    fn matches(&self) -> String {
        format!("-p {0} -m {0} --dport {1}", self.proto, self.port)
    }
}

pub fn accept_list(rng: &mut Rng, detail: &mut Rng, family: Family, _: &mut NodeSetup) -> Vec<Line> {
    let aim = Aim::new(rng, false);
    let chain = aim.chain;
    let mut text = String::new();
    for _ in 0..1 + rng.below(2) {
        text += &format!("{chain} -s {} -j ACCEPT\n", source(detail, family));
    }
    match rng.below(3) {
        0 => text += &format!("{chain} {} -j DROP\n", aim.matches()),
        1 => text += &format!("{chain} {} -j REJECT\n", aim.matches()),
        _ => {
            let icmp = in_family(family, "icmp", "ipv6-icmp");
            text = format!("{chain} -p {icmp} -j ACCEPT\n{text}:{chain} DROP\n");
        }
    }
    lines("filter", &text)
}

pub fn conntrack_states(rng: &mut Rng, _: &mut Rng, _: Family, _: &mut NodeSetup) -> Vec<Line> {
    let aim = Aim::new(rng, false);
    let chain = aim.chain;
    let mut text = format!("{chain} -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n");
    if rng.chance(50) {
        text += &format!("{chain} -m state --state INVALID -j DROP\n");
    }
    if rng.chance(50) {
        text += &format!("{chain} -m conntrack --ctstate NEW {} -j DROP\n", aim.matches());
    }
    lines("filter", &text)
}

pub fn mark_filter(rng: &mut Rng, detail: &mut Rng, _: Family, _: &mut NodeSetup) -> Vec<Line> {
    let aim = Aim::new(rng, false);
    let mark = mark(detail);
    let set = if rng.chance(50) {
        format!("--set-mark {mark}")
    } else {
        format!("--set-xmark {mark}/{mark}")
    };
    let mut all = lines("mangle", &format!("PREROUTING {} -j MARK {set}", aim.matches()));
    all.extend(lines("filter", &format!("{} -m mark --mark {mark} -j DROP", aim.chain)));
    all
}

/// A mark read by a filter, and a native nftables chain clearing marks
/// at mangle's hook and priority, made between the two backends: it runs
/// after the live copy's mark and before the stale copy's, so only the
/// stale copy's mark reaches the filter.
pub fn native_between(rng: &mut Rng, detail: &mut Rng, family: Family, node: &mut NodeSetup) -> Vec<Line> {
    let all = mark_filter(rng, detail, family, node);
    node.add_between(
        "nft add table inet native && nft add chain inet native pre '{ type filter hook prerouting priority -150; }' && nft add rule inet native pre meta mark set 0"
            .into(),
    );
    all
}

pub fn connmark(rng: &mut Rng, detail: &mut Rng, _: Family, _: &mut NodeSetup) -> Vec<Line> {
    let aim = Aim::new(rng, false);
    let mark = mark(detail);
    let m = aim.matches();
    let (mangle, reader) = match rng.below(3) {
        0 => (format!("PREROUTING {m} -j CONNMARK --set-mark {mark}"), "connmark"),
        1 => (
            format!("PREROUTING {m} -j MARK --set-mark {mark}\nPREROUTING -j CONNMARK --save-mark"),
            "connmark",
        ),
        _ => (
            format!("PREROUTING -j CONNMARK --restore-mark\nPREROUTING {m} -j CONNMARK --set-mark {mark}"),
            "mark",
        ),
    };
    let mut all = lines("mangle", &mangle);
    all.extend(lines(
        "filter",
        &format!("{} -m {reader} --mark {mark} -j DROP", aim.chain),
    ));
    all
}

pub fn notrack(rng: &mut Rng, _: &mut Rng, _: Family, _: &mut NodeSetup) -> Vec<Line> {
    let aim = Aim::new(rng, false);
    let target = rng.pick(&["CT --notrack", "NOTRACK"]);
    let reader = rng.pick(&["-m conntrack --ctstate UNTRACKED", "-m state --state UNTRACKED"]);
    let mut all = lines("raw", &format!("PREROUTING {} -j {target}", aim.matches()));
    all.extend(lines("filter", &format!("{} {reader} -j DROP", aim.chain)));
    all
}

pub fn dnat(rng: &mut Rng, _: &mut Rng, family: Family, _: &mut NodeSetup) -> Vec<Line> {
    let server = SERVER.of(family);
    let to = in_family(family, server, "[fd00:2::2]");
    let mut all = match rng.below(3) {
        0 => lines(
            "nat",
            &format!("PREROUTING -d {server} -p tcp -m tcp --dport 9999 -j DNAT --to-destination {to}:8080"),
        ),
        1 => lines(
            "nat",
            &format!("PREROUTING -d {server} -p udp -m udp --dport 9999 -j DNAT --to-destination {to}:53"),
        ),
        _ => lines(
            "nat",
            &format!(
                "PREROUTING -d {} -p tcp -m tcp --dport 8080 -j REDIRECT --to-ports 22",
                ROUTER.of(family)
            ),
        ),
    };
    let blocked = match &all[0] {
        Line::Rule { rule, .. } if rule.contains("REDIRECT") => "INPUT -p tcp -m tcp --dport 22 -j DROP",
        Line::Rule { rule, .. } if rule.contains("udp") => "FORWARD -p udp -m udp --dport 53 -j DROP",
        _ => "FORWARD -p tcp -m tcp --dport 8080 -j DROP",
    };
    if rng.chance(60) {
        all.extend(lines("filter", blocked));
    }
    if rng.chance(30) {
        all.extend(lines("nat", "POSTROUTING -o rs -j MASQUERADE"));
    }
    all
}

pub fn ttl(rng: &mut Rng, _: &mut Rng, family: Family, _: &mut NodeSetup) -> Vec<Line> {
    let aim = Aim::new(rng, true);
    let target = in_family(family, "TTL --ttl-set 1", "HL --hl-set 1");
    lines("mangle", &format!("PREROUTING {} -j {target}", aim.matches()))
}

pub fn dscp(rng: &mut Rng, _: &mut Rng, _: Family, _: &mut NodeSetup) -> Vec<Line> {
    let aim = Aim::new(rng, false);
    let target = rng.pick(&["DSCP --set-dscp 0x2e", "TOS --set-tos 0xb8/0xfc"]);
    let reader = rng.pick(&["-m dscp --dscp 0x2e", "-m tos --tos 0xb8/0xfc"]);
    let mut all = lines("mangle", &format!("PREROUTING {} -j {target}", aim.matches()));
    all.extend(lines("filter", &format!("{} {reader} -j DROP", aim.chain)));
    all
}

/// The ipset of a family (the node's, read by both backends).
fn block_set(rng: &mut Rng, family: Family, node: &mut NodeSetup, name: &str) {
    let inet = in_family(family, "inet", "inet6");
    node.add(format!("ipset create {name} hash:net family {inet} -exist"));
    for _ in 0..1 + rng.below(2) {
        node.add(format!("ipset add {name} {} -exist", source(rng, family)));
    }
}

pub fn ipset(rng: &mut Rng, detail: &mut Rng, family: Family, node: &mut NodeSetup) -> Vec<Line> {
    let name = in_family(family, "iptw-block4", "iptw-block6");
    block_set(detail, family, node, name);
    let aim = Aim::new(rng, false);
    let (chain, m) = (aim.chain, aim.matches());
    let text = match rng.below(3) {
        0 => format!("{chain} -m set --match-set {name} src -j DROP"),
        1 => format!("{chain} -m set --match-set {name} src -j ACCEPT\n{chain} {m} -j DROP"),
        _ => format!("{chain} {m} -j SET --add-set {name} src\n{chain} -m set --match-set {name} src -j DROP"),
    };
    lines("filter", &text)
}

pub fn user_chain(rng: &mut Rng, detail: &mut Rng, family: Family, _: &mut NodeSetup) -> Vec<Line> {
    let aim = Aim::new(rng, false);
    let name = rng.pick(&["FW-IN", "FW-FWD", "ferm-filter"]);
    let how = rng.pick(&["-j", "-g"]);
    let entry = rng.pick(&["", "-p tcp ", "-p udp "]);
    let mut text = format!("{} {entry}{how} {name}\n", aim.chain);
    for _ in 0..1 + rng.below(3) {
        text += &match rng.below(5) {
            0 => format!("{name} -s {} -j RETURN\n", source(detail, family)),
            1 => format!("{name} -s {} -j ACCEPT\n", source(detail, family)),
            2 => format!("{name} {} -j DROP\n", aim.matches()),
            3 => format!("{name} -j LOG --log-prefix fw\n"),
            _ => format!("{name} {} -j REJECT\n", Aim::new(rng, false).matches()),
        };
    }
    lines("filter", &text)
}

pub fn security(rng: &mut Rng, _: &mut Rng, _: Family, _: &mut NodeSetup) -> Vec<Line> {
    let aim = Aim::new(rng, false);
    let state = if rng.chance(50) {
        "-m conntrack --ctstate NEW "
    } else {
        ""
    };
    lines("security", &format!("{} {state}{} -j DROP", aim.chain, aim.matches()))
}

pub fn fwmark_route(rng: &mut Rng, detail: &mut Rng, family: Family, node: &mut NodeSetup) -> Vec<Line> {
    let aim = Aim::new(rng, true);
    let mark = mark(detail);
    let ip = in_family(family, "ip -4", "ip -6");
    if rng.chance(50) {
        node.add(format!("{ip} rule add fwmark {mark} prohibit"));
    } else {
        node.add(format!("{ip} route add blackhole default table 100"));
        node.add(format!("{ip} rule add fwmark {mark} table 100"));
    }
    lines(
        "mangle",
        &format!("PREROUTING {} -j MARK --set-mark {mark}", aim.matches()),
    )
}

pub fn harmless(rng: &mut Rng, detail: &mut Rng, family: Family, _: &mut NodeSetup) -> Vec<Line> {
    let aim = Aim::new(rng, false);
    let table = rng.pick(&["filter", "mangle", "raw"]);
    let chain = if table == "raw" { "PREROUTING" } else { aim.chain };
    let text = match rng.below(3) {
        0 => format!("{chain} -j LOG --log-prefix iptw"),
        1 => format!(
            "{chain} -s {} -m comment --comment iptw-note -j ACCEPT",
            source(detail, family)
        ),
        _ => format!("{chain} -s {} -j RETURN", source(detail, family)),
    };
    lines(table, &text)
}

/// Docker's rules for one published port (the router's 8080 to the
/// server's 80), its chains, and its `FORWARD DROP`.
pub fn docker(_: &mut Rng, _: &mut Rng, family: Family, _: &mut NodeSetup) -> Vec<Line> {
    let server = SERVER.of(family);
    let to = in_family(family, server, "[fd00:2::2]");
    let loopback = in_family(family, "127.0.0.0/8", "::1/128");
    let network = in_family(family, "10.2.0.0/24", "fd00:2::/64");
    let mut all = lines(
        "nat",
        &format!(
            "PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
OUTPUT ! -d {loopback} -m addrtype --dst-type LOCAL -j DOCKER
POSTROUTING -s {network} ! -o rs -j MASQUERADE
DOCKER -i rs -j RETURN
DOCKER ! -i rs -p tcp -m tcp --dport 8080 -j DNAT --to-destination {to}:80"
        ),
    );
    all.extend(lines(
        "filter",
        &format!(
            ":FORWARD DROP
FORWARD -j DOCKER-USER
FORWARD -j DOCKER-ISOLATION-STAGE-1
FORWARD -o rs -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
FORWARD -o rs -j DOCKER
FORWARD -i rs ! -o rs -j ACCEPT
FORWARD -i rs -o rs -j ACCEPT
DOCKER -d {server} ! -i rs -o rs -p tcp -m tcp --dport 80 -j ACCEPT
DOCKER-ISOLATION-STAGE-1 -i rs ! -o rs -j DOCKER-ISOLATION-STAGE-2
DOCKER-ISOLATION-STAGE-1 -j RETURN
DOCKER-ISOLATION-STAGE-2 -o rs -j DROP
DOCKER-ISOLATION-STAGE-2 -j RETURN
DOCKER-USER -j RETURN"
        ),
    ));
    all
}

/// Calico-like chains: `cali-` chains reached from the built-in ones, a
/// blocked set (the node's ipset) and Calico's accept mark.
pub fn calico(_: &mut Rng, detail: &mut Rng, family: Family, node: &mut NodeSetup) -> Vec<Line> {
    let set = in_family(family, "cali40s:blocked", "cali60s:blocked");
    block_set(detail, family, node, set);
    let mut all = lines(
        "mangle",
        "PREROUTING -j cali-PREROUTING
cali-PREROUTING -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
cali-PREROUTING -m mark --mark 0x10000/0x10000 -j ACCEPT",
    );
    all.extend(lines(
        "filter",
        &format!(
            "INPUT -j cali-INPUT
FORWARD -j cali-FORWARD
cali-INPUT -m set --match-set {set} src -j DROP
cali-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
cali-FORWARD -m set --match-set {set} src -j DROP
cali-FORWARD -m mark --mark 0x10000/0x10000 -j ACCEPT"
        ),
    ));
    all
}

/// A block behind a match that keeps state: its own (`limit`, `statistic`,
/// `connlimit`) or shared by name (`hashlimit`, a `recent` list another
/// rule sets). Each is drawn so that it matches every probe packet, so the
/// block stops its flow whatever the timing.
pub fn stateful_block(rng: &mut Rng, detail: &mut Rng, _: Family, _: &mut NodeSetup) -> Vec<Line> {
    let aim = Aim::new(rng, false);
    let (chain, matches) = (aim.chain, aim.matches());
    let name = detail.pick(&["A", "B", "C"]);
    let text = match rng.below(5) {
        0 => format!("{chain} {matches} -m limit --limit 10000/sec --limit-burst 10000 -j DROP\n"),
        1 => format!("{chain} {matches} -m statistic --mode nth --every 1 --packet 0 -j DROP\n"),
        2 => format!("{chain} {matches} -m connlimit --connlimit-above 0 -j DROP\n"),
        3 => format!("{chain} {matches} -m hashlimit --hashlimit-upto 10000/sec --hashlimit-burst 10000 --hashlimit-name iptw{name} -j DROP\n"),
        _ => format!("{chain} {matches} -m recent --name iptw{name} --set\n{chain} {matches} -m recent --name iptw{name} --rcheck -j DROP\n"),
    };
    lines("filter", &text)
}
