//! The differential run's widening of the rule grammar: pieces whose
//! parts sit in different tables or keep state by name, each split
//! between the two copies in one of several ways (a writer stale and its
//! reader live, or the other way about, both, one copy only, or the live
//! one redrawn): a mark set in `nat` or `raw` and read by a filter, a
//! `DNAT` or `REDIRECT` whose rewrite a filter reads, a `recent` list set
//! on one port and checked on another, a `-g` into a chain whose `RETURN`
//! ends at a `DROP` policy, and a `RETURN` into a `DROP` policy. It
//! decides only what is added to a state `State::generate` made; the
//! grammar's own draws are left as they are, so other tests' seeds keep
//! their states.

use super::netns_topology::{Family, ROUTER, ROUTER_TCP, ROUTER_UDP, SERVER, SERVER_TCP, SERVER_UDP};
use super::rule_grammar::{lines, Line, LiveCopy, Rng, State};

/// One piece: what writes (a mark, a rewrite, a list entry) and what reads
/// it (a block); for a piece that is one whole, all of it is the writer.
struct Piece {
    writer: Vec<Line>,
    reader: Vec<Line>,
}

fn in_family<'a>(family: Family, v4: &'a str, v6: &'a str) -> &'a str {
    match family {
        Family::V4 => v4,
        Family::V6 => v6,
    }
}

/// A probe flow's chain and match: (chain, `-p tcp -m tcp --dport 80`).
fn aim(rng: &mut Rng) -> (&'static str, String) {
    let tcp = rng.chance(65);
    let (chain, ports) = if rng.chance(35) {
        ("INPUT", if tcp { &ROUTER_TCP[..] } else { &ROUTER_UDP[..] })
    } else {
        ("FORWARD", if tcp { &SERVER_TCP[..] } else { &SERVER_UDP[..] })
    };
    let proto = if tcp { "tcp" } else { "udp" };
    (chain, format!("-p {proto} -m {proto} --dport {}", rng.pick(ports)))
}

fn source(rng: &mut Rng, family: Family) -> &'static str {
    match family {
        Family::V4 => rng.pick(&["10.1.0.5", "10.1.0.0/24", "192.168.0.1", "10.1.0.7"]),
        Family::V6 => rng.pick(&["fd00:1::5", "fd00:1::/64", "fd00:9::1", "fd00:1::7"]),
    }
}

/// A mark written in `nat` (kube-proxy's drop bit) or `raw`, read by a
/// block in `mangle`, `filter` or `security`.
fn mark_across_tables(rng: &mut Rng, _: Family) -> Piece {
    let (chain, matches) = aim(rng);
    let mark = rng.pick(&["0x8000/0x8000", "0x4000/0x4000", "0x2"]);
    let (bits, mask) = mark.split_once('/').unwrap_or((mark, mark));
    let writer_table = rng.pick(&["nat", "raw"]);
    let reader_table = rng.pick(&["filter", "filter", "mangle", "security"]);
    let reads = if rng.chance(70) {
        format!("{matches} ")
    } else {
        String::new()
    };
    Piece {
        writer: lines(
            writer_table,
            &format!("PREROUTING {matches} -j MARK --set-xmark {bits}/{mask}"),
        ),
        reader: lines(reader_table, &format!("{chain} {reads}-m mark --mark {mark} -j DROP")),
    }
}

/// A `DNAT` (to another port of the server) or a `REDIRECT` (to another
/// port of the router), and a filter that reads the rewrite: the new port,
/// or `--ctstate DNAT`.
fn rewrite_read_by_a_filter(rng: &mut Rng, family: Family) -> Piece {
    let server = SERVER.of(family);
    let to = in_family(family, server, "[fd00:2::2]");
    let (writer, chain, proto, port) = match rng.below(3) {
        0 => (
            format!("PREROUTING -d {server} -p tcp -m tcp --dport 9999 -j DNAT --to-destination {to}:80"),
            "FORWARD",
            "tcp",
            80,
        ),
        1 => (
            format!("PREROUTING -d {server} -p udp -m udp --dport 123 -j DNAT --to-destination {to}:8080"),
            "FORWARD",
            "udp",
            8080,
        ),
        _ => (
            format!(
                "PREROUTING -d {} -p tcp -m tcp --dport 22 -j REDIRECT --to-ports 8080",
                ROUTER.of(family)
            ),
            "INPUT",
            "tcp",
            8080,
        ),
    };
    let reader = match rng.below(3) {
        0 => format!("{chain} -m conntrack --ctstate DNAT -j DROP"),
        1 => format!("{chain} -p {proto} -m {proto} --dport {port} -j REJECT"),
        _ => format!("{chain} -p {proto} -m {proto} --dport {port} -j DROP"),
    };
    Piece {
        writer: lines("nat", &writer),
        reader: lines("filter", &reader),
    }
}

/// A `recent` list set by one flow (in `mangle` or `filter`) and checked
/// by a block of another (or the same) flow.
fn recent_by_name(rng: &mut Rng, family: Family) -> Piece {
    let mask = in_family(family, "255.255.255.255", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
    let name = rng.pick(&["iptwW", "iptwX"]);
    let (set_chain, set_match) = aim(rng);
    let (check_chain, check_match) = if rng.chance(50) {
        (set_chain, set_match.clone())
    } else {
        aim(rng)
    };
    let writer_table = rng.pick(&["filter", "mangle"]);
    let writer_chain = if writer_table == "mangle" {
        "PREROUTING"
    } else {
        set_chain
    };
    let check = rng.pick(&["--rcheck", "--update"]);
    Piece {
        writer: lines(
            writer_table,
            &format!("{writer_chain} {set_match} -m recent --set --name {name} --mask {mask} --rsource"),
        ),
        reader: lines(
            "filter",
            &format!("{check_chain} {check_match} -m recent {check} --name {name} --mask {mask} --rsource -j DROP"),
        ),
    }
}

/// A `-g` into a chain that accepts one flow and returns others from an
/// accepted source: a `RETURN` of a gone-to chain ends its caller's caller,
/// here the built-in chain, at its `DROP` policy.
fn goto_return_to_a_policy(rng: &mut Rng, family: Family) -> Piece {
    let (chain, matches) = aim(rng);
    let name = rng.pick(&["GO-W", "GO-X"]);
    let entry = rng.pick(&["-p tcp ", "-p udp ", ""]);
    let icmp = in_family(family, "icmp", "ipv6-icmp");
    let mut text = format!(":{chain} DROP\n{chain} -p {icmp} -j ACCEPT\n{chain} {entry}-g {name}\n");
    text += &format!("{name} -s {} -j RETURN\n", source(rng, family));
    text += &format!("{name} {matches} -j ACCEPT\n");
    if rng.chance(50) {
        text += &format!("{name} -j ACCEPT\n");
    }
    Piece {
        writer: lines("filter", &text),
        reader: Vec::new(),
    }
}

/// A `RETURN` of one flow into a `DROP` policy, everything else accepted.
fn return_into_a_policy(rng: &mut Rng, family: Family) -> Piece {
    let (chain, matches) = aim(rng);
    let icmp = in_family(family, "icmp", "ipv6-icmp");
    let mut text = format!(":{chain} DROP\n{chain} -p {icmp} -j ACCEPT\n");
    if rng.chance(50) {
        text += &format!("{chain} -s {} -j ACCEPT\n", source(rng, family));
    }
    text += &format!("{chain} {matches} -j RETURN\n{chain} -j ACCEPT\n");
    Piece {
        writer: lines("filter", &text),
        reader: Vec::new(),
    }
}

type Draw = fn(&mut Rng, Family) -> Piece;

/// The pieces, each with its name (for the run's counts).
const PIECES: [(&str, Draw); 5] = [
    ("mark across tables", mark_across_tables),
    ("nat rewrite read by a filter", rewrite_read_by_a_filter),
    ("recent list by name", recent_by_name),
    ("goto, RETURN to a DROP policy", goto_return_to_a_policy),
    ("RETURN into a DROP policy", return_into_a_policy),
];

/// Adds to `state` (of seed `state.seed`) up to two pieces a family, each
/// split between the copies one way; a state widened is no whole copy nor
/// a loosened one any more. Returns the names of the pieces added.
pub fn widen(state: &mut State) -> Vec<&'static str> {
    let mut rng = Rng::new(state.seed ^ 0x00d1_ff00_5eed);
    let mut added = Vec::new();
    for (family, stale, live) in state.families.iter_mut() {
        for _ in 0..rng.below(3) {
            let (name, draw) = PIECES[rng.below(PIECES.len())];
            let piece = draw(&mut rng, *family);
            let whole: Vec<Line> = piece.writer.iter().chain(&piece.reader).cloned().collect();
            match rng.below(6) {
                0 => {
                    stale.extend(whole.clone());
                    live.extend(whole);
                }
                1 => stale.extend(whole),
                2 => {
                    stale.extend(piece.writer);
                    live.extend(piece.reader);
                }
                3 => {
                    stale.extend(piece.reader);
                    live.extend(piece.writer);
                }
                4 => {
                    stale.extend(whole);
                    let again = draw(&mut rng, *family);
                    live.extend(again.writer.into_iter().chain(again.reader));
                }
                _ => {
                    // Live first: its rules before the stale copy's own.
                    let mut ahead = whole.clone();
                    ahead.append(live);
                    *live = ahead;
                    stale.extend(whole);
                }
            }
            added.push(name);
        }
    }
    if !added.is_empty() && matches!(state.copy, LiveCopy::Whole | LiveCopy::Loosened) {
        state.copy = LiveCopy::Partial;
    }
    added
}
