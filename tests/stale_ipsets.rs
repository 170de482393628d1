//! `stale --remove` where rules name ipsets (a Calico node): the sets are
//! the node's, read from it and given to the proof's scratch namespace at
//! their own indices, never changed; without the `ipset` program the
//! tables stay, with the reason. Each test in a network namespace of its
//! own, against the real iptables-legacy / iptables-nft and ipset.

mod common;

use common::OutputWithin as _;

use common::stale::{backup_dir_of, legacy_saves, nft_ruleset, stale, stderr, stdout, without_headers};
use common::Node;
use iptables_wrapper::kernel::ipset::IpsetSocket;
use iptables_wrapper::stale::ipsets::HostSets;

/// Calico-like rules: `cali-` chains reached from the built-in ones, sets
/// matched (one negated, one a `list:set`), a `SET` target, a DROP that
/// only the other backend's twin keeps enforced. IPv6 too.
const CALICO_V4: &str = "*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:cali-INPUT - [0:0]
:cali-FORWARD - [0:0]
-A INPUT -m comment --comment \"cali:Cz_u1IQiXIMmKD4c\" -j cali-INPUT
-A FORWARD -m comment --comment \"cali:wUHhoiAYhphO9Mso --match-set not-a-set src\" -j cali-FORWARD
-A cali-INPUT -m set --match-set cali40all-ipam-pools src -j ACCEPT
-A cali-INPUT -p tcp -m set ! --match-set cali40this-host dst -m tcp --dport 9099 -j DROP
-A cali-FORWARD -m set --match-set cali40all-hosts src,src -j DROP
-A cali-FORWARD -j SET --add-set cali40this-host src --exist
COMMIT
";
const CALICO_V6: &str = "*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:cali-INPUT - [0:0]
-A INPUT -j cali-INPUT
-A cali-INPUT -m set --match-set cali60all-ipam-pools src -j DROP
COMMIT
";

/// The node's sets, with gaps in their indices (sets made and destroyed
/// before) and a set no rule names below them: a scratch namespace whose
/// sets were made one after another would give them other indices.
const SETS: &str = "ipset create unrelated hash:ip
ipset create gone-0 hash:ip
ipset create cali40all-ipam-pools hash:net
ipset add cali40all-ipam-pools 10.244.0.0/16
ipset add cali40all-ipam-pools 10.245.0.0/16
ipset create gone-1 hash:ip
ipset create cali40all-hosts list:set
ipset create cali40this-host hash:ip counters comment
ipset add cali40this-host 192.0.2.10 comment \"node-a\"
ipset create cali40hosts-a hash:net
ipset add cali40hosts-a 192.0.2.0/28
ipset add cali40all-hosts cali40hosts-a
ipset add cali40all-hosts cali40this-host
ipset create cali60all-ipam-pools hash:net family inet6
ipset add cali60all-ipam-pools 2001:db8:42::/64
ipset destroy gone-0
ipset destroy gone-1
";

/// A node upgraded to nft (its host link says so) whose legacy backend
/// holds the Calico rules, written again in nft.
fn calico_node(name: &str) -> Node {
    let node = Node::new(name);
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh(SETS);
    for tool in ["legacy", "nft"] {
        node.sh(&format!(
            "iptables-{tool}-restore <<'EOF'\n{CALICO_V4}EOF\nip6tables-{tool}-restore <<'EOF'\n{CALICO_V6}EOF\n"
        ));
    }
    node
}

fn ipset_save(node: &Node) -> String {
    node.sh("ipset save")
}

#[test]
fn a_calico_upgrade_with_ipsets_in_both_backends_is_removed_and_the_sets_stay() {
    common::root_or_skip!();
    let node = calico_node("ipsets");
    let sets_before = ipset_save(&node);
    let legacy_before = legacy_saves(&node);
    assert!(
        legacy_before.contains("--match-set cali40all-ipam-pools"),
        "{legacy_before}"
    );
    let nft_before = nft_ruleset(&node);
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("nothing stale remains"), "{}", stdout(&out));
    let legacy_after = legacy_saves(&node);
    assert!(
        !legacy_after.contains("-A ") && !legacy_after.contains("cali-"),
        "{legacy_after}"
    );
    assert_eq!(nft_ruleset(&node), nft_before);
    // The node's sets, none made, changed or removed (the scratch
    // namespace's placeholders were never here).
    assert_eq!(ipset_save(&node), sets_before);
    // The backup restores legacy exactly, against the same sets.
    let dir = backup_dir_of(&out);
    node.sh(&format!(
        "iptables-legacy-restore < {0}/iptables-legacy.rules && ip6tables-legacy-restore < {0}/ip6tables-legacy.rules",
        dir.display()
    ));
    assert_eq!(legacy_saves(&node), legacy_before);
    assert_eq!(ipset_save(&node), sets_before);
}

#[test]
fn an_nft_backend_left_by_a_move_back_to_legacy_is_removed_with_its_ipsets() {
    common::root_or_skip!();
    let node = calico_node("ipsets-nft");
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    let sets_before = ipset_save(&node);
    let legacy_before = legacy_saves(&node);
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let nft_after = without_headers(&node.sh("iptables-nft-save -t filter; ip6tables-nft-save -t filter"));
    assert!(
        !nft_after.contains("-A ") && !nft_after.contains("cali-"),
        "{nft_after}"
    );
    assert_eq!(legacy_saves(&node), legacy_before);
    assert_eq!(ipset_save(&node), sets_before);
}

#[test]
fn without_the_ipset_program_a_table_naming_sets_stays_with_the_reason() {
    common::root_or_skip!();
    let node = calico_node("ipsets-noprogram");
    // The backends' directory without ipset.
    let sbin = node.path("sbin");
    std::fs::create_dir(&sbin).unwrap();
    for multi in ["xtables-legacy-multi", "xtables-nft-multi"] {
        std::os::unix::fs::symlink(std::path::Path::new("/usr/sbin").join(multi), sbin.join(multi)).unwrap();
    }
    let sets_before = ipset_save(&node);
    let legacy_before = legacy_saves(&node);
    let nft_before = nft_ruleset(&node);
    let out = node
        .wrapper()
        .env("IPTABLES_WRAPPER_SBIN", &sbin)
        .args(["stale", "--remove"])
        .output_within_limit()
        .unwrap();
    let text = stdout(&out) + &stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("uses ipset cali40all-hosts; reading it needs the ipset program: install ipset"),
        "{text}"
    );
    assert!(text.contains(&format!("{}/ipset", sbin.display())), "{text}");
    assert!(!text.contains("emptied:"), "{text}");
    assert_eq!(legacy_saves(&node), legacy_before);
    assert_eq!(nft_ruleset(&node), nft_before);
    assert_eq!(ipset_save(&node), sets_before);
}

#[test]
fn the_sets_are_made_only_in_a_namespace_that_holds_none_of_them() {
    common::root_or_skip!();
    common::enter_new_netns();
    common::sh("ipset create gone hash:ip; ipset create kept hash:net; ipset add kept 10.0.0.0/8; ipset destroy gone");
    let before = common::sh("ipset save");
    let save = b"*filter\n-A INPUT -m set --match-set kept src -j DROP\nCOMMIT\n";
    let sets = HostSets::read("the backup", save).unwrap();
    // Here, where the set is, nothing is made (the host's namespace).
    let refused = sets.recreate().unwrap_err();
    assert!(refused.contains("already holds ipset kept"), "{refused}");
    assert_eq!(common::sh("ipset save"), before);
    let index_of = |name: &str| IpsetSocket::open().unwrap().index_of(name).unwrap();
    assert_eq!(index_of("kept"), Some(1));
    // In a fresh namespace: the set at the host's index, a placeholder in
    // the gap before it.
    let made = std::thread::spawn(move || {
        common::enter_new_netns();
        sets.recreate().unwrap();
        let indices = (index_of("iptables-wrapper-gap-0"), index_of("kept"));
        (common::sh("ipset save kept"), indices)
    })
    .join()
    .unwrap();
    assert_eq!(made, (before, (Some(0), Some(1))));
}
