//! Each decision step deciding on its own, and their precedence, through the
//! real binary against real iptables-legacy / iptables-nft in a fresh network
//! namespace per test.

mod common;

use common::seccomp::refuse_syscall;
use common::Node;
use common::OutputWithin as _;

/// Rules in legacy: `n` ACCEPT rules in filter INPUT (IPv4).
fn legacy_rules(node: &Node, n: usize) {
    node.sh(&format!(
        "for i in $(seq {n}); do iptables-legacy -A INPUT -s 10.0.0.$i -j ACCEPT; done"
    ));
}

fn nft_rules(node: &Node, n: usize) {
    node.sh(&format!(
        "for i in $(seq {n}); do iptables-nft -A INPUT -s 10.0.0.$i -j ACCEPT; done"
    ));
}

fn decided_by(node: &Node) -> (String, String) {
    let report = node.detect();
    (
        report["mode"].as_str().unwrap().to_string(),
        report["decided_by"].as_str().unwrap().to_string(),
    )
}

#[test]
fn override_decides_alone() {
    common::root_or_skip!();
    let node = Node::new("override");
    for (value, mode) in [
        ("legacy", "legacy"),
        ("NFT", "nft"),
        ("nf_tables", "nft"),
        ("Legacy", "legacy"),
    ] {
        let out = node
            .command("iptables")
            .env("IPTABLES_MODE", value)
            .arg("-V")
            .output_within_limit()
            .unwrap();
        assert!(String::from_utf8_lossy(&out.stdout).contains(if mode == "nft" { "(nf_tables)" } else { "(legacy)" }));
    }
    let out = node
        .wrapper()
        .env("IPTABLES_MODE", "legacy")
        .args(["detect", "--json"])
        .output_within_limit()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["decided_by"], "override");
    assert!(report["reason"].as_str().unwrap().contains("IPTABLES_MODE"));
    // "auto" and empty mean detect: an empty namespace detects nft.
    for value in ["auto", ""] {
        let out = node
            .command("iptables")
            .env("IPTABLES_MODE", value)
            .arg("-V")
            .output_within_limit()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("(nf_tables)"),
            "IPTABLES_MODE={value:?}"
        );
    }
}

#[test]
fn host_link_decides_alone() {
    common::root_or_skip!();
    let node = Node::new("hostlink");
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    assert_eq!(node.version_mode("iptables"), "legacy");
    assert_eq!(
        node.version_mode("ip6tables"),
        "legacy",
        "ip6tables falls back to the iptables link"
    );
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    assert_eq!(node.version_mode("ip6tables"), "nft");
    assert_eq!(node.version_mode("iptables"), "legacy");
    assert_eq!(decided_by(&node), ("legacy".into(), "host-link".into()));
    // A link to a wrapper is no hint: detection goes on (and finds no
    // legacy table).
    node.set_host_link("iptables", "/usr/sbin/iptables-wrapper");
    assert_eq!(decided_by(&node), ("nft".into(), "rule-counts".into()));
}

#[test]
fn host_without_alternatives_links_usr_sbin() {
    common::root_or_skip!();
    let node = Node::new("usrsbin");
    std::fs::create_dir_all(node.host_root.join("usr/sbin")).unwrap();
    std::os::unix::fs::symlink("xtables-legacy-multi", node.host_root.join("usr/sbin/iptables")).unwrap();
    assert_eq!(node.version_mode("iptables-save"), "legacy");
}

#[test]
fn host_link_flip_is_followed_on_the_next_call() {
    common::root_or_skip!();
    let node = Node::new("flip");
    legacy_rules(&node, 3);
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    assert_eq!(node.version_mode("iptables"), "legacy");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    assert_eq!(
        node.version_mode("iptables"),
        "nft",
        "no stickiness: the second call follows the link"
    );
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    assert_eq!(node.version_mode("iptables"), "legacy");
}

#[test]
fn nft_hint_chain_decides_alone() {
    common::root_or_skip!();
    let node = Node::new("nfthint");
    node.sh("iptables-nft -t mangle -N KUBE-IPTABLES-HINT");
    legacy_rules(&node, 5); // more legacy rules than nft ones: the hint still wins
    assert_eq!(node.version_mode("iptables"), "nft");
    assert_eq!(decided_by(&node), ("nft".into(), "hint-chain".into()));
}

#[test]
fn ipv6_canary_in_nft_decides() {
    common::root_or_skip!();
    let node = Node::new("canary6");
    node.sh("ip6tables-nft -t mangle -N KUBE-KUBELET-CANARY");
    legacy_rules(&node, 2);
    assert_eq!(decided_by(&node), ("nft".into(), "hint-chain".into()));
}

#[test]
fn legacy_hint_chain_decides_alone() {
    common::root_or_skip!();
    let node = Node::new("legacyhint");
    node.sh("iptables-legacy -t mangle -N KUBE-IPTABLES-HINT");
    nft_rules(&node, 5); // more nft rules: the legacy hint still wins
    assert_eq!(node.version_mode("iptables"), "legacy");
    assert_eq!(decided_by(&node), ("legacy".into(), "hint-chain".into()));
}

#[test]
fn kube_proxy_nft_table_decides_where_legacy_holds_no_rules() {
    common::root_or_skip!();
    let node = Node::new("kubeproxy");
    // Legacy tables a read-only listing made: no rules.
    node.sh("nft add table ip kube-proxy && iptables-legacy -L -n >/dev/null");
    assert_eq!(node.version_mode("iptables"), "nft");
    assert_eq!(decided_by(&node), ("nft".into(), "kube-proxy-table".into()));
    // The table holds none of iptables' rules: legacy's rules outweigh it.
    legacy_rules(&node, 4);
    assert_eq!(node.version_mode("iptables"), "legacy");
    assert_eq!(decided_by(&node), ("legacy".into(), "rule-counts".into()));
}

#[test]
fn rule_counts_decide_both_ways() {
    common::root_or_skip!();
    let node = Node::new("counts");
    legacy_rules(&node, 4);
    nft_rules(&node, 2);
    assert_eq!(node.version_mode("iptables"), "legacy");
    assert_eq!(decided_by(&node), ("legacy".into(), "rule-counts".into()));
    node.sh("for i in 1 2 3; do ip6tables-nft -A INPUT -j ACCEPT; done"); // v4 and v6 count together: 5 > 4
    assert_eq!(node.version_mode("iptables"), "nft");
    assert_eq!(decided_by(&node), ("nft".into(), "rule-counts".into()));
}

#[test]
fn a_tie_is_not_a_reason_for_legacy() {
    common::root_or_skip!();
    let node = Node::new("tie");
    legacy_rules(&node, 3);
    nft_rules(&node, 3);
    // The setup's legacy calls left a 0600 lock file, a weak legacy hint that
    // would break the tie; the host's kubelet-made one is 0644.
    std::fs::remove_file(&node.lockfile).unwrap();
    assert_eq!(node.version_mode("iptables"), "nft");
    let report = node.detect();
    assert_eq!(report["decided_by"], "default");
    // The reason says the counts were read and tied, not that nothing was found.
    assert_eq!(
        report["reason"],
        "the rule counts tie (legacy 3, nft 3) and nothing else decides: nft is the default"
    );
    assert_eq!(report["rule_counts"]["legacy"]["exact"], 3);
    assert_eq!(report["rule_counts"]["nft"]["exact"], 3);
}

#[test]
fn lock_file_created_by_legacy_is_a_weak_hint() {
    common::root_or_skip!();
    let node = Node::new("lock");
    // kubelet's FileOrCreate: 0644, proves nothing.
    std::fs::write(&node.lockfile, "").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&node.lockfile, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        decided_by(&node),
        ("nft".into(), "rule-counts".into()),
        "no legacy table"
    );
    // Legacy iptables creates it 0600.
    std::fs::remove_file(&node.lockfile).unwrap();
    node.sh("iptables-legacy -w -P FORWARD DROP");
    assert_eq!(
        std::fs::metadata(&node.lockfile).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // A legacy table with a DROP policy and no rule: counts tie at 0, and
    // the policy is the legacy trace the lock stands beside.
    assert_eq!(node.version_mode("iptables"), "legacy");
    assert_eq!(decided_by(&node), ("legacy".into(), "xtables-lock".into()));
    // Counts outrank the weak hint.
    nft_rules(&node, 1);
    assert_eq!(decided_by(&node), ("nft".into(), "rule-counts".into()));
}

#[test]
fn a_held_lock_is_a_weak_hint() {
    common::root_or_skip!();
    let node = Node::new("heldlock");
    // A legacy DROP policy without rules (made with another lock file):
    // counts tie at 0.
    common::sh(&format!(
        "XTABLES_LOCKFILE={} iptables-legacy -P FORWARD DROP",
        node.path("other.lock").display()
    ));
    std::fs::write(&node.lockfile, "").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&node.lockfile, std::fs::Permissions::from_mode(0o644)).unwrap();
    let file = std::fs::File::open(&node.lockfile).unwrap();
    let held = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let report = node.detect();
    assert_eq!(report["decided_by"], "xtables-lock", "{report}");
    drop(held);
    assert_eq!(decided_by(&node), ("nft".into(), "default".into()));
}

#[test]
fn empty_namespace_goes_to_nft_for_want_of_legacy_tables() {
    common::root_or_skip!();
    let node = Node::new("default");
    assert_eq!(node.version_mode("iptables"), "nft");
    let report = node.detect();
    assert_eq!(report["decided_by"], "rule-counts", "{report}");
    assert!(
        report["reason"].as_str().unwrap().contains("no legacy table exists"),
        "{report}"
    );
    // Empty legacy tables (a read-only `iptables-legacy -L` makes them) are
    // tables: then the counts tie at 0 and the default decides.
    node.sh("iptables-legacy -L >/dev/null");
    assert_eq!(decided_by(&node), ("nft".into(), "default".into()));
}

/// The source and mode a wrapped call logs, from its debug line
/// (`mode=M source=S (reason)`).
fn call_decided_by(node: &Node) -> (String, String) {
    let out = node
        .command("iptables")
        .arg("-V")
        .env("IPTABLES_WRAPPER_LOG", "debug")
        .output_within_limit()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    let field = |name: &str| {
        log.split_whitespace()
            .find_map(|word| word.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {log}"))
            .to_string()
    };
    (field("mode="), field("source="))
}

/// `detect` explains what wrapped calls do: for each state, a wrapped call
/// (which stops reading at the first source that decides) and `detect`
/// (which reads everything) name the same mode and the same source.
#[test]
fn a_wrapped_call_and_detect_name_the_same_source() {
    common::root_or_skip!();
    let node = Node::new("same-source");
    let lock = node.lockfile.display().to_string();
    let steps = [
        ("empty namespace", String::new(), "rule-counts"),
        (
            "nft rules only",
            "iptables-nft -A INPUT -j ACCEPT".to_string(),
            "rule-counts",
        ),
        (
            "more legacy rules",
            "iptables-legacy -w -A INPUT -j ACCEPT; iptables-legacy -w -A INPUT -j ACCEPT".to_string(),
            "rule-counts",
        ),
        (
            "a tie beside a 0600 lock",
            "iptables-nft -A INPUT -j ACCEPT".to_string(),
            "xtables-lock",
        ),
        ("a tie without a lock", format!("rm -f {lock}"), "default"),
        (
            // It holds no iptables rule, and legacy holds two: no decision.
            "kube-proxy's nftables table beside legacy rules",
            "nft add table ip kube-proxy".to_string(),
            "default",
        ),
        (
            "a legacy hint chain",
            format!("iptables-legacy -t mangle -N KUBE-IPTABLES-HINT; rm -f {lock}"),
            "hint-chain",
        ),
        (
            "an nft hint chain too",
            "iptables-nft -t mangle -N KUBE-KUBELET-CANARY".to_string(),
            "hint-chain",
        ),
    ];
    for (state, script, source) in steps {
        if !script.is_empty() {
            node.sh(&script);
        }
        let report = node.detect();
        let detected = (
            report["mode"].as_str().unwrap().to_string(),
            report["decided_by"].as_str().unwrap().to_string(),
        );
        assert_eq!(detected.1, source, "{state}: {report}");
        assert_eq!(call_decided_by(&node), detected, "{state}: {report}");
    }
}

#[test]
fn precedence_override_link_hint_counts_lock() {
    common::root_or_skip!();
    let node = Node::new("precedence");
    // Lowest first: a legacy lock hint, outranked by nft counts...
    node.sh("iptables-legacy -w -N SOMETHING && iptables-legacy -X SOMETHING");
    nft_rules(&node, 2);
    assert_eq!(decided_by(&node).1, "rule-counts");
    // ...outranked by a legacy hint chain (legacy now also leads the count)...
    node.sh("iptables-legacy -t mangle -N KUBE-IPTABLES-HINT");
    legacy_rules(&node, 5);
    assert_eq!(decided_by(&node), ("legacy".into(), "hint-chain".into()));
    // ...outranked by an nft hint chain...
    node.sh("iptables-nft -t mangle -N KUBE-KUBELET-CANARY");
    assert_eq!(decided_by(&node), ("nft".into(), "hint-chain".into()));
    // ...outranked by the host link...
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    assert_eq!(decided_by(&node), ("legacy".into(), "host-link".into()));
    // ...outranked by the override.
    let out = node
        .command("iptables")
        .env("IPTABLES_MODE", "nft")
        .arg("-V")
        .output_within_limit()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("(nf_tables)"));
}

#[test]
fn stale_legacy_rules_outnumbering_nft_with_host_link_on_nft() {
    common::root_or_skip!();
    // The Ubuntu 20.04 -> 22.04 upgrade: legacy rules left behind, host now nft.
    let node = Node::new("stale");
    legacy_rules(&node, 20);
    nft_rules(&node, 2);
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    assert_eq!(node.version_mode("iptables"), "nft");
    let report = node.detect();
    assert_eq!(report["mode"], "nft");
    assert_eq!(report["decided_by"], "host-link");
    let warnings = report["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w.as_str().unwrap().contains("legacy rules")),
        "the disagreement is reported: {report}"
    );
    // Every call warns too (on stderr when asked): legacy tables still exist
    // (listing them is a file read; the call makes no kernel query when the
    // host link decides).
    let out = node.version_with_warnings("iptables");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("warn") && stderr.contains("legacy ipv4 tables") && stderr.contains("filter"),
        "{stderr}"
    );
}

#[test]
fn host_link_groups_that_disagree_show_in_detect_while_a_call_stops_at_its_own() {
    common::root_or_skip!();
    // ip6tables follows the ip6tables group; the iptables group says otherwise.
    let node = Node::new("disagree");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    // A wrapped call reads no further than the link that decides it.
    let out = node.version_with_warnings("ip6tables");
    assert!(String::from_utf8_lossy(&out.stdout).contains("(nf_tables)"));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    // detect reads every link and names the disagreeing one.
    let detect_warnings = |node: &Node| {
        let out = node
            .wrapper()
            .args(["detect", "--json", "--for", "ip6tables"])
            .output_within_limit()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["mode"], "nft", "{report}");
        report["warnings"].as_array().unwrap().clone()
    };
    let warnings = detect_warnings(&node);
    assert!(
        warnings.len() == 1 && warnings[0].as_str().unwrap().contains("etc/alternatives/iptables"),
        "{warnings:?}"
    );
    // Agreeing links: no warning at all.
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    assert!(detect_warnings(&node).is_empty());
}

#[test]
fn refused_kernel_queries_are_reported_not_guessed() {
    common::root_or_skip!();
    // Without CAP_NET_ADMIN the kernel refuses both the direct queries and
    // the save tools they fall back to: the evidence is "unknown", and the
    // decision goes on to the next source instead of failing.
    let node = Node::new("refused");
    legacy_rules(&node, 3);
    std::fs::remove_file(&node.lockfile).unwrap();
    let out = node
        .wrapper()
        .env("IPTABLES_WRAPPER_LOG", "debug")
        .args(["detect", "--json"])
        .pre_exec_drop_net_admin()
        .output_within_limit()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["mode"], "nft");
    assert_eq!(report["decided_by"], "default");
    let unknown = report["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["value"].as_str().unwrap().starts_with("unknown"))
        .count();
    assert!(unknown >= 2, "{report}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("falling back to iptables-nft-save"), "{stderr}");
    assert!(stderr.contains("falling back to iptables-legacy-save"), "{stderr}");

    // Legacy refused alone (getsockopt at the IP levels, for the wrapper
    // and the save tool it falls back to), nft read: legacy's 3 rules are
    // unknown, not 0, so nft's 2 do not outnumber them (read as 0, the counts
    // would decide nft); the counts decide nothing and the default does.
    nft_rules(&node, 2);
    let mut detect = node.wrapper();
    detect.env("IPTABLES_WRAPPER_LOG", "debug").args(["detect", "--json"]);
    for level in [libc::SOL_IP, libc::SOL_IPV6] {
        refuse_syscall(&mut detect, libc::SYS_getsockopt, &[(1, level as u32)]);
    }
    let out = detect.output_within_limit().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["mode"].as_str(), report["decided_by"].as_str()),
        (Some("nft"), Some("default")),
        "{report}"
    );
    assert_eq!(report["rule_counts"], serde_json::Value::Null, "{report}");
    let counts: Vec<&str> = report["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == "rule-counts")
        .map(|e| e["value"].as_str().unwrap())
        .collect();
    assert!(
        !counts.is_empty() && counts.iter().all(|v| v.starts_with("unknown: legacy")),
        "{report}"
    );
    let hints: Vec<&str> = report["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == "hint-chain" && e["location"].as_str().unwrap().starts_with("nft"))
        .map(|e| e["value"].as_str().unwrap())
        .collect();
    assert_eq!(hints, ["absent (ipv4, ipv6)"], "nft is read: {report}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("falling back to iptables-legacy-save"), "{stderr}");
    assert!(!stderr.contains("falling back to iptables-nft-save"), "{stderr}");
}

#[test]
fn legacy_tables_whose_contents_are_refused_are_still_warned_about() {
    common::root_or_skip!();
    // A non-root image: the host link says nft, legacy tables exist, and the
    // kernel refuses GET_INFO, so whether they hold rules is unknown. The
    // warning says so; it neither claims stale rules nor stays silent.
    let node = Node::new("refusedstale");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    legacy_rules(&node, 2);
    let out = node
        .command("iptables")
        .env("IPTABLES_WRAPPER_LOG", "warn")
        .arg("-V")
        .pre_exec_drop_net_admin()
        .output_within_limit()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("(nf_tables)"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("legacy ipv4 tables")
            && stderr.contains("whether they hold rules is unknown")
            && stderr.contains("may still apply"),
        "{stderr}"
    );
}

/// Runs the command without CAP_NET_ADMIN (dropped from the bounding set).
trait DropNetAdmin {
    fn pre_exec_drop_net_admin(&mut self) -> &mut Self;
}

impl DropNetAdmin for std::process::Command {
    fn pre_exec_drop_net_admin(&mut self) -> &mut Self {
        use std::os::unix::process::CommandExt;
        const CAP_NET_ADMIN: libc::c_ulong = 12;
        // SAFETY: prctl is async-signal-safe and touches only this child.
        unsafe {
            self.pre_exec(|| {
                if libc::prctl(libc::PR_CAPBSET_DROP, CAP_NET_ADMIN, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        }
    }
}

#[test]
fn mixed_state_is_flagged_with_advice_when_counts_decide() {
    common::root_or_skip!();
    let node = Node::new("mixed");
    legacy_rules(&node, 12);
    nft_rules(&node, 15);
    let report = node.detect();
    assert_eq!(
        (report["mode"].as_str(), report["decided_by"].as_str()),
        (Some("nft"), Some("rule-counts"))
    );
    assert_eq!(report["rule_counts"]["mixed"], true);
    let advice = |report: &serde_json::Value| {
        report["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("mixed state"))
    };
    assert!(advice(&report), "{report}");
    // Once the host link decides, the counts no longer matter: no advice.
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    let report = node.detect();
    assert_eq!(report["rule_counts"]["mixed"], true);
    assert!(!advice(&report), "{report}");
}

#[test]
fn mixed_state_starts_at_ten_rules_in_each_backend() {
    common::root_or_skip!();
    // (legacy rules, nft rules, mixed): 10 in each is mixed, 9 in either not.
    let cases = [(10, 11, true), (11, 10, true), (9, 11, false), (11, 9, false)];
    for (legacy, nft, mixed) in cases {
        let node = Node::new(&format!("mixed-{legacy}-{nft}"));
        legacy_rules(&node, legacy);
        nft_rules(&node, nft);
        let report = node.detect();
        let case = format!("legacy {legacy}, nft {nft}: {report}");
        assert_eq!(report["decided_by"], "rule-counts", "{case}");
        assert_eq!(
            report["rule_counts"]["legacy"]["exact"].as_u64(),
            Some(legacy as u64),
            "{case}"
        );
        assert_eq!(report["rule_counts"]["mixed"], mixed, "{case}");
        let advice = report["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("mixed state"));
        assert_eq!(advice, mixed, "{case}");
    }
}
