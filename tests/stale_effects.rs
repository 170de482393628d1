//! The table of effects (`src/stale/effects.rs`, as `docs/mixed-state.md`
//! holds it) judged row by row by the kernel: what each name keeps on,
//! and the state the matches that share it share, each row's rule loaded
//! into the stale backend of a namespace of its own. A row the table gets
//! wrong in the direction that opens a host fails here: a name said to
//! keep nothing on that the kernel keeps defragmentation on for, a name
//! said to keep something on that the kernel keeps nothing on for (a live
//! rule said to keep it on would let a stale one that does go), a match
//! said to share nothing whose state a live rule reads.

mod common;

use common::stale::{
    datagram_from_neighbour, legacy_saves, nft_rule_packets, stale, stderr, stdout, whole_datagrams_counted,
};
use common::Node;

/// One row of the table as `docs/mixed-state.md` prints it.
struct Row {
    name: String,
    kind: String,
    does: String,
    state: String,
    keeps_on: String,
    in_nat: String,
    example: String,
}

/// The rows of the table of effects in `docs/mixed-state.md` (a unit test
/// holds it to the code's).
fn rows() -> Vec<Row> {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/mixed-state.md")).unwrap();
    let rows: Vec<Row> = docs
        .lines()
        .skip_while(|l| !l.starts_with("| name | kind | does to a packet |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<String> = l
                .trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect();
            Row {
                name: cells[0].clone(),
                kind: cells[1].clone(),
                does: cells[2].clone(),
                state: cells[3].clone(),
                keeps_on: cells[4].clone(),
                in_nat: cells[5].clone(),
                example: if cells[6] == "-" {
                    String::new()
                } else {
                    cells[6].clone()
                },
            }
        })
        .collect();
    assert!(
        rows.len() > 80,
        "the table of effects in docs/mixed-state.md: {} rows",
        rows.len()
    );
    rows
}

/// Loads `example` (`-t TABLE` first where not filter) into a user chain
/// no built-in chain reaches, in legacy.
fn load_unreached(node: &Node, example: &str) {
    let (table, rule) = match example.strip_prefix("-t ") {
        Some(rest) => rest.split_once(' ').unwrap(),
        None => ("filter", example),
    };
    node.sh(&format!(
        "ipset create S hash:ip -exist
iptables-legacy -t {table} -N OLD
iptables-legacy -t {table} -A OLD {rule}"
    ));
}

#[test]
fn every_name_the_kernel_keeps_defragmentation_on_for_holds_its_table() {
    common::root_or_skip!();
    let mut on = Vec::new();
    for row in rows().iter().filter(|r| !r.example.is_empty()) {
        let node = Node::new(&format!("effects-{}", row.name.to_lowercase()));
        node.set_host_link("iptables", "/usr/sbin/iptables-nft");
        node.sh("iptables-nft -t mangle -A PREROUTING -p udp -m length --length 1000:65535 -j DROP");
        assert_eq!(
            whole_datagrams_counted(&node),
            0,
            "{}: nothing defragments yet",
            row.name
        );
        load_unreached(&node, &row.example);
        let mut whole = whole_datagrams_counted(&node);
        if whole == 0 && row.keeps_on != "-" {
            // Sent once more before the row is called wrong: a datagram
            // lost on the fresh link is no answer.
            whole = whole_datagrams_counted(&node);
        }
        if whole == 0 {
            // The other direction: a row saying it keeps something on
            // would let a stale rule that does go in its name.
            assert_eq!(
                row.keeps_on, "-",
                "the kernel does not defragment while {} is loaded; the table says it keeps {} on",
                row.name, row.keeps_on
            );
            continue;
        }
        on.push(row.name.clone());
        assert_ne!(
            row.keeps_on, "-",
            "the kernel defragments while {} is loaded; the table says it keeps nothing on",
            row.name
        );
        let before = legacy_saves(&node);
        let out = stale(&node, &["--remove"]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}: {}{}",
            row.name,
            stdout(&out),
            stderr(&out)
        );
        assert_eq!(legacy_saves(&node), before, "{}", row.name);
        assert_eq!(whole_datagrams_counted(&node), 1, "{}: still defragmented", row.name);
    }
    eprintln!("names the kernel keeps defragmentation on for: {}", on.join(", "));
    assert!(on.len() >= 10, "{on:?}");
}

/// A match whose state a live rule reads: the stale rule (in mangle's
/// PREROUTING, no verdict) writes it for UDP to port 5000, and the live
/// filter rule reading it drops the datagram.
struct Sharing {
    name: &'static str,
    setup: &'static str,
    stale: &'static str,
    live: &'static str,
    /// Run before each datagram: the state back to where one datagram
    /// decides.
    reset: &'static str,
}

const SHARING: &[Sharing] = &[
    Sharing {
        name: "hashlimit",
        setup: "",
        stale: "-m hashlimit --hashlimit-upto 1/sec --hashlimit-burst 1 --hashlimit-name HL",
        live: "-m hashlimit --hashlimit-above 1/sec --hashlimit-burst 1 --hashlimit-name HL",
        reset: "sleep 1.2",
    },
    Sharing {
        name: "recent",
        setup: "",
        stale: "-m recent --name R --set",
        live: "-m recent --name R --rcheck --seconds 1",
        reset: "sleep 1.2",
    },
    Sharing {
        name: "set",
        setup: "ipset create S hash:ip counters",
        stale: "-m set --match-set S src",
        live: "-m set --match-set S src --packets-gt 1",
        reset: "ipset -exist add S 10.9.0.2 packets 0 bytes 0",
    },
    Sharing {
        name: "connlabel",
        setup: "",
        stale: "-m connlabel --label 1 --set",
        live: "-m connlabel --label 1",
        reset: "",
    },
];

/// The matches that keep state another rule reads with no case in
/// [`SHARING`], and why.
const NOT_SHARED_HERE: &[(&str, &str)] = &[
    ("quota2", "xtables-addons, outside the kernel's tree"),
    ("nfacct", "its counters are objects made by nfnetlink_acct first"),
    (
        "socket",
        "--restore-skmark needs a marked socket: tests/stale_rows_state.rs has one",
    ),
    (
        "cluster",
        "what it keeps is not established; a twin is asked all the same",
    ),
];

/// Whether the live DROP counted the one datagram sent after `reset`.
fn dropped(node: &Node, case: &Sharing) -> bool {
    node.sh(case.reset);
    let before = nft_rule_packets(node, "filter", "INPUT", "DROP");
    datagram_from_neighbour(node, 10, 5000, 1500);
    nft_rule_packets(node, "filter", "INPUT", "DROP") > before
}

#[test]
fn every_match_that_shares_state_a_live_rule_reads_holds_its_table() {
    common::root_or_skip!();
    for row in rows()
        .iter()
        .filter(|r| r.kind == "match" && r.state != "none" && r.state != "its own")
    {
        let known = SHARING.iter().any(|c| c.name == row.name) || NOT_SHARED_HERE.iter().any(|(n, _)| *n == row.name);
        assert!(
            known || row.name.starts_with('('),
            "no case for {} ({})",
            row.name,
            row.state
        );
    }
    for case in SHARING {
        let node = Node::new(&format!("effects-share-{}", case.name));
        node.set_host_link("iptables", "/usr/sbin/iptables-nft");
        node.sh(&format!(
            "{}
iptables-nft -A INPUT -p udp --dport 5000 {} -j DROP
iptables-legacy -t mangle -A PREROUTING -p udp --dport 5000 {}",
            case.setup, case.live, case.stale
        ));
        if !case.setup.is_empty() {
            node.sh("ipset add S 10.9.0.2");
        }
        assert!(
            dropped(&node, case),
            "{}: the stale rule's state makes the live rule drop",
            case.name
        );
        let before = legacy_saves(&node);
        let out = stale(&node, &["--remove"]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{}: {text}{}", case.name, stderr(&out));
        let named = format!("-A PREROUTING -p udp -m udp --dport 5000 -m {} ", case.name);
        assert!(text.contains(&named), "{}: the held rule is named: {text}", case.name);
        assert_eq!(legacy_saves(&node), before, "{}", case.name);
        assert!(dropped(&node, case), "{}: still dropped", case.name);
        // Without the stale rule the live one alone lets it through: the
        // stale rule is what made the difference.
        node.sh("iptables-legacy -t mangle -F PREROUTING");
        assert!(
            !dropped(&node, case),
            "{}: the live rule alone lets it through",
            case.name
        );
    }
}

/// The targets that leave the packet and every reader's state as they
/// were: only these may go without a twin (the test's own list, not the
/// table's: a row moved there by mistake fails below).
const LEAVE_ALL_AS_IT_WAS: [&str; 6] = ["ACCEPT", "RETURN", "LOG", "NFLOG", "TRACE", "AUDIT"];

/// The targets that go in `nat` whatever their matches (the nat limit).
const GO_IN_NAT: [&str; 6] = ["DNAT", "SNAT", "MASQUERADE", "REDIRECT", "NETMAP", "MARK"];

/// Every target row: its example, loaded into a built-in chain of its
/// table in the stale legacy backend, with nothing like it in the live
/// nft one (which keeps conntrack on, so that only what the target does
/// counts), is emptied where the target leaves all as it was (or goes in
/// `nat`), and otherwise holds its family, nothing emptied: "may open the
/// host" for a block or a queue, "not proven safe" for a change. A target
/// the table says by mistake only observes, accepts or returns fails.
#[test]
fn every_target_goes_only_where_it_leaves_all_as_it_was() {
    common::root_or_skip!();
    let rows: Vec<Row> = rows().into_iter().filter(|r| r.kind == "target").collect();
    assert!(rows.len() > 30, "{} target rows", rows.len());
    for row in &rows {
        let leaves = ["observes", "accepts", "returns"].contains(&row.does.as_str());
        assert_eq!(
            leaves,
            LEAVE_ALL_AS_IT_WAS.contains(&row.name.as_str()),
            "{}: {}",
            row.name,
            row.does
        );
        assert_eq!(
            row.in_nat == "goes",
            GO_IN_NAT.contains(&row.name.as_str()),
            "{} in nat",
            row.name
        );
    }
    for row in rows.iter().filter(|r| !r.example.is_empty()) {
        let node = Node::new(&format!("effects-target-{}", row.name.to_lowercase()));
        node.set_host_link("iptables", "/usr/sbin/iptables-nft");
        let (table, rule) = match row.example.strip_prefix("-t ") {
            Some(rest) => rest.split_once(' ').unwrap(),
            None => ("filter", row.example.as_str()),
        };
        let chain = node.sh(&format!(
            "ipset create S hash:ip -exist
iptables-nft -A OUTPUT -d 192.0.2.9 -m conntrack --ctstate NEW -j ACCEPT
for chain in PREROUTING INPUT FORWARD OUTPUT POSTROUTING; do
  if iptables-legacy -t {table} -A $chain {rule} 2>/dev/null; then echo $chain; break; fi
done"
        ));
        assert!(
            !chain.trim().is_empty(),
            "{}: no built-in chain of {table} loads `{rule}`",
            row.name
        );
        let before = legacy_saves(&node);
        let out = stale(&node, &["--remove"]);
        let text = stdout(&out);
        let name = &row.name;
        if LEAVE_ALL_AS_IT_WAS.contains(&name.as_str()) || (table == "nat" && GO_IN_NAT.contains(&name.as_str())) {
            assert_eq!(out.status.code(), Some(0), "{name}: {text}{}", stderr(&out));
            assert!(!legacy_saves(&node).contains("-A "), "{name}: {text}");
        } else {
            assert_eq!(out.status.code(), Some(1), "{name}: {text}{}", stderr(&out));
            let verdict = match name.as_str() {
                "DROP" | "REJECT" | "NFQUEUE" | "QUEUE" => "may open the host",
                _ => "is not proven safe",
            };
            // Its verdict, after the witness the fates name where they find one.
            let held = format!("left as it was: legacy ipv4 {table}: ");
            let line = text.lines().find(|l| l.starts_with(&held)).unwrap_or_default();
            assert!(
                line.contains(&format!("removing it {verdict}")),
                "{name} in {}: {text}",
                chain.trim()
            );
            assert_eq!(legacy_saves(&node), before, "{name}");
        }
    }
}
