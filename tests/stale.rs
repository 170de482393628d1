//! `iptables-wrapper stale`: refusals, showing and its exit codes, removal
//! with its backup, what it must never touch, a wrapped call racing it, and
//! a backup that cannot be written. Each test in a network namespace of its
//! own, against the real iptables-legacy / iptables-nft.

mod common;

use common::OutputWithin as _;

use common::stale::{backup_dir_of, json, legacy_saves, nft_ruleset, stale, stderr, stdout, without_headers};
use common::Node;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

fn listed_tables() -> String {
    common::legacy_tables("ip_tables_names") + "|" + &common::legacy_tables("ip6_tables_names")
}

/// The field report's state: stale legacy rules in several tables, a stale
/// legacy hint chain, a FORWARD DROP policy, IPv6 too; the host's own rules
/// (and its hint chain) in nft, the DROP rules, policy and Service rule
/// written again there (the upgrade: removing legacy's opens nothing).
fn upgraded_node(name: &str) -> Node {
    let node = Node::new(name);
    node.sh("iptables-legacy-restore <<'EOF'
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
-A INPUT -s 10.0.0.1/32 -j DROP
-A FORWARD -j KUBE-FORWARD
-A KUBE-FORWARD -m comment --comment \"stale pods\" -j ACCEPT
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m tcp --dport 443 -j DNAT --to-destination 10.244.0.9:6443
COMMIT
*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-IPTABLES-HINT - [0:0]
COMMIT
EOF
ip6tables-legacy -A INPUT -s 2001:db8::1 -j DROP
iptables-legacy -t raw -L -n >/dev/null
iptables-nft -A INPUT -s 10.0.0.1/32 -j DROP
iptables-nft -A INPUT -s 10.9.9.9/32 -j ACCEPT
iptables-nft -P FORWARD DROP
iptables-nft -t nat -N KUBE-SERVICES
iptables-nft -t nat -A PREROUTING -j KUBE-SERVICES
iptables-nft -t nat -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m tcp --dport 443 -j DNAT --to-destination 10.244.0.9:6443
ip6tables-nft -A INPUT -s 2001:db8::1 -j DROP
iptables-nft -t mangle -N KUBE-IPTABLES-HINT
nft add table ip kube-proxy
nft add chain ip kube-proxy services '{ type nat hook prerouting priority -100; }'
nft add rule ip kube-proxy services ip daddr 10.96.0.1 counter accept");
    node
}

#[test]
fn refuses_when_the_host_backend_is_not_certain() {
    common::root_or_skip!();
    let node = Node::new("refuse");
    node.sh("iptables-legacy -A INPUT -j ACCEPT && iptables-legacy -A INPUT -j ACCEPT");
    let before = legacy_saves(&node);
    let refused = |node: &Node, args: &[&str], why: &str| {
        let out = stale(node, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}{}", stdout(&out), stderr(&out));
        let line = stderr(&out);
        // One line, and one more per contradicting piece of evidence.
        assert_eq!(
            line.lines()
                .filter(|l| !l.contains("refused") && !l.contains("contradicted by: "))
                .count(),
            0,
            "{line}"
        );
        assert_eq!(line.lines().filter(|l| l.contains("refused")).count(), 1, "{line}");
        assert!(
            line.contains("refused")
                && line.contains(why)
                && line.contains("/host/etc/alternatives")
                && line.contains("IPTABLES_MODE=nft"),
            "{line}"
        );
    };
    // Counts decide (legacy 2, nft 0): not certain. Removing is refused;
    // showing shows what each backend holds, and says why neither is
    // certainly the stale one.
    refused(&node, &["--remove"], "rule-counts");
    refused(&node, &["--remove", "--json"], "rule-counts");
    let out = stale(&node, &["--remove", "--json"]);
    assert_eq!(
        json(&out)["refused"].as_str().map(|r| r.contains("rule-counts")),
        Some(true)
    );
    let out = stale(&node, &[]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("which backend is stale is not certain: iptables uses legacy by rule-counts")
            && text.contains("held by legacy ipv4 filter: 2 rules")
            && !text.contains("nothing stale in")
            && text.contains("--remove` refuses until it is"),
        "{text}"
    );
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    let report = json(&stale(&node, &["-v", "--json"]));
    assert_eq!(report["certain"], false, "{report}");
    assert!(
        report["uncertain"].as_str().unwrap().contains("rule-counts"),
        "{report}"
    );
    assert_eq!(
        report["findings"].as_array().unwrap().len(),
        4,
        "both backends, both families"
    );
    assert!(
        report["findings"][0]["rules_saved"]
            .as_str()
            .unwrap()
            .contains("-A INPUT -j ACCEPT"),
        "{report}"
    );
    // The lock breaks a tie: not certain.
    node.sh("nft add table ip filter && iptables-nft -A INPUT -j ACCEPT && iptables-nft -A INPUT -j ACCEPT");
    node.sh("iptables-legacy -P FORWARD DROP");
    refused(&node, &["--remove"], "xtables-lock");
    // The default: not certain.
    node.sh("iptables-nft -F INPUT && iptables-legacy -F INPUT && iptables-legacy -P FORWARD ACCEPT");
    std::fs::remove_file(&node.lockfile).unwrap();
    refused(&node, &["--remove"], "default");
    // A hint chain (the field report without a host link), in both
    // backends or in nft alone beside kube-proxy's own service state: it
    // says where kubelet and kube-proxy write, not where the host's other
    // writers do.
    node.sh("iptables-legacy -A INPUT -j ACCEPT");
    node.sh("iptables-nft -t mangle -N KUBE-IPTABLES-HINT && iptables-legacy -t mangle -N KUBE-IPTABLES-HINT");
    refused(&node, &["--remove"], "by hint-chain");
    let before_hint = legacy_saves(&node);
    // Refusals changed nothing.
    assert!(before_hint.contains("-A INPUT -j ACCEPT") && before.contains("-A INPUT -j ACCEPT"));
    assert_eq!(legacy_saves(&node), before_hint);
    node.sh("iptables-legacy -t mangle -X KUBE-IPTABLES-HINT");
    node.sh("iptables-nft -t nat -N KUBE-SERVICES && iptables-nft -t nat -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination 10.244.0.9:6443 && iptables-nft -t nat -A PREROUTING -j KUBE-SERVICES");
    let before_services = legacy_saves(&node);
    refused(&node, &["--remove"], "not where the host's other writers do");
    assert_eq!(legacy_saves(&node), before_services);
    let out = stale(&node, &[]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("which backend is stale is not certain: iptables uses nft by hint-chain")
            && text.contains("legacy ipv4 filter: 1 rule"),
        "{text}"
    );
    // The override and the host link are certain.
    let out = node
        .wrapper()
        .env("IPTABLES_MODE", "nft")
        .args(["stale"])
        .output_within_limit()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let out = node
        .wrapper()
        .env("IPTABLES_MODE", "legacy")
        .args(["stale", "--json"])
        .output_within_limit()
        .unwrap();
    // The override contradicted by nft's hint chain (legacy holds none):
    // not certain, and both backends shown.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["certain"], false, "{report}");
    assert!(
        report["uncertain"]
            .as_str()
            .unwrap()
            .contains("nft ipv4 mangle chain KUBE-IPTABLES-HINT"),
        "{report}"
    );
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    let out = stale(&node, &["--json"]);
    assert_eq!(json(&out)["hosts"][0]["decided_by"], "host-link");
    // An invalid override decides nothing: refused too.
    let out = node
        .wrapper()
        .env("IPTABLES_MODE", "bogus")
        .args(["stale", "--remove"])
        .output_within_limit()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("IPTABLES_MODE") && stderr(&out).contains("bogus"),
        "{}",
        stderr(&out)
    );
    // Usage errors are one line and exit 2 too.
    let out = stale(&node, &["--backup-dir", "/tmp/x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--backup-dir goes with --remove"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn show_reads_only_and_its_exit_codes_say_what_is_stale() {
    common::root_or_skip!();
    let node = Node::new("show");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    // Nothing anywhere: exit 0, and no table created by looking.
    let out = stale(&node, &[]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("nothing stale"), "{}", stdout(&out));
    assert_eq!(listed_tables(), "|");
    // Empty tables (a read-only listing made them) weigh nothing.
    node.sh("iptables-legacy -L -n >/dev/null && ip6tables-legacy -t mangle -L -n >/dev/null");
    let out = stale(&node, &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(json(&out)["findings"][0]["tables"], serde_json::json!([]));
    // A DROP policy without rules is stale (nft holds the host's rules).
    node.sh("iptables-nft -A INPUT -s 10.9.9.9/32 -j ACCEPT; iptables-legacy -P FORWARD DROP");
    let out = stale(&node, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let report = json(&out);
    assert_eq!(
        report["findings"][0]["tables"],
        serde_json::json!([{"table": "filter", "rules": 0, "chains": [
            {"chain": "FORWARD", "builtin": true, "policy": "DROP", "rules": 0}],
            "would_open": true,
            "opening": "removing it opens: tcp any → any:any, forwarded in by any interface, out by any interface, NEW (now: dropped legacy filter FORWARD policy DROP; after: passes (no rule meets it)); removing it may open the host (nft holds no `:FORWARD DROP`, which blocks): 1 item that nft holds no twin of (principle of the first: a policy other than ACCEPT needs the same policy, its chain reaching it the same way): :FORWARD DROP",
            "witness": {"packet": "tcp any → any:any, forwarded in by any interface, out by any interface, NEW",
                "order": null, "now": "dropped legacy filter FORWARD policy DROP", "after": "passes (no rule meets it)"}}]),
        "{report}"
    );
    // The packets tried, counted: one naming nothing on each way (what
    // the host sends, again to its own loopback address), and those the
    // differences between the copies name.
    assert_eq!(report["findings"][0]["packets_tried"], 5, "{report}");
    // The field report's state, shown per family, table and chain.
    let node = upgraded_node("show2");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    let tables_before = listed_tables();
    let nft_before = nft_ruleset(&node);
    let out = stale(&node, &[]);
    assert_eq!(out.status.code(), Some(1), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    for expected in [
        "stale legacy ipv4 filter: 3 rules, 1 user chain, policy FORWARD DROP",
        "  FORWARD: 1 rule, policy DROP",
        "  KUBE-FORWARD (user chain): 1 rule",
        "stale legacy ipv4 nat: 2 rules, 1 user chain",
        "stale legacy ipv4 mangle: 0 rules, 1 user chain",
        "  KUBE-IPTABLES-HINT (user chain): 0 rules",
        "stale legacy ipv6 filter: 1 rule",
        "iptables-wrapper stale --remove",
    ] {
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }
    assert!(!text.contains("raw"), "an empty table is nothing stale:\n{text}");
    assert!(!text.contains("-A INPUT"), "rules only with -v:\n{text}");
    // -v adds the rules in iptables-save form, and --json carries them.
    let out = stale(&node, &["-v"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains(
            "  -A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m tcp --dport 443 -j DNAT --to-destination 10.244.0.9:6443"
        ) && text.contains("  :FORWARD DROP [0:0]")
            && text.contains("  -A INPUT -s 2001:db8::1/128 -j DROP"),
        "{text}"
    );
    let report = json(&stale(&node, &["-v", "--json"]));
    assert!(report["findings"][0]["rules_saved"]
        .as_str()
        .unwrap()
        .contains("-A FORWARD -j KUBE-FORWARD"));
    // Showing changed nothing: no table created, nft as it was.
    assert_eq!(listed_tables(), tables_before);
    assert_eq!(nft_ruleset(&node), nft_before);
}

#[test]
fn removal_backs_up_empties_and_the_backup_restores_exactly() {
    common::root_or_skip!();
    let node = upgraded_node("remove");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    let legacy_before = legacy_saves(&node);
    let nft_before = nft_ruleset(&node);
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("nothing stale remains"), "{text}");
    let dir = backup_dir_of(&out);
    assert!(dir.starts_with(node.path("run")), "{}", dir.display());
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
    for file in ["iptables-legacy.rules", "ip6tables-legacy.rules"] {
        let meta = std::fs::metadata(dir.join(file)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{file}");
        assert!(
            text.contains(&format!(
                "undo: {}-restore < {}",
                file.trim_end_matches(".rules"),
                dir.join(file).display()
            )),
            "{text}"
        );
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2, "no temporary file left");
    // Legacy holds nothing: empty tables, ACCEPT everywhere.
    let legacy_after = legacy_saves(&node);
    assert!(
        !legacy_after.contains("-A ") && !legacy_after.contains(" - [") && !legacy_after.contains("DROP"),
        "{legacy_after}"
    );
    // The tables stay registered, empty; raw, which held nothing, was not touched.
    assert!(common::legacy_tables("ip_tables_names").contains("raw"));
    // nft is byte for byte what it was.
    assert_eq!(nft_ruleset(&node), nft_before);
    // The next calls go to nft, and the warning is gone.
    assert_eq!(node.version_mode("iptables"), "nft");
    let warnings = node.detect()["warnings"].clone();
    assert_eq!(warnings, serde_json::json!([]), "{warnings}");
    // Twice is harmless: nothing to do, no backup.
    let out = stale(&node, &["--remove"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("nothing removed, no backup written"),
        "{}",
        stdout(&out)
    );
    assert_eq!(stale(&node, &[]).status.code(), Some(0));
    // Restoring the backup brings legacy back exactly.
    node.sh(&format!(
        "iptables-legacy-restore < {0}/iptables-legacy.rules && ip6tables-legacy-restore < {0}/ip6tables-legacy.rules",
        dir.display()
    ));
    assert_eq!(legacy_saves(&node), legacy_before);
    assert_eq!(nft_ruleset(&node), nft_before);
    // And a removal into a chosen directory, reported as JSON.
    let chosen = node.path("chosen");
    let out = stale(&node, &["--remove", "--json", "--backup-dir", chosen.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["removal"]["backup_dir"], chosen.to_str().unwrap());
    assert_eq!(report["removal"]["emptied"].as_array().unwrap().len(), 4, "{report}");
    assert_eq!(report["findings"][0]["stale"], false);
    // The backup holds the stale tables, and only them (raw held nothing).
    assert_eq!(
        without_headers(&std::fs::read_to_string(chosen.join("iptables-legacy.rules")).unwrap())
            + &without_headers(&std::fs::read_to_string(chosen.join("ip6tables-legacy.rules")).unwrap()),
        legacy_before.replace("*raw\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n", "")
    );
}

#[test]
fn an_nft_removal_leaves_native_nftables_tables_and_legacy_alone() {
    common::root_or_skip!();
    let node = Node::new("nftremove");
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    // Kubelet's hint chain in legacy agrees with the host link (kube-proxy's
    // nftables table would contradict it: see stale_certainty.rs).
    node.sh("iptables-legacy -A INPUT -s 10.1.1.1 -j ACCEPT
ip6tables-legacy -A INPUT -s 2001:db8::9 -j ACCEPT
iptables-legacy -t mangle -N KUBE-IPTABLES-HINT
ip6tables-legacy -t mangle -N KUBE-IPTABLES-HINT
iptables-nft -A INPUT -s 10.0.0.1/32 -j DROP
iptables-nft -P FORWARD DROP
iptables-nft -t nat -N KUBE-SERVICES
ip6tables-nft -A OUTPUT -j REJECT
nft add table inet firewalld
nft add chain inet firewalld filter_INPUT '{ type filter hook input priority 10; policy drop; }'
nft add rule inet firewalld filter_INPUT ct state established accept
nft add table ip mangle
nft add chain ip mangle PREROUTING '{ type filter hook prerouting priority -150; }'
nft add rule ip mangle PREROUTING ip saddr 192.0.2.1 accept
nft add table ip6 raw
nft add chain ip6 raw PREROUTING '{ type filter hook prerouting priority -300; }'
nft add set ip6 raw blocked '{ type ipv6_addr; }'
nft add rule ip6 raw PREROUTING ip6 saddr @blocked counter drop
nft add table ip6 security
nft add chain ip6 security input '{ type filter hook input priority 50; }'
nft add rule ip6 security input counter accept");
    let native = |node: &Node| {
        node.sh("nft list table inet firewalld; nft list table ip mangle; nft list table ip6 raw; nft list table ip6 security")
    };
    let native_before = native(&node);
    let legacy_before = legacy_saves(&node);
    let nft_saves_before = without_headers(&node.sh("iptables-nft-save; ip6tables-nft-save"));
    let out = stale(&node, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = json(&out);
    let left: Vec<String> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f["left_alone"].as_array().unwrap().clone())
        .map(|l| format!("{} {}", l["table"].as_str().unwrap(), l["why"].as_str().unwrap()))
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(
        left.iter()
            .any(|l| l.starts_with("mangle") && l.contains("without a counter")),
        "{left:?}"
    );
    assert!(
        left.iter().any(|l| l.starts_with("raw") && l.contains("1 set")),
        "{left:?}"
    );
    assert!(
        left.iter()
            .any(|l| l.starts_with("security") && l.contains("\"input\"")),
        "{left:?}"
    );
    // nft's DROP rules and policy are not in legacy: removing them opens
    // the host, which is what this removal is told to do.
    let out = stale(&node, &["--remove", "--allow-opening"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("left alone: nft ipv4 mangle"), "{text}");
    // Native tables byte for byte as they were, legacy too.
    assert_eq!(native(&node), native_before);
    assert_eq!(legacy_saves(&node), legacy_before);
    // iptables-nft's own tables are empty.
    let nft_after = node.sh("iptables-nft-save -t filter; iptables-nft-save -t nat; ip6tables-nft-save -t filter");
    assert!(
        !nft_after.contains("-A ") && !nft_after.contains("DROP") && !nft_after.contains("KUBE"),
        "{nft_after}"
    );
    // The backup restores them.
    let dir = backup_dir_of(&out);
    node.sh(&format!(
        "iptables-nft-restore < {0}/iptables-nft.rules && ip6tables-nft-restore < {0}/ip6tables-nft.rules",
        dir.display()
    ));
    assert_eq!(
        without_headers(&node.sh("iptables-nft-save; ip6tables-nft-save")),
        nft_saves_before
    );
}

#[test]
fn a_wrapped_call_racing_the_removal_goes_to_the_host_backend_and_fails_nothing() {
    common::root_or_skip!();
    let node = upgraded_node("race");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.sh("for i in $(seq 100); do iptables-legacy -A KUBE-FORWARD -s 10.2.0.$i -j ACCEPT; done");
    let stop = Arc::new(AtomicBool::new(false));
    let removing = Arc::new(AtomicBool::new(false));
    // Calls that started while a removal ran.
    let overlapped = Arc::new(AtomicU32::new(0));
    let bin = node.bin.clone();
    let env: Vec<(String, String)> = [
        ("IPTABLES_WRAPPER_HOST_ROOT", node.host_root.display().to_string()),
        ("IPTABLES_WRAPPER_RUN_DIR", node.path("run").display().to_string()),
        ("XTABLES_LOCKFILE", node.lockfile.display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let netns = std::fs::File::open("/proc/thread-self/ns/net").unwrap();
    let caller = {
        let (stop, removing, overlapped) = (stop.clone(), removing.clone(), overlapped.clone());
        std::thread::spawn(move || {
            nix::sched::setns(netns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let call = |args: &[&str]| {
                std::process::Command::new(bin.join("iptables"))
                    .envs(env.iter().cloned())
                    .env_remove("IPTABLES_MODE")
                    .env_remove("IPTABLES_WRAPPER_LOG")
                    .args(args)
                    .output_within_limit()
                    .unwrap()
            };
            let mut calls = 0u32;
            while !stop.load(Ordering::SeqCst) {
                if removing.load(Ordering::SeqCst) {
                    overlapped.fetch_add(1, Ordering::SeqCst);
                }
                let rule = format!("10.3.{}.{}", calls / 250 % 250, calls % 250 + 1);
                for verb in ["-A", "-D"] {
                    let out = call(&["-w", verb, "INPUT", "-s", &rule, "-j", "ACCEPT"]);
                    assert!(
                        out.status.success(),
                        "call {calls} {verb}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                let out = call(&["-V"]);
                assert!(
                    String::from_utf8_lossy(&out.stdout).contains("(nf_tables)"),
                    "call {calls}"
                );
                calls += 1;
            }
        })
    };
    // Remove and restore until calls have run during removals.
    let mut rounds = 0;
    while overlapped.load(Ordering::SeqCst) < 5 {
        assert!(rounds < 100, "in 100 removals no wrapped call overlapped one");
        removing.store(true, Ordering::SeqCst);
        let out = stale(&node, &["--remove"]);
        removing.store(false, Ordering::SeqCst);
        assert_eq!(
            out.status.code(),
            Some(0),
            "round {rounds}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        let dir = backup_dir_of(&out);
        node.sh(&format!(
            "iptables-legacy-restore < {}/iptables-legacy.rules",
            dir.display()
        ));
        rounds += 1;
    }
    stop.store(true, Ordering::SeqCst);
    caller.join().expect("every wrapped call succeeded and went to nft");
    // Every rule a call added went to nft and was deleted there again;
    // none ever reached legacy.
    let legacy = node.sh("iptables-legacy-save");
    assert!(!legacy.contains("10.3."), "{legacy}");
    let nft = node.sh("iptables-nft-save");
    assert!(!nft.contains("10.3."), "{nft}");
}

#[test]
fn a_backup_that_cannot_be_written_stops_the_removal_before_anything_changes() {
    common::root_or_skip!();
    let node = upgraded_node("nobackup");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    let legacy_before = legacy_saves(&node);
    let failed = |node: &Node, args: &[&str], why: &str| {
        let out = stale(node, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}{}", stdout(&out), stderr(&out));
        let line = stderr(&out);
        assert!(line.contains(why) && line.contains("nothing was changed"), "{line}");
        assert_eq!(legacy_saves(node), legacy_before, "{args:?}");
    };
    // A directory that cannot be made (its parent is a file).
    std::fs::write(node.path("a-file"), "").unwrap();
    let under_file = node.path("a-file/backup");
    failed(
        &node,
        &["--remove", "--backup-dir", under_file.to_str().unwrap()],
        "Not a directory",
    );
    // A backup file that exists already is never replaced: the IPv6 save
    // cannot be written after the IPv4 one was.
    let taken = node.path("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("ip6tables-legacy.rules"), "older backup\n").unwrap();
    failed(
        &node,
        &["--remove", "--backup-dir", taken.to_str().unwrap()],
        "File exists",
    );
    assert_eq!(
        std::fs::read_to_string(taken.join("ip6tables-legacy.rules")).unwrap(),
        "older backup\n"
    );
    // No runtime directory to make the default one in.
    let out = node
        .wrapper()
        .env("IPTABLES_WRAPPER_RUN_DIR", "relative/run")
        .args(["stale", "--remove"])
        .output_within_limit()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("--backup-dir"), "{}", stderr(&out));
    assert_eq!(legacy_saves(&node), legacy_before);
}
