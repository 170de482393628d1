//! What counts as legacy state: rules, user chains and built-in chain
//! policies other than ACCEPT, never a table that is merely listed (a
//! read-only `iptables-legacy -L` creates empty tables). Each test in a
//! network namespace of its own, against the real iptables-legacy.

mod common;

use common::{enter_new_netns, sh, Node};
use iptables_wrapper::family::Family;
use iptables_wrapper::kernel::legacy::{LegacyFamily, Policy};
use iptables_wrapper::kernel::IPTABLES_TABLES;
use iptables_wrapper::mode::Mode;
use iptables_wrapper::save_text;
use iptables_wrapper::stale::{find, proof};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

fn decided_by(node: &Node) -> (String, String) {
    let report = node.detect();
    (
        report["mode"].as_str().unwrap().to_string(),
        report["decided_by"].as_str().unwrap().to_string(),
    )
}

/// A fresh nft node where something listed legacy tables
/// (leaving them empty) and go-iptables made the lock 0600. No rules
/// anywhere: the lock has no legacy state to stand beside, so the default
/// decides nft, and a call goes to nft.
#[test]
fn empty_legacy_tables_and_a_0600_lock_are_no_legacy_trace() {
    common::root_or_skip!();
    let node = Node::new("emptytrace");
    node.sh("iptables-legacy -L -n >/dev/null && ip6tables-legacy -L -n >/dev/null");
    assert!(common::legacy_tables("ip_tables_names").contains("filter"));
    // As go-iptables leaves it on an nft host.
    std::fs::write(&node.lockfile, "").unwrap();
    std::fs::set_permissions(&node.lockfile, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(node.version_mode("iptables"), "nft");
    assert_eq!(node.version_mode("ip6tables"), "nft");
    assert_eq!(decided_by(&node), ("nft".into(), "default".into()));
    let report = node.detect();
    let lock = report["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["source"] == "xtables-lock")
        .unwrap()
        .clone();
    assert!(lock["points_to"].is_null(), "{lock}");
    assert!(
        lock["value"].as_str().unwrap().contains("no legacy table holds"),
        "{lock}"
    );
    // A DROP policy is state a legacy write left: now the lock breaks the tie.
    node.sh("ip6tables-legacy -P FORWARD DROP");
    assert_eq!(decided_by(&node), ("legacy".into(), "xtables-lock".into()));
    assert_eq!(node.version_mode("iptables"), "legacy");
    // Back to ACCEPT, an empty user chain beside it: nothing that changes
    // a packet's fate, no trace.
    node.sh("ip6tables-legacy -P FORWARD ACCEPT && iptables-legacy -N LEFT-BEHIND");
    assert_eq!(decided_by(&node), ("nft".into(), "default".into()));
}

/// With the host on nft, a legacy `FORWARD DROP` without a
/// single rule still drops forwarded traffic: detect and a call's warnings
/// see it, and name the command that shows and removes it.
#[test]
fn a_legacy_drop_policy_without_rules_is_stale_state() {
    common::root_or_skip!();
    let node = Node::new("droppolicy");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("iptables-legacy -L -n >/dev/null");
    let warned = |report: &serde_json::Value| {
        report["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .find(|w| w.contains("legacy ipv4 tables"))
    };
    // Empty tables weigh nothing.
    assert_eq!(warned(&node.detect()), None, "{}", node.detect());
    node.sh("iptables-legacy -P FORWARD DROP");
    let report = node.detect();
    let warning = warned(&report).unwrap_or_else(|| panic!("no warning: {report}"));
    assert!(warning.contains("policy FORWARD DROP"), "{warning}");
    assert!(warning.contains("iptables-wrapper stale --remove"), "{warning}");
    let out = node.version_with_warnings("iptables");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("policy FORWARD DROP") && stderr.contains("iptables-wrapper stale"),
        "{stderr}"
    );
    // IPv6 alike.
    node.sh("iptables-legacy -P FORWARD ACCEPT && ip6tables-legacy -P INPUT DROP");
    let report = node.detect();
    assert_eq!(warned(&report), None, "{report}");
    let text = report["warnings"].to_string();
    assert!(
        text.contains("legacy ipv6 tables") && text.contains("policy INPUT DROP"),
        "{report}"
    );
}

const RULESET: &str = r#"*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT DROP [0:0]
:KUBE-FIREWALL - [0:0]
:EMPTY - [0:0]
-A INPUT -j KUBE-FIREWALL
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A KUBE-FIREWALL -m comment --comment "drop marked" -m mark --mark 0x8000/0x8000 -j DROP
-A KUBE-FIREWALL -j RETURN
-A OUTPUT -j ACCEPT
COMMIT
*mangle
:PREROUTING ACCEPT [0:0]
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-IPTABLES-HINT - [0:0]
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A POSTROUTING -j MASQUERADE
COMMIT
"#;

/// Per chain: (policy or "-", rules), as iptables-legacy-save prints them.
fn saved_chains(save: &str) -> BTreeMap<(String, String), (String, u64)> {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let mut chains = BTreeMap::new();
    for (table, saved) in save_text::tables(save.as_bytes()) {
        for (chain, policy) in &saved.policies {
            let rules = saved.rules.iter().filter(|(of, _)| of == chain).count() as u64;
            chains.insert((text(&table), text(chain)), (text(policy), rules));
        }
    }
    chains
}

/// An image (the removal's reading, compared before and after its save)
/// holds what a walk of its table reads, table by table, in both
/// families, an empty table and a policy-only one among them: the
/// removal's judgement finds the stale tables in that one reading.
#[test]
fn a_table_image_holds_what_its_table_holds() {
    common::root_or_skip!();
    enter_new_netns();
    for (family, prefix) in [(Family::Ipv4, "iptables"), (Family::Ipv6, "ip6tables")] {
        sh(&format!(
            "{prefix}-legacy-restore <<'EOF'\n{RULESET}EOF\n{prefix}-legacy -t raw -P OUTPUT DROP\n{prefix}-legacy -t security -L -n >/dev/null"
        ));
        let tables = LegacyFamily::open(family).unwrap();
        let images = proof::legacy_images(family, &IPTABLES_TABLES).unwrap();
        for (name, image) in IPTABLES_TABLES.iter().zip(&images) {
            let walked = tables.table(name).map(|table| tables.contents(table).unwrap());
            let imaged = image.as_ref().map(|image| image.contents(family, name).unwrap());
            assert_eq!(imaged, walked, "{family:?} {name}");
        }
        assert!(images.iter().all(Option::is_some), "{family:?}: every table is listed");
        // The same tables, in the same (the kernel's) order.
        let finding = find::legacy_from_images(family, &images);
        assert_eq!(finding, find::find(Mode::Legacy, family), "{family:?}");
        assert_eq!(finding.unknown(), None, "{family:?}");
        assert_eq!(
            finding.tables().len(),
            4,
            "{family:?}: all but the empty security table"
        );
    }
}

/// The walk's chains, rules and policies are what iptables-legacy-save
/// prints, in both families; an empty table's policies are read too.
#[test]
fn table_contents_match_the_save_tool_chain_by_chain() {
    common::root_or_skip!();
    enter_new_netns();
    for (family, prefix) in [(Family::Ipv4, "iptables"), (Family::Ipv6, "ip6tables")] {
        sh(&format!(
            "{prefix}-legacy-restore <<'EOF'\n{RULESET}EOF\n{prefix}-legacy -t raw -P OUTPUT DROP"
        ));
        let expected = saved_chains(&sh(&format!("{prefix}-legacy-save")));
        let tables = LegacyFamily::open(family).unwrap();
        let mut walked = BTreeMap::new();
        for table in &tables.tables {
            let contents = tables.contents(table).unwrap();
            assert!(contents.holds_state(), "{}: {contents:?}", table.name);
            for chain in &contents.chains {
                let policy = chain.policy.map_or("-", Policy::name).to_string();
                walked.insert((table.name.clone(), chain.name.clone()), (policy, chain.rules));
            }
        }
        assert_eq!(walked, expected, "{family:?}");
        // raw holds nothing but its OUTPUT DROP policy: GET_INFO calls it
        // empty, the walk sees the policy.
        let raw = tables.table("raw").unwrap();
        assert!(raw.is_empty());
        let raw_contents = tables.contents(raw).unwrap();
        assert_eq!(raw_contents.rules(), 0);
        assert_eq!(
            raw_contents
                .non_accept_policies()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>(),
            ["OUTPUT"]
        );
        sh(&format!("{prefix}-legacy -t raw -P OUTPUT ACCEPT"));
        let tables = LegacyFamily::open(family).unwrap();
        assert!(!tables.contents(tables.table("raw").unwrap()).unwrap().holds_state());
    }
}
