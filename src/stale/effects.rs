//! The one table of what each iptables match and target does, as far as
//! removing a stale rule asks: what it does to the packets it meets, the
//! state it keeps or writes that another rule can read, what it keeps on
//! in its family, and whether it goes without a twin in `nat`. Every
//! judgement of a name in `stale --remove` is read from [`EFFECTS`] by the
//! principles in [`super::opening`]; a name not in it takes the strictest
//! row ([`UNLISTED_MATCH`], [`UNLISTED_TARGET`]). `docs/mixed-state.md`
//! holds the same table, written from this one (a test fails
//! when they differ).

/// Whether a row is a match (`-m NAME`) or a target (`-j NAME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Match,
    Target,
}

/// What a name does to the packets it meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Does {
    /// A match: reads the packet, its connection or a mark.
    Reads,
    /// Logs or traces; the chain goes on with the packet unchanged.
    Observes,
    /// Ends the packet's evaluation in this chain and its callers.
    Accepts,
    /// Ends this chain; the caller goes on (in a built-in chain: the policy).
    Returns,
    /// Ends the chain and drops the packet (with or without an answer).
    Blocks,
    /// Ends the chain and hands the packet to a queue: a program decides;
    /// with none listening, the kernel drops it, or with `--queue-bypass`
    /// accepts it. So it is no block where it comes before one.
    Queues,
    /// Rewrites addresses or ports, and ends the chain.
    Translates,
    /// Changes the packet, its connection or kernel state, or does what is
    /// not established here.
    Changes,
}

/// The state a name keeps or writes that a rule can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// None.
    Nothing,
    /// A rate or a count of the rule's own, fed by every packet that
    /// reaches it.
    OwnRule,
    /// Writes what another rule reads (a packet's mark, a connection's label).
    Writes,
    /// Shared by name with every rule naming it (a list, a table, a set).
    ByName,
    /// Not established here.
    NotKnown,
}

/// What a loaded rule keeps on in its family, least first: the kernel
/// counts the rules that need each, reached by a hook or not, and turns it
/// off with the last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kept {
    Nothing,
    /// Defragmentation alone.
    Defrag,
    /// Connection tracking, which defragments for itself.
    Conntrack,
}

/// One row of [`EFFECTS`].
#[derive(Debug)]
pub(super) struct Effect {
    pub(super) name: &'static str,
    pub(super) kind: Kind,
    pub(super) does: Does,
    pub(super) state: State,
    pub(super) keeps_on: Kept,
    /// In `nat`: a target that goes without a twin whatever the rule's
    /// matches (kube-proxy's stale Services: `DNAT` to endpoints long
    /// gone, the `KUBE-MARK-MASQ` and `KUBE-MARK-DROP` marks); a match
    /// whose state by name a rule there may keep without a twin (only read,
    /// as a set; or modelled by the fates, as `recent`'s lists).
    pub(super) goes_in_nat: bool,
    /// A rule that loads it (`-t TABLE` where not filter), as IPv4's
    /// `iptables` takes it; empty where IPv4's kernel loads none (an IPv6
    /// match, one from outside the kernel's tree). The tests load each in
    /// a namespace and ask the kernel what it keeps on.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) example: &'static str,
}

impl Effect {
    /// Keeps no state another rule reads (its own rate or count aside).
    pub(super) fn shares_nothing(&self) -> bool {
        matches!(self.state, State::Nothing | State::OwnRule)
    }

    /// Changes nothing any reader sees: a target that accepts, returns
    /// or only observes.
    pub(super) fn seen_by_none(&self) -> bool {
        matches!(self.does, Does::Observes | Does::Accepts | Does::Returns)
    }

    /// Ends the chain for what it matches, and can only block or queue it.
    pub(super) fn only_ends(&self) -> bool {
        matches!(self.does, Does::Blocks | Does::Queues)
    }
}

use Does::*;
use Kept::{Conntrack, Defrag, Nothing as Off};
use Kind::{Match, Target};
use State::*;

/// A row: name, kind, what it does, its state, what it keeps on, whether
/// it goes in `nat`, an example.
const fn row(
    name: &'static str,
    kind: Kind,
    does: Does,
    state: State,
    keeps_on: Kept,
    goes_in_nat: bool,
    example: &'static str,
) -> Effect {
    Effect {
        name,
        kind,
        does,
        state,
        keeps_on,
        goes_in_nat,
        example,
    }
}

/// A match that reads and keeps or writes nothing another rule reads.
const fn reads(name: &'static str, keeps_on: Kept, example: &'static str) -> Effect {
    row(name, Match, Reads, Nothing, keeps_on, false, example)
}

/// Every match and target the removal knows, each name once.
pub(super) const EFFECTS: &[Effect] = &[
    reads("tcp", Off, "-p tcp -m tcp --dport 9"),
    reads("udp", Off, "-p udp -m udp --dport 9"),
    reads("udplite", Off, ""),
    reads("icmp", Off, "-p icmp -m icmp --icmp-type 8"),
    reads("icmp6", Off, ""),
    reads("icmpv6", Off, ""),
    reads("sctp", Off, "-p sctp -m sctp --dport 9"),
    reads("dccp", Off, "-p dccp -m dccp --dport 9"),
    reads("multiport", Off, "-p tcp -m multiport --dports 9,10"),
    reads("conntrack", Conntrack, "-m conntrack --ctstate NEW"),
    reads("state", Conntrack, "-m state --state NEW"),
    reads("mark", Off, "-m mark --mark 1"),
    reads("connmark", Conntrack, "-m connmark --mark 1"),
    reads("comment", Off, "-m comment --comment x"),
    reads("addrtype", Off, "-m addrtype --dst-type LOCAL"),
    reads("iprange", Off, "-m iprange --src-range 10.0.0.1-10.0.0.9"),
    reads("physdev", Off, "-m physdev --physdev-in x"),
    reads("pkttype", Off, "-m pkttype --pkt-type unicast"),
    reads("mac", Off, "-m mac --mac-source 02:00:00:00:00:01"),
    reads("length", Off, "-m length --length 1000:65535"),
    reads("ttl", Off, "-m ttl --ttl-eq 1"),
    reads("hl", Off, ""),
    reads("tos", Off, "-m tos --tos 0x10"),
    reads("dscp", Off, "-m dscp --dscp 1"),
    reads("ecn", Off, "-p tcp -m ecn --ecn-tcp-cwr"),
    reads("devgroup", Off, "-m devgroup --src-group 1"),
    row("limit", Match, Reads, OwnRule, Off, false, "-m limit --limit 1/sec"),
    row(
        "statistic",
        Match,
        Reads,
        OwnRule,
        Off,
        false,
        "-m statistic --mode nth --every 2 --packet 0",
    ),
    row(
        "connlimit",
        Match,
        Reads,
        OwnRule,
        Conntrack,
        false,
        "-p tcp -m connlimit --connlimit-above 100",
    ),
    reads(
        "connbytes",
        Conntrack,
        "-m connbytes --connbytes 0:1000 --connbytes-dir both --connbytes-mode bytes",
    ),
    reads("helper", Conntrack, "-m helper --helper ftp"),
    reads("owner", Off, "-m owner --uid-owner 0"),
    reads("policy", Off, "-m policy --dir in --pol none"),
    reads("realm", Off, "-m realm --realm 1"),
    reads("cgroup", Off, "-m cgroup --cgroup 1"),
    reads("cpu", Off, "-m cpu --cpu 0"),
    reads("rpfilter", Off, "-t mangle -m rpfilter"),
    reads("string", Off, "-m string --string x --algo bm"),
    reads("u32", Off, "-m u32 --u32 0x0=0x0:0xffffffff"),
    reads("time", Off, "-m time --timestart 00:00"),
    reads("tcpmss", Off, "-p tcp -m tcpmss --mss 1:500"),
    reads("ipv6header", Off, ""),
    reads("frag", Off, ""),
    reads("hbh", Off, ""),
    reads("dst", Off, ""),
    reads("rt", Off, ""),
    reads("esp", Off, "-p esp -m esp --espspi 1"),
    row("recent", Match, Reads, ByName, Off, true, "-m recent --name R --rcheck"),
    row(
        "hashlimit",
        Match,
        Reads,
        ByName,
        Off,
        false,
        "-m hashlimit --hashlimit-upto 1/sec --hashlimit-name HL",
    ),
    row("quota2", Match, Reads, ByName, Off, false, ""),
    row("nfacct", Match, Reads, ByName, Off, false, ""),
    row("set", Match, Reads, ByName, Off, true, "-m set --match-set S src"),
    row(
        "connlabel",
        Match,
        Reads,
        Writes,
        Conntrack,
        false,
        "-m connlabel --label 1",
    ),
    row("socket", Match, Reads, Writes, Defrag, false, "-m socket"),
    row(
        "cluster",
        Match,
        Reads,
        NotKnown,
        Conntrack,
        false,
        "-m cluster --cluster-total-nodes 2 --cluster-local-node 1 --cluster-hash-seed 1",
    ),
    row("ACCEPT", Target, Accepts, Nothing, Off, false, "-j ACCEPT"),
    row("RETURN", Target, Returns, Nothing, Off, false, "-j RETURN"),
    row("LOG", Target, Observes, Nothing, Off, false, "-j LOG"),
    row("NFLOG", Target, Observes, Nothing, Off, false, "-j NFLOG"),
    row("TRACE", Target, Observes, Nothing, Off, false, "-t raw -j TRACE"),
    row("AUDIT", Target, Observes, Nothing, Off, false, "-j AUDIT --type accept"),
    row("DROP", Target, Blocks, Nothing, Off, false, "-j DROP"),
    row("REJECT", Target, Blocks, Nothing, Off, false, "-j REJECT"),
    row(
        "NFQUEUE",
        Target,
        Queues,
        Nothing,
        Off,
        false,
        "-j NFQUEUE --queue-num 1",
    ),
    row("QUEUE", Target, Queues, Nothing, Off, false, "-j QUEUE"),
    row(
        "DNAT",
        Target,
        Translates,
        Nothing,
        Conntrack,
        true,
        "-t nat -j DNAT --to-destination 10.0.0.1",
    ),
    row(
        "SNAT",
        Target,
        Translates,
        Nothing,
        Conntrack,
        true,
        "-t nat -j SNAT --to-source 10.0.0.1",
    ),
    row(
        "MASQUERADE",
        Target,
        Translates,
        Nothing,
        Conntrack,
        true,
        "-t nat -j MASQUERADE",
    ),
    row(
        "REDIRECT",
        Target,
        Translates,
        Nothing,
        Conntrack,
        true,
        "-t nat -p tcp -j REDIRECT --to-ports 9",
    ),
    row(
        "NETMAP",
        Target,
        Translates,
        Nothing,
        Conntrack,
        true,
        "-t nat -j NETMAP --to 10.0.0.0/24",
    ),
    row(
        "MARK",
        Target,
        Changes,
        Nothing,
        Off,
        true,
        "-t mangle -j MARK --set-mark 1",
    ),
    row(
        "CONNMARK",
        Target,
        Changes,
        Nothing,
        Conntrack,
        false,
        "-t mangle -j CONNMARK --set-mark 1",
    ),
    row(
        "DSCP",
        Target,
        Changes,
        Nothing,
        Off,
        false,
        "-t mangle -j DSCP --set-dscp 1",
    ),
    row(
        "TOS",
        Target,
        Changes,
        Nothing,
        Off,
        false,
        "-t mangle -j TOS --set-tos 0x10",
    ),
    row(
        "TTL",
        Target,
        Changes,
        Nothing,
        Off,
        false,
        "-t mangle -j TTL --ttl-set 9",
    ),
    row("HL", Target, Changes, Nothing, Off, false, ""),
    row(
        "TCPMSS",
        Target,
        Changes,
        Nothing,
        Off,
        false,
        "-t mangle -p tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu",
    ),
    row(
        "CLASSIFY",
        Target,
        Changes,
        Nothing,
        Off,
        false,
        "-t mangle -j CLASSIFY --set-class 1:1",
    ),
    row("NOTRACK", Target, Changes, Nothing, Off, false, "-t raw -j NOTRACK"),
    row(
        "CHECKSUM",
        Target,
        Changes,
        Nothing,
        Off,
        false,
        "-t mangle -p udp -j CHECKSUM --checksum-fill",
    ),
    row("CT", Target, Changes, ByName, Conntrack, false, "-t raw -j CT --zone 1"),
    row(
        "CONNSECMARK",
        Target,
        Changes,
        NotKnown,
        Conntrack,
        false,
        "-t mangle -j CONNSECMARK --save",
    ),
    row(
        "SYNPROXY",
        Target,
        Changes,
        NotKnown,
        Conntrack,
        false,
        "-p tcp -j SYNPROXY --mss 1460",
    ),
    row(
        "TPROXY",
        Target,
        Changes,
        NotKnown,
        Defrag,
        false,
        "-t mangle -p tcp -j TPROXY --on-port 9",
    ),
    row("SET", Target, Changes, ByName, Off, false, "-j SET --add-set S src"),
    row(
        "IDLETIMER",
        Target,
        Changes,
        ByName,
        Off,
        false,
        "-j IDLETIMER --timeout 10 --label x",
    ),
    row(
        "RATEEST",
        Target,
        Changes,
        ByName,
        Off,
        false,
        "-j RATEEST --rateest-name E --rateest-interval 250ms --rateest-ewmalog 500ms",
    ),
];

/// What a match not in [`EFFECTS`] is taken to do: the strictest.
pub(super) const UNLISTED_MATCH: Effect = row("(any other match)", Match, Reads, NotKnown, Off, false, "");

/// What a target not in [`EFFECTS`] (`HMARK`, `TEE`, ...) is taken to do:
/// the strictest.
pub(super) const UNLISTED_TARGET: Effect = row("(any other target)", Target, Changes, NotKnown, Off, false, "");

/// The row of `name` as a `kind`; the strictest for a name not listed as one.
pub(super) fn of(name: &[u8], kind: Kind) -> &'static Effect {
    let unlisted = match kind {
        Match => &UNLISTED_MATCH,
        Target => &UNLISTED_TARGET,
    };
    EFFECTS
        .iter()
        .find(|e| e.kind == kind && e.name.as_bytes() == name)
        .unwrap_or(unlisted)
}

/// What a name keeps on, as a match or a target: a name not listed keeps
/// nothing on. That errs toward removing only where the name itself
/// already needs the most (an unlisted name never goes without its whole
/// chain's twin), and on the live side, where only what a rule surely
/// keeps on may count.
pub(super) fn keeps_on(name: &[u8]) -> Kept {
    EFFECTS
        .iter()
        .find(|e| e.name.as_bytes() == name)
        .map_or(Kept::Nothing, |e| e.keeps_on)
}

#[cfg(test)]
#[path = "effects_tests.rs"]
mod tests;
