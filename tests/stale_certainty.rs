//! `stale --remove` acts only on a decision no single source can fake, and
//! never opens a firewall unless told to: a host link contradicted by
//! kubelet's hint chains, a hint chain alone (beside one rule either way, in
//! a native nftables table, or beside kube-proxy's whole state), host links
//! that disagree, and a legacy
//! firewall the nft host does not enforce are all refused or left as they
//! are; the upgrades it exists for (kube-proxy's and Docker's rules written
//! again into nft) still remove. Each test in a network namespace of its
//! own, against the real iptables-legacy / iptables-nft.

mod common;

use common::OutputWithin as _;

use common::stale::{json, legacy_saves, nft_ruleset, stale, stale_by_override, stderr, stdout};
use common::Node;

/// Asserts that a removal refused (exit 2), naming each of `evidence` on a
/// line of its own, and changed nothing.
fn assert_refused(node: &Node, args: &[&str], evidence: &[&str]) {
    let legacy_before = legacy_saves(node);
    let nft_before = nft_ruleset(node);
    let out = stale(node, args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{}{err}", stdout(&out));
    assert!(err.contains("stale --remove: refused"), "{err}");
    for piece in evidence {
        assert!(
            err.lines()
                .any(|l| l.contains("stale --remove: contradicted by: ") && l.contains(piece)),
            "no line for {piece}: {err}"
        );
    }
    assert_eq!(legacy_saves(node), legacy_before);
    assert_eq!(nft_ruleset(node), nft_before);
}

/// Asserts a refusal (see [`assert_refused`]) for resting on a hint chain.
fn assert_refused_by_hint(node: &Node) {
    assert_refused(node, &["--remove"], &[]);
    let err = stderr(&stale(node, &["--remove"]));
    assert!(
        err.contains("by hint-chain") && err.contains("not where the host's other writers do"),
        "{err}"
    );
}

/// Legacy: kubelet's hint chains (both families), its canary, a Service
/// rule and `FORWARD DROP`: what a node whose kubelet uses legacy holds.
const KUBELET_IN_LEGACY: &str = "for t in iptables-legacy ip6tables-legacy; do $t -t mangle -N KUBE-IPTABLES-HINT; $t -t mangle -N KUBE-KUBELET-CANARY; done
iptables-legacy -t nat -N KUBE-SERVICES
iptables-legacy -t nat -A PREROUTING -j KUBE-SERVICES
iptables-legacy -t nat -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination 10.244.0.9:6443
iptables-legacy -P FORWARD DROP";

#[test]
fn a_host_link_contradicted_by_kubelets_hint_chains_is_refused() {
    common::root_or_skip!();
    let node = Node::new("cert-link-vs-hint");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    node.sh(KUBELET_IN_LEGACY);
    assert_refused(
        &node,
        &["--remove"],
        &[
            "ipv4: legacy ipv4 mangle chain KUBE-IPTABLES-HINT",
            "ipv4: legacy ipv4 mangle chain KUBE-KUBELET-CANARY",
            "ipv6: legacy ipv6 mangle chain KUBE-IPTABLES-HINT",
        ],
    );
    // --allow-opening does not overrule a contradiction, nor does the
    // other option without IPTABLES_MODE.
    assert_refused(&node, &["--remove", "--allow-opening", "--despite-contradiction"], &[]);
    // detect and the metrics name the contradiction as its own finding.
    let warnings = node.detect()["warnings"].to_string();
    assert!(
        warnings.contains("contradicting evidence for legacy: legacy ipv4 mangle chain KUBE-IPTABLES-HINT"),
        "{warnings}"
    );
    let metrics = node
        .wrapper()
        .args(["detect", "--format", "prometheus"])
        .output_within_limit()
        .unwrap();
    let metrics = stdout(&metrics);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("iptables_wrapper_contradicting_evidence{family=\"ipv4\"} ") && !l.ends_with(" 0")),
        "{metrics}"
    );
    // Showing says it is not certain, and shows what both backends hold.
    let out = stale(&node, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("which backend is stale is not certain"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn the_override_needs_its_own_option_against_contradicting_evidence() {
    common::root_or_skip!();
    let node = Node::new("cert-override");
    node.sh(KUBELET_IN_LEGACY);
    let with_override = |args: &[&str]| stale_by_override(&node, args);
    let before = legacy_saves(&node);
    let out = with_override(&["--remove", "--allow-opening"]);
    assert_eq!(out.status.code(), Some(2), "{}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("--despite-contradiction"), "{}", stderr(&out));
    assert_eq!(legacy_saves(&node), before);
    let out = with_override(&["--remove", "--allow-opening", "--despite-contradiction"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stderr(&out).contains("overrides contradicting evidence"),
        "{}",
        stderr(&out)
    );
    assert!(!legacy_saves(&node).contains("-A "), "{}", legacy_saves(&node));
}

#[test]
fn host_link_candidates_that_disagree_are_refused() {
    common::root_or_skip!();
    let node = Node::new("cert-links");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    std::fs::create_dir_all(node.host_root.join("usr/sbin")).unwrap();
    std::os::unix::fs::symlink("iptables-legacy", node.host_root.join("usr/sbin/iptables")).unwrap();
    node.sh("iptables-legacy -A INPUT -s 10.0.0.1 -j ACCEPT");
    assert_refused(
        &node,
        &["--remove"],
        &["usr/sbin/iptables -> iptables-legacy points to legacy"],
    );
}

/// Twenty `INPUT ... DROP` rules by `tool`.
fn twenty_drops(tool: &str) -> String {
    format!("for i in $(seq 1 20); do {tool} -A INPUT -s 10.0.0.$i -j DROP; done")
}

#[test]
fn a_stray_hint_chain_beside_one_rule_is_refused_either_way() {
    common::root_or_skip!();
    // nft: kube-proxy's canary and one MASQUERADE; legacy: 20 DROP rules.
    let node = Node::new("cert-stray-nft");
    node.sh(&format!(
        "iptables-nft -t mangle -N KUBE-PROXY-CANARY\niptables-nft -t nat -A POSTROUTING -j MASQUERADE\n{}",
        twenty_drops("iptables-legacy")
    ));
    assert_refused_by_hint(&node);
    drop(node);
    // The mirror image: legacy's hint chain and one rule, 20 nft rules.
    let node = Node::new("cert-stray-legacy");
    node.sh(&format!(
        "iptables-legacy -t mangle -N KUBE-IPTABLES-HINT\niptables-legacy -t nat -A POSTROUTING -j MASQUERADE\n{}",
        twenty_drops("iptables-nft")
    ));
    assert_refused_by_hint(&node);
}

#[test]
fn a_hint_chain_in_a_native_nftables_table_is_refused() {
    common::root_or_skip!();
    // A hint chain in a native `ip mangle` table beside
    // one counter rule.
    let node = Node::new("cert-native-hint");
    node.sh(&format!(
        "nft add table ip mangle
nft add chain ip mangle KUBE-PROXY-CANARY
nft add chain ip mangle PREROUTING '{{ type filter hook prerouting priority -150; }}'
nft add rule ip mangle PREROUTING counter
{}",
        twenty_drops("iptables-legacy")
    ));
    assert_refused(&node, &["--remove"], &[]);
    // With kube-proxy-like chains and rules, but in a table iptables-nft
    // never makes (one with a comment), and one rule of iptables-nft's
    // own elsewhere: still refused.
    node.sh("nft delete table ip mangle
nft add table ip mangle '{ comment \"native\"; }'
nft add chain ip mangle KUBE-PROXY-CANARY
nft add chain ip mangle KUBE-SERVICES
nft add rule ip mangle KUBE-SERVICES counter accept
iptables-nft -t nat -A POSTROUTING -j MASQUERADE");
    assert_refused(&node, &["--remove"], &[]);
}

#[test]
fn a_legacy_firewall_on_an_nft_host_is_left_unless_told() {
    common::root_or_skip!();
    let node = Node::new("cert-ferm");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    // What ferm writes with iptables-legacy-restore on an nft host.
    node.sh("iptables-legacy-restore <<'EOF'
*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:ferm-blocked - [0:0]
-A INPUT -i lo -j ACCEPT
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -s 192.0.2.0/24 -j ferm-blocked
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A ferm-blocked -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A POSTROUTING -o eth9 -j MASQUERADE
COMMIT
EOF
iptables-nft -A INPUT -s 10.9.9.9/32 -m conntrack --ctstate NEW -j ACCEPT");
    let before = legacy_saves(&node);
    // Shown (nft's rule keeps defragmentation on): filter may open the host, and nat, which goes only with it
    // (its port forwards feed filter), is left with it.
    let shown = json(&stale(&node, &["--json"]));
    let tables = shown["findings"][0]["tables"].as_array().unwrap().clone();
    let table = |name: &str| tables.iter().find(|t| t["table"] == name).unwrap().clone();
    assert_eq!(table("filter")["would_open"], true, "{shown}");
    assert_eq!(table("nat")["would_open"], true, "{shown}");
    assert!(
        table("nat")["opening"]
            .as_str()
            .unwrap()
            .contains("left with the filter table of its family"),
        "{shown}"
    );
    let out = stale(&node, &["--remove"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(
        text.contains("left as it was: legacy ipv4 filter: removing it opens: tcp any → any:any, arriving for the host by any interface, NEW (now: dropped legacy filter INPUT policy DROP; after: passes nft filter INPUT policy ACCEPT); removing it may open the host (nft holds no `:INPUT DROP`, which blocks): 4 items that nft holds no twin of (principle of the first: a policy other than ACCEPT needs the same policy, its chain reaching it the same way): :INPUT DROP; :FORWARD DROP; -A INPUT -s 192.0.2.0/24 -j ferm-blocked; -A ferm-blocked -j DROP; where the first of them differs: chain INPUT, rule 1: legacy `-A INPUT -i lo -j ACCEPT`, nft `-A INPUT -s 10.9.9.9/32 -m conntrack --ctstate NEW -j ACCEPT` (`iptables-wrapper stale` shows its chains side by side; --allow-opening removes it anyway)"),
        "{text}"
    );
    assert!(
        text.contains("left as it was: legacy ipv4 nat: left with the filter table of its family"),
        "{text}"
    );
    assert_eq!(legacy_saves(&node), before, "filter and nat as they were");
    let out = stale(&node, &["--remove", "--allow-opening"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(!legacy_saves(&node).contains("DROP"), "{}", legacy_saves(&node));
}

/// The same restore input into both backends.
fn into_both(node: &Node, rules: &str) {
    node.sh(&format!(
        "iptables-legacy-restore <<'EOF'\n{rules}EOF\niptables-nft-restore <<'EOF'\n{rules}EOF"
    ));
}

#[test]
fn kube_proxys_upgrade_still_removes() {
    common::root_or_skip!();
    let node = Node::new("cert-kube-proxy");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    into_both(
        &node,
        "*mangle
:KUBE-IPTABLES-HINT - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:KUBE-PROXY-CANARY - [0:0]
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-SERVICES - [0:0]
-A INPUT -j KUBE-FIREWALL
-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment \"block incoming localnet connections\" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment \"kube-system/kube-dns:dns-tcp has no endpoints\" -m tcp --dport 53 -j REJECT --reject-with icmp-port-unreachable
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m tcp --dport 443 -j DNAT --to-destination 10.244.0.9:6443
COMMIT
",
    );
    let nft_before = nft_ruleset(&node);
    let shown = json(&stale(&node, &["--json"]));
    for table in shown["findings"][0]["tables"].as_array().unwrap() {
        assert_eq!(table["would_open"], false, "{shown}");
    }
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(!legacy_saves(&node).contains("KUBE"), "{}", legacy_saves(&node));
    assert_eq!(nft_ruleset(&node), nft_before);
}

#[test]
fn dockers_upgrade_with_its_forward_drop_still_removes() {
    common::root_or_skip!();
    let node = Node::new("cert-docker");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    into_both(
        &node,
        "*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER - [0:0]
:DOCKER-ISOLATION-STAGE-1 - [0:0]
:DOCKER-ISOLATION-STAGE-2 - [0:0]
:DOCKER-USER - [0:0]
-A FORWARD -j DOCKER-USER
-A FORWARD -j DOCKER-ISOLATION-STAGE-1
-A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A FORWARD -o docker0 -j DOCKER
-A FORWARD -i docker0 ! -o docker0 -j ACCEPT
-A DOCKER-ISOLATION-STAGE-1 -i docker0 ! -o docker0 -j DOCKER-ISOLATION-STAGE-2
-A DOCKER-ISOLATION-STAGE-1 -j RETURN
-A DOCKER-ISOLATION-STAGE-2 -o docker0 -j DROP
-A DOCKER-ISOLATION-STAGE-2 -j RETURN
-A DOCKER-USER -j RETURN
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:DOCKER - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
-A DOCKER -i docker0 -j RETURN
COMMIT
",
    );
    node.sh("iptables-nft -t mangle -N KUBE-PROXY-CANARY\niptables-nft -t nat -N KUBE-SERVICES && iptables-nft -t nat -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination 10.244.0.9:6443 && iptables-nft -t nat -A PREROUTING -j KUBE-SERVICES");
    let nft_before = nft_ruleset(&node);
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let after = legacy_saves(&node);
    assert!(!after.contains("DOCKER") && !after.contains("DROP"), "{after}");
    assert_eq!(nft_ruleset(&node), nft_before);
}

/// Asserts that removing with `args` left the legacy tables as they were,
/// saying why (exit 1).
fn assert_held_open(node: &Node, args: &[&str], why: &str) {
    let before = legacy_saves(node);
    let out = stale(node, args);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
    assert!(text.contains(why), "{text}");
    assert_eq!(legacy_saves(node), before);
}

#[test]
fn a_queue_or_unknown_verdict_counts_as_filtering() {
    common::root_or_skip!();
    for verdict in ["NFQUEUE --queue-num 3", "QUEUE"] {
        let node = Node::new("cert-queue");
        node.set_host_link("iptables", "/usr/sbin/iptables-nft");
        node.sh(&format!(
            "iptables-nft -A OUTPUT -d 192.0.2.9 -j ACCEPT; iptables-legacy -A INPUT -p tcp --dport 8080 -j {verdict}"
        ));
        assert_held_open(
            &node,
            &["--remove"],
            &format!("removing it may open the host (nft holds no `-A INPUT -p tcp -m tcp --dport 8080 -j {verdict}`, which blocks): 1 item that nft holds no twin of (principle of the first: a block needs its twin, reached the same way): -A INPUT -p tcp -m tcp --dport 8080 -j {verdict}"),
        );
    }
}

#[test]
fn a_rule_the_live_chain_reaches_only_behind_an_accept_is_not_enforced() {
    common::root_or_skip!();
    let node = Node::new("cert-order");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("iptables-legacy -A INPUT -p tcp --dport 8080 -j DROP
iptables-nft -A INPUT -j ACCEPT
iptables-nft -A INPUT -p tcp --dport 8080 -j DROP");
    assert_held_open(&node, &["--remove"], "-A INPUT -p tcp -m tcp --dport 8080 -j DROP");
    // Behind a RETURN in a user chain, likewise.
    let node = Node::new("cert-order-return");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh(
        "for t in iptables-legacy iptables-nft; do $t -N c; $t -A INPUT -j c; done
iptables-legacy -A c -p tcp --dport 8080 -j DROP
iptables-nft -A c -j RETURN
iptables-nft -A c -p tcp --dport 8080 -j DROP",
    );
    assert_held_open(&node, &["--remove"], "-A c -p tcp -m tcp --dport 8080 -j DROP");
    // The same rules in the same order, an ACCEPT before them in both: removed.
    node.sh("iptables-legacy -I c -j RETURN");
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(!legacy_saves(&node).contains("8080"));
}

#[test]
fn a_hint_chain_of_another_writer_in_the_chosen_backend_does_not_silence_kubelets() {
    common::root_or_skip!();
    let node = Node::new("cert-stray-writer");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh(
        "for c in KUBE-IPTABLES-HINT KUBE-KUBELET-CANARY; do iptables-legacy -t mangle -N $c; done
iptables-legacy -t nat -N KUBE-SERVICES
iptables-legacy -t nat -A PREROUTING -j KUBE-SERVICES
iptables-legacy -t nat -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination 192.0.2.10:6443
iptables-nft -t mangle -N KUBE-PROXY-CANARY",
    );
    assert_refused(
        &node,
        &["--remove"],
        &[
            "ipv4: legacy ipv4 mangle chain KUBE-IPTABLES-HINT",
            "ipv4: legacy ipv4 mangle chain KUBE-KUBELET-CANARY",
        ],
    );
    // One of kubelet's chains in nft does not stand for both.
    node.sh("iptables-nft -t mangle -N KUBE-IPTABLES-HINT");
    assert_refused(
        &node,
        &["--remove"],
        &["ipv4: legacy ipv4 mangle chain KUBE-KUBELET-CANARY"],
    );
    // Both of kubelet's chains in nft, beside its rules: kubelet writes there.
    node.sh("iptables-nft -t mangle -N KUBE-KUBELET-CANARY
iptables-nft -t nat -A POSTROUTING -s 10.244.0.0/16 -j MASQUERADE");
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn kube_proxys_nft_table_contradicts_legacy_whatever_the_hint_chains() {
    common::root_or_skip!();
    let node = Node::new("cert-kp-table");
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    node.sh("nft add table ip kube-proxy; nft add chain ip kube-proxy services
for t in iptables-nft iptables-legacy; do $t -t mangle -N KUBE-IPTABLES-HINT; $t -t mangle -N KUBE-PROXY-CANARY; done
iptables-nft -A INPUT -s 192.0.2.1 -j DROP");
    assert_refused(&node, &["--remove"], &["ipv4: nft table ip kube-proxy"]);
}

#[test]
fn a_live_nft_chain_counts_only_as_iptables_nfts_base_chain() {
    common::root_or_skip!();
    let node = Node::new("cert-nohook");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    // A regular chain named INPUT: iptables-nft-save prints its rule as
    // `-A INPUT ...`, but no hook reaches it.
    node.sh("iptables-legacy -A INPUT -p tcp --dport 8080 -j DROP
nft add table ip filter
nft add chain ip filter INPUT
nft add rule ip filter INPUT tcp dport 8080 counter drop");
    assert_held_open(&node, &["--remove"], "-A INPUT -p tcp -m tcp --dport 8080 -j DROP");
}

#[test]
fn a_hint_chain_never_decides_a_removal_whatever_stands_beside_it() {
    common::root_or_skip!();
    let node = Node::new("cert-hint-fake");
    // kube-proxy's state in nft (its hint, KUBE-SERVICES reached from
    // PREROUTING: anyone can write these too), and in legacy the nat table
    // of a writer on no list (libvirt's): the hint chain says where
    // kubelet and kube-proxy write, nothing of libvirt.
    node.sh("iptables-nft -t mangle -N KUBE-IPTABLES-HINT
iptables-nft -t nat -N KUBE-SERVICES
iptables-nft -t nat -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination 10.244.0.9:6443
iptables-nft -t nat -A PREROUTING -j KUBE-SERVICES
iptables-legacy -t nat -N LIBVIRT_PRT
iptables-legacy -t nat -A POSTROUTING -j LIBVIRT_PRT
iptables-legacy -t nat -A LIBVIRT_PRT -s 192.168.122.0/24 ! -d 192.168.122.0/24 -j MASQUERADE");
    assert_refused_by_hint(&node);
    // The host's own link says nft: every writer using the host's
    // iptables writes there, so legacy's nat is stale, and goes.
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(!legacy_saves(&node).contains("LIBVIRT"), "{}", legacy_saves(&node));
}

#[test]
fn a_host_link_that_exists_but_cannot_tell_is_refused() {
    common::root_or_skip!();
    let node = Node::new("cert-link-file");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    // /usr/sbin/iptables a regular file (a script running legacy).
    let script = node.host_root.join("usr/sbin/iptables");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    std::fs::write(&script, "#!/bin/sh\nexec iptables-legacy \"$@\"\n").unwrap();
    node.sh("iptables-legacy -A INPUT -s 192.0.2.1 -j ACCEPT");
    assert_refused(
        &node,
        &["--remove"],
        &["usr/sbin/iptables", "cannot tell which backend"],
    );
}

#[test]
fn a_live_rule_its_save_prints_as_another_does_not_enforce_it() {
    common::root_or_skip!();
    let node = Node::new("cert-lossy-live");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    // In nft, a rule of two `tcp dport` matches (no packet has both), which
    // iptables-nft-save prints as `--dport 8080 -j DROP`.
    node.sh("iptables-legacy -A INPUT -s 192.0.2.1 -j DROP
iptables-legacy -A INPUT -p tcp --dport 8080 -j DROP
iptables-nft -A INPUT -s 192.0.2.1 -j DROP
nft add rule ip filter INPUT tcp dport 9999 tcp dport 8080 counter drop");
    assert_held_open(
        &node,
        &["--remove"],
        "its own table of that name was not counted: its save does not restore it exactly",
    );
    let shown = stale(&node, &["--json"]);
    assert!(stdout(&shown).contains("\"would_open\":true"), "{}", stdout(&shown));
    // The same rule written by iptables-nft: enforced, and removed.
    node.sh("nft flush chain ip filter INPUT
iptables-nft -A INPUT -s 192.0.2.1 -j DROP
iptables-nft -A INPUT -p tcp --dport 8080 -j DROP");
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(!legacy_saves(&node).contains("8080"));
}

#[test]
fn each_familys_own_link_outranks_the_ipv4_one_read_for_it() {
    common::root_or_skip!();
    // Debian switched one alternatives group at a time: iptables still
    // legacy, ip6tables already nft.
    let node = Node::new("cert-mid-switch");
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    node.sh("iptables-legacy -A INPUT -s 192.0.2.1 -j ACCEPT
ip6tables-nft -A INPUT -s 2001:db8::1 -j ACCEPT
iptables-nft -A INPUT -s 192.0.2.2 -j ACCEPT
ip6tables-legacy -A INPUT -s 2001:db8::2 -j ACCEPT");
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let (legacy, nft) = (legacy_saves(&node), nft_ruleset(&node));
    assert!(
        legacy.contains("192.0.2.1") && !legacy.contains("2001:db8::2"),
        "{legacy}"
    );
    assert!(nft.contains("2001:db8::1") && !nft.contains("192.0.2.2"), "{nft}");
}

#[test]
fn families_decided_apart_are_not_told_to_set_one_override_for_both() {
    common::root_or_skip!();
    let node = Node::new("cert-apart");
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    node.sh("iptables-legacy -A INPUT -s 192.0.2.1 -j ACCEPT
ip6tables-legacy -t mangle -N KUBE-IPTABLES-HINT
ip6tables-legacy -A INPUT -s 2001:db8::2 -j ACCEPT");
    assert_refused(
        &node,
        &["--remove"],
        &["ipv6: legacy ipv6 mangle chain KUBE-IPTABLES-HINT"],
    );
    let err = stderr(&stale(&node, &["--remove"]));
    assert!(
        err.contains("decided apart here: ipv4 legacy, ipv6 nft") && !err.contains("set IPTABLES_MODE="),
        "{err}"
    );
    // The refusal's JSON carries both families' decisions.
    let report = json(&stale(&node, &["--remove", "--json"]));
    assert_eq!(report["certain"], false, "{report}");
    assert_eq!(report["hosts"][0]["mode"], "legacy", "{report}");
    assert_eq!(report["hosts"][1]["mode"], "nft", "{report}");
    assert!(
        report["contradicted_by"][0]
            .as_str()
            .unwrap()
            .contains("KUBE-IPTABLES-HINT"),
        "{report}"
    );
}

#[test]
fn a_native_table_left_alone_is_not_called_nothing_stale() {
    common::root_or_skip!();
    let node = Node::new("cert-native-left");
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    node.sh("nft add table ip filter
nft add chain ip filter mine '{ type filter hook input priority 10; }'
nft add rule ip filter mine counter drop");
    let out = stale(&node, &[]);
    let text = stdout(&out);
    assert!(
        text.contains("left alone: nft ipv4 filter")
            && text.contains("the tables left alone above are not iptables-nft's own"),
        "{text}"
    );
    assert!(!text.contains("\nnothing stale in"), "{text}");
}

#[test]
fn a_goto_or_return_ends_the_chain_for_what_follows() {
    common::root_or_skip!();
    // A live `-g` to a chain that falls through ends INPUT at its policy:
    // the live DROP behind it is never reached.
    let node = Node::new("cert-goto");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("iptables-legacy -A INPUT -p tcp --dport 22 -j DROP
iptables-nft -N EMPTY
iptables-nft -A INPUT -g EMPTY
iptables-nft -A INPUT -p tcp --dport 22 -j DROP");
    assert_held_open(&node, &["--remove"], "-A INPUT -p tcp -m tcp --dport 22 -j DROP");
    // A stale RETURN (or -g) in a built-in chain takes packets to its DROP
    // policy; the live chain, without it, accepts them.
    for early in ["-p tcp --dport 22 -j RETURN", "-g EMPTY"] {
        let node = Node::new("cert-return");
        node.set_host_link("iptables", "/usr/sbin/iptables-nft");
        node.sh(&format!(
            "iptables-legacy -N EMPTY
iptables-legacy -A INPUT {early}
iptables-legacy -A INPUT -p tcp --dport 22 -j ACCEPT
iptables-legacy -P INPUT DROP
iptables-nft -A INPUT -p tcp --dport 22 -j ACCEPT
iptables-nft -P INPUT DROP"
        ));
        assert_held_open(&node, &["--remove"], ":INPUT DROP");
    }
}

#[test]
fn a_rule_that_changes_packets_counts_where_the_live_backend_filters() {
    common::root_or_skip!();
    // Legacy marks port 22 in mangle; nft drops what is marked.
    let node = Node::new("cert-mark");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("iptables-nft -A INPUT -m mark --mark 0x1 -j DROP
iptables-legacy -t mangle -A PREROUTING -p tcp --dport 22 -j MARK --set-mark 0x1");
    assert_held_open(
        &node,
        &["--remove"],
        "-A PREROUTING -p tcp -m tcp --dport 22 -j MARK --set-xmark 0x1/0xffffffff",
    );
    // The same mark set in nft too: removed.
    node.sh("iptables-nft -t mangle -A PREROUTING -p tcp --dport 22 -j MARK --set-mark 0x1");
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    // A live mark before the same DROP changes what the DROP matches.
    let node = Node::new("cert-livemark");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("iptables-nft -A INPUT -j MARK --set-mark 0x5
iptables-nft -A INPUT -p tcp --dport 22 -m mark ! --mark 0x5 -j DROP
iptables-legacy -A INPUT -p tcp --dport 22 -m mark ! --mark 0x5 -j DROP");
    assert_held_open(&node, &["--remove"], "--mark 0x5 -j DROP");
}

#[test]
fn a_user_chain_named_like_a_target_is_judged_as_the_chain() {
    common::root_or_skip!();
    let node = Node::new("cert-chain-log");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("iptables-legacy -A INPUT -p tcp --dport 22 -j DROP
printf '*filter\\n:INPUT ACCEPT [0:0]\\n:LOG - [0:0]\\n-A INPUT -j LOG\\n-A INPUT -p tcp -m tcp --dport 22 -j DROP\\n-A LOG -j ACCEPT\\nCOMMIT\\n' | iptables-nft-restore");
    assert_held_open(&node, &["--remove"], "-A INPUT -p tcp -m tcp --dport 22 -j DROP");
}

#[test]
fn a_backend_holding_nothing_beside_the_others_rules_is_refused() {
    common::root_or_skip!();
    // The host link says nft; nft holds nothing, legacy a working NAT:
    // something wrote it since boot, and writes there.
    let node = Node::new("cert-counts");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("iptables-legacy -t nat -A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE");
    assert_refused(
        &node,
        &["--remove"],
        &["ipv4: in ipv4 legacy holds 1 rule while nft holds none"],
    );
}

#[test]
fn the_backup_holds_only_the_families_emptied() {
    common::root_or_skip!();
    // ipv4's filter is held, and its nat with it; ipv6's nat goes.
    let node = Node::new("cert-held-backup");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    // nft's rules keep defragmentation on in both families.
    node.sh(
        "iptables-nft -A OUTPUT -d 192.0.2.9 -m conntrack --ctstate NEW -j ACCEPT
ip6tables-nft -A OUTPUT -d 2001:db8::9 -m conntrack --ctstate NEW -j ACCEPT
iptables-legacy -A INPUT -p tcp --dport 22 -j DROP
iptables-legacy -t nat -A PREROUTING -p tcp --dport 81 -j REDIRECT --to-ports 80
ip6tables-legacy -t nat -A PREROUTING -p tcp --dport 81 -j REDIRECT --to-ports 80",
    );
    let out = stale(&node, &["--remove", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let report = json(&out);
    let files = report["removal"]["backup_files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{report}");
    let file = files[0]["path"].as_str().unwrap().to_string();
    assert!(file.ends_with("ip6tables-legacy.rules"), "{report}");
    let backup = std::fs::read_to_string(&file).unwrap();
    assert!(backup.contains("*nat") && !backup.contains("*filter"), "{backup}");
    assert_eq!(
        report["removal"]["emptied"],
        serde_json::json!([{"backend": "legacy", "family": "ipv6", "table": "nat"}]),
        "{report}"
    );
}

#[test]
fn a_writers_chains_in_the_stale_backend_alone_contradict_one_stray_rule() {
    common::root_or_skip!();
    // Docker's whole state in legacy; nft holds one MASQUERADE (a CNI
    // plugin's), the host link says nft.
    let node = Node::new("cert-docker-stray");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh(
        "iptables-legacy -N DOCKER; iptables-legacy -A FORWARD -o docker0 -j DOCKER
iptables-legacy -t nat -N DOCKER; iptables-legacy -t nat -A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
iptables-legacy -t nat -A DOCKER ! -i docker0 -p tcp --dport 8080 -j DNAT --to-destination 172.17.0.2:80
iptables-legacy -t nat -A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
iptables-nft -t nat -A POSTROUTING -s 10.88.0.0/16 -j MASQUERADE",
    );
    assert_refused(
        &node,
        &["--remove"],
        &["ipv4: legacy ipv4 holds Docker's chains that nft does not hold alike (filter DOCKER, nat DOCKER with 1 rule)"],
    );
}

#[test]
fn a_mark_a_native_nftables_filter_reads_needs_its_twin() {
    common::root_or_skip!();
    // The host filters in a native inet table that drops marked packets;
    // legacy's mangle marks port 8080.
    let node = Node::new("cert-native-mark");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("nft add table inet fw
nft add chain inet fw input '{ type filter hook input priority 0; }'
nft add rule inet fw input tcp dport 8080 meta mark 0x1 drop
iptables-nft -t nat -A POSTROUTING -s 10.88.0.0/16 -j MASQUERADE
iptables-legacy -t mangle -A PREROUTING -p tcp --dport 8080 -j MARK --set-mark 0x1");
    assert_held_open(
        &node,
        &["--remove"],
        "removing it is not proven safe: 1 item that nft holds no twin of (principle of the first: a change, a shared state or a name not known needs its whole chain's twin): -A PREROUTING -p tcp -m tcp --dport 8080 -j MARK --set-xmark 0x1/0xffffffff",
    );
}

#[test]
fn a_stateful_match_without_a_verdict_counts_where_the_live_backend_reads_it() {
    common::root_or_skip!();
    let node = Node::new("cert-recent-set");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh(
        "iptables-nft -A INPUT -p tcp --dport 8081 -m recent --name BAD --rcheck --seconds 2 -j DROP
iptables-legacy -t mangle -A PREROUTING -p tcp --dport 8081 -m recent --name BAD --set",
    );
    assert_held_open(&node, &["--remove"], "-m recent --set --name BAD");
}
