//! What a held table's verdict says: the principle its first item
//! fails, where its chain first differs, "may open" or "not proven safe",
//! and its chains stale against live.

use super::unenforced;

#[test]
fn a_held_table_names_where_its_first_item_differs_from_the_live_chain() {
    let live = b"*filter\n:INPUT DROP [0:0]\n:user-input - [0:0]\n:after-input - [0:0]\n-A INPUT -j user-input\n-A INPUT -j after-input\n-A user-input -p udp -m udp --dport 9000 -j ACCEPT\n-A after-input -p udp -m udp --dport 9002 -j DROP\nCOMMIT\n";
    let stale = b"*filter\n:INPUT DROP [0:0]\n:user-input - [0:0]\n:after-input - [0:0]\n-A INPUT -j user-input\n-A INPUT -j after-input\n-A user-input -p udp -m udp --dport 9000 -j ACCEPT\n-A user-input -p udp -m udp --dport 9001 -j ACCEPT\n-A after-input -p udp -m udp --dport 9002 -j DROP\nCOMMIT\n";
    let said = |stale: &[u8], live: &[u8]| {
        let held = unenforced(stale, live, None, &[], &["filter"]).remove(0);
        super::describe(&held, crate::mode::Mode::Nft, None).unwrap()
    };
    // The stale copy accepts 9001 too: more permissive, it goes.
    assert!(unenforced(stale, live, None, &[], &["filter"])[0].items.is_empty());
    let missing = said(live, stale);
    assert!(
        missing.ends_with("where the first of them differs: chain user-input, rule 2: legacy none, nft `-A user-input -p udp -m udp --dport 9001 -j ACCEPT`"),
        "{missing}"
    );
    // A chain the live side does not declare differs at its first rule.
    let alone = b"*filter\n:INPUT ACCEPT [0:0]\n:x - [0:0]\n-A INPUT -j x\n-A x -j DROP\nCOMMIT\n";
    assert!(said(alone, b"").ends_with("chain INPUT, rule 1: legacy `-A INPUT -j x`, nft none"));
}

/// A held table's verdict names the principle its first item fails, one
/// case per principle.
#[test]
fn a_held_table_names_the_principle_its_first_item_fails() {
    let cases: [(&str, &[u8], &str); 6] = [
        (
            "filter",
            b"*filter\n:FORWARD DROP [0:0]\nCOMMIT\n",
            "a policy other than ACCEPT needs the same policy",
        ),
        (
            "filter",
            b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp -m udp --dport 9000 -j DROP\nCOMMIT\n",
            "a block needs its twin, reached the same way",
        ),
        (
            "filter",
            b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j MARK --set-xmark 0x1/0xffffffff\nCOMMIT\n",
            "a change, a shared state or a name not known needs its whole chain's twin",
        ),
        (
            "filter",
            b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m conntrack --ctstate NEW -j ACCEPT\nCOMMIT\n",
            "a rule that keeps on what no live rule keeps on",
        ),
        (
            "filter",
            b"*filter\n:INPUT ACCEPT [0:0]\n:x - [0:0]\n-A x -m conntrack --ctstate NEW -j ACCEPT\nCOMMIT\n",
            "a rule nothing reaches that keeps something on or alive",
        ),
        (
            "security",
            b"*security\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp -m udp --dport 9000 -j DROP\nCOMMIT\n",
            "the security table's twins never count",
        ),
    ];
    for (table, stale, principle) in cases {
        let held = unenforced(stale, b"", None, &[], &[table]).remove(0);
        let said = super::describe(&held, crate::mode::Mode::Nft, None).unwrap();
        assert!(
            said.contains(&format!("(principle of the first: {principle}")),
            "{said}"
        );
    }
}

/// A held security table says what the live one holds as it is: its
/// twins do not count, but it is not said to hold nothing.
#[test]
fn a_held_security_table_is_not_said_to_lack_what_the_live_one_holds() {
    let save = b"*security\n:OUTPUT DROP [0:0]\n-A OUTPUT -d 10.9.0.2/32 -j DROP\nCOMMIT\n";
    let held = unenforced(save, save, None, &[], &["security"]).remove(0);
    assert_eq!(held.items.len(), 2);
    let said = super::describe(&held, crate::mode::Mode::Nft, None).unwrap();
    assert!(said.starts_with("removing it is not proven safe: 2 items"), "{said}");
    assert!(said.contains("the security table's twins never count"), "{said}");
    assert!(held.compared.is_empty(), "{:?}", held.compared);
    assert!(!said.contains("nft none"), "{said}");
}

/// A held table's chains that differ, and the user chains they reach,
/// shown stale against live, rule against rule; the same rules far from
/// a difference counted.
#[test]
fn a_held_tables_chains_are_shown_stale_against_live() {
    let same: String = (1..=8)
        .map(|i| format!("-A INPUT -s 10.0.0.{i}/32 -j ACCEPT\n"))
        .collect();
    let stale = format!("*filter\n:INPUT DROP [0:0]\n:user - [0:0]\n{same}-A INPUT -j user\n-A user -p udp -m udp --dport 9000 -j ACCEPT\nCOMMIT\n");
    let live = format!("*filter\n:INPUT DROP [0:0]\n:user - [0:0]\n{same}-A INPUT -j user\n-A user -p udp -m udp --dport 9000 -j ACCEPT\n-A user -p udp -m udp --dport 9001 -j ACCEPT\nCOMMIT\n");
    let shown = |stale: &str, live: &str| -> Vec<String> {
        let held = unenforced(stale.as_bytes(), live.as_bytes(), None, &[], &["filter"]).remove(0);
        held.compared.iter().flat_map(|c| c.shown("legacy", "nft")).collect()
    };
    assert_eq!(
        shown(&stale, &live),
        [
            "chain user",
            "  both    -A user -p udp -m udp --dport 9000 -j ACCEPT",
            "  nft     -A user -p udp -m udp --dport 9001 -j ACCEPT",
        ]
    );
    let other = stale
        .replace("-A INPUT -j user\n", "-A INPUT -p tcp -j DROP\n-A INPUT -j user\n")
        .replace(":INPUT DROP", ":INPUT ACCEPT");
    assert_eq!(
        shown(&other, &live),
        [
            "chain INPUT (policy: legacy ACCEPT, nft DROP)",
            "  ... 6 the same",
            "  both    -A INPUT -s 10.0.0.7/32 -j ACCEPT",
            "  both    -A INPUT -s 10.0.0.8/32 -j ACCEPT",
            "  legacy  -A INPUT -p tcp -j DROP",
            "  both    -A INPUT -j user",
            "chain user",
            "  both    -A user -p udp -m udp --dport 9000 -j ACCEPT",
            "  nft     -A user -p udp -m udp --dport 9001 -j ACCEPT",
        ]
    );
    assert_eq!(shown(&stale, "")[0], "chain INPUT (nft has no such chain)");
}

/// "May open" only where a held item blocks with no such item live (a
/// policy, a blocking rule); where the live copy holds each held item,
/// elsewhere or reached otherwise, "not proven safe".
#[test]
fn only_a_block_the_live_copy_lacks_may_open_the_host() {
    let said = |stale: &[u8], live: &[u8]| {
        let held = unenforced(stale, live, None, &[], &["filter"]).remove(0);
        super::describe(&held, crate::mode::Mode::Nft, None).unwrap()
    };
    let drop_9000 = b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp -m udp --dport 9000 -j DROP\nCOMMIT\n";
    assert!(said(drop_9000, b"").starts_with(
        "removing it may open the host (nft holds no `-A INPUT -p udp -m udp --dport 9000 -j DROP`, which blocks): 1 item"
    ));
    let policy = b"*filter\n:FORWARD DROP [0:0]\nCOMMIT\n";
    let live_accepts = b"*filter\n:FORWARD ACCEPT [0:0]\nCOMMIT\n";
    assert!(said(policy, live_accepts)
        .starts_with("removing it may open the host (nft holds no `:FORWARD DROP`, which blocks)"));
    // The same DROP, behind an ACCEPT live: held, but held live too.
    let behind = b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p udp -j ACCEPT\n-A INPUT -p udp -m udp --dport 9000 -j DROP\nCOMMIT\n";
    assert!(said(drop_9000, behind).starts_with("removing it is not proven safe: 1 item that nft holds no twin of"));
    // A MARK without its chain's twin changes, and blocks nothing.
    let mark = b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j MARK --set-xmark 0x1/0xffffffff\nCOMMIT\n";
    assert!(said(mark, b"").starts_with("removing it is not proven safe"));
}
