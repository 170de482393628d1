//! nf_tables reader against real rulesets, each test in its own network
//! namespace (the tests run as root).

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

use iptables_wrapper::family::Family::{self, Ipv4, Ipv6};
use iptables_wrapper::kernel::modules::{self, Presence};
use iptables_wrapper::kernel::nft::{NftObject, NftSocket, RulesetKeptChanging};

/// An iptables-nft-restore ruleset with user chains, jumps, a goto, every
/// iptables table, comments and match/target extensions: 19 rules.
const RULES_V4: &str = r#"*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -p udp --dport 53 -j CT --notrack
-A OUTPUT -p tcp --dport 80 -m comment --comment "raw out" -j ACCEPT
COMMIT
*mangle
:PREROUTING ACCEPT [0:0]
:KUBE-IPTABLES-HINT - [0:0]
:MARKING - [0:0]
-A PREROUTING -j MARKING
-A MARKING -p tcp -m tcp --dport 22 -j MARK --set-xmark 0x1/0xffffffff
-A MARKING -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:SVC - [0:0]
:SVC-A - [0:0]
:EMPTY - [0:0]
-A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
-A INPUT -p tcp -m multiport --dports 80,443,8080 -m comment --comment "web ports" -j SVC
-A INPUT -p tcp -m tcp --dport 22 -j LOG --log-prefix "ssh: "
-A INPUT -i lo -j ACCEPT
-A FORWARD -g SVC
-A SVC -m comment --comment "to A" -j SVC-A
-A SVC -j SVC-A
-A SVC-A -s 10.0.0.0/8 -j DROP
-A SVC-A -j REJECT
-A OUTPUT -d 192.168.1.1/32 -p udp -m udp --dport 53 -j ACCEPT
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SVC - [0:0]
-A PREROUTING -m comment --comment "kube" -j KUBE-SVC
-A KUBE-SVC -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.1.2.3:8080
-A POSTROUTING -o eth0 -j MASQUERADE
COMMIT
*security
:INPUT ACCEPT [0:0]
-A INPUT -p tcp -m tcp --dport 25 -j ACCEPT
COMMIT
"#;

/// The same ruleset for ip6tables.
fn rules_v6() -> String {
    RULES_V4
        .replace("10.0.0.0/8", "fd00::/8")
        .replace("192.168.1.1/32", "fd00::1/128")
        .replace("10.1.2.3:8080", "[fd00::3]:8080")
}

fn ruleset(family: Family) -> String {
    match family {
        Ipv4 => RULES_V4.to_string(),
        Ipv6 => rules_v6(),
    }
}

/// Loads `rules` with `<family>-nft-restore` in the current namespace.
fn restore(family: Family, rules: &str) {
    let mut child = Command::new(format!("{}-nft-restore", family.program()))
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn restore");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), rules.as_bytes()).unwrap();
    assert!(
        common::wait_within(child, common::CHILD_LIMIT, "child did not end")
            .status
            .success(),
        "{}-nft-restore failed",
        family.program()
    );
}

fn saved_rules(family: Family) -> u64 {
    common::save_rule_lines(&format!("{}-nft-save", family.program()))
}

/// A count's rules and whether it completed, the generation left out.
fn rules_complete(socket: &NftSocket, families: &[Family], stop_above: Option<u64>) -> (u64, bool) {
    let count = socket.count_rules(families, stop_above).unwrap();
    (count.rules, count.complete)
}

fn exact_count(socket: &NftSocket, families: &[Family]) -> u64 {
    let count = socket.count_rules(families, None).unwrap();
    assert!(count.complete);
    count.rules
}

fn object(family: Family, table: &'static str, chain: Option<&'static str>) -> NftObject {
    NftObject { family, table, chain }
}

#[test]
fn nf_tables_is_present_here() {
    // This machine's kernel has nf_tables built in (or no module support).
    assert!(matches!(
        modules::nf_tables(),
        Presence::Present(_) | Presence::Askable(_)
    ));
}

#[test]
fn exact_count_matches_save_per_family() {
    common::root_or_skip!();
    common::enter_new_netns();
    for family in Family::BOTH {
        restore(family, &ruleset(family));
    }
    let socket = NftSocket::open().unwrap();
    for family in Family::BOTH {
        let saved = saved_rules(family);
        assert_eq!(saved, 19, "{family:?}");
        assert_eq!(exact_count(&socket, &[family]), saved, "{family:?}");
    }
    assert_eq!(
        exact_count(&socket, &Family::BOTH),
        saved_rules(Ipv4) + saved_rules(Ipv6)
    );
}

#[test]
fn exact_count_of_one_family_ignores_the_other() {
    common::root_or_skip!();
    common::enter_new_netns();
    restore(Ipv6, &rules_v6());
    common::sh("ip6tables-nft -A INPUT -j ACCEPT");
    let socket = NftSocket::open().unwrap();
    assert_eq!(exact_count(&socket, &[Ipv4]), 0);
    assert_eq!(exact_count(&socket, &[Ipv6]), 20);
    assert_eq!(saved_rules(Ipv6), 20);
}

#[test]
fn builtin_chain_rules_bound_the_exact_count() {
    common::root_or_skip!();
    common::enter_new_netns();
    for family in Family::BOTH {
        restore(family, &ruleset(family));
    }
    let socket = NftSocket::open().unwrap();
    for family in Family::BOTH {
        let low = socket.builtin_chain_rules(&[family]).unwrap();
        let exact = exact_count(&socket, &[family]);
        assert!(low <= exact, "{family:?}: {low} vs {exact}");
        // Built-in chains hold 12 of the 19 rules; user chains the rest.
        assert_eq!(low, 12, "{family:?}");
    }
    assert_eq!(socket.builtin_chain_rules(&Family::BOTH).unwrap(), 24);
}

#[test]
fn builtin_chain_rules_skip_jumpable_chains_of_the_same_name() {
    common::root_or_skip!();
    // A native nft regular chain called INPUT in table ip filter can be
    // jumped to, so its use overstates its rules: it is left out.
    common::enter_new_netns();
    common::sh(
        "nft add table ip filter; nft add chain ip filter INPUT; nft add chain ip filter x
         nft add rule ip filter x jump INPUT; nft add rule ip filter x jump INPUT",
    );
    let socket = NftSocket::open().unwrap();
    assert_eq!(socket.builtin_chain_rules(&Family::BOTH).unwrap(), 0);
    assert_eq!(exact_count(&socket, &Family::BOTH), 2);
}

#[test]
fn count_stops_early_above_the_limit() {
    common::root_or_skip!();
    common::enter_new_netns();
    for family in Family::BOTH {
        restore(family, &ruleset(family));
    }
    let socket = NftSocket::open().unwrap();
    for k in [0, 1, 5, 18, 30] {
        assert_eq!(
            rules_complete(&socket, &Family::BOTH, Some(k)),
            (k + 1, false),
            "stop_above {k}"
        );
    }
    for k in [38, 100] {
        assert_eq!(
            rules_complete(&socket, &Family::BOTH, Some(k)),
            (38, true),
            "stop_above {k}"
        );
    }
    // The socket is not left with stale dump messages.
    assert_eq!(exact_count(&socket, &[Ipv4]), 19);
    assert_eq!(socket.builtin_chain_rules(&[Ipv4]).unwrap(), 12);
    assert_eq!(socket.exists(&[object(Ipv4, "filter", Some("SVC"))]).unwrap(), [true]);
}

#[test]
fn hint_chains_and_tables_are_found() {
    common::root_or_skip!();
    common::enter_new_netns();
    common::sh("iptables-nft -t mangle -N KUBE-IPTABLES-HINT; nft add table ip kube-proxy");
    let socket = NftSocket::open().unwrap();
    let hint = object(Ipv4, "mangle", Some("KUBE-IPTABLES-HINT"));
    assert_eq!(socket.exists(&[hint]).unwrap(), [true]);
    assert_eq!(socket.exists(&[object(Ipv4, "kube-proxy", None)]).unwrap(), [true]);
    let batch = [
        object(Ipv6, "mangle", Some("KUBE-IPTABLES-HINT")),
        hint,
        object(Ipv4, "mangle", Some("KUBE-KUBELET-CANARY")),
        object(Ipv4, "kube-proxy", None),
        object(Ipv6, "kube-proxy", None),
        object(Ipv4, "mangle", None),
        object(Ipv4, "filter", None),
        object(Ipv4, "nat", Some("KUBE-IPTABLES-HINT")),
        object(Ipv4, "mangle", Some("PREROUTING")),
    ];
    let expected = [false, true, false, true, false, true, false, false, false];
    assert_eq!(socket.exists(&batch).unwrap(), expected);
    // Repeated calls on the same socket keep their replies apart.
    assert_eq!(socket.exists(&batch).unwrap(), expected);
    assert_eq!(socket.exists(&[]).unwrap(), Vec::<bool>::new());
}

#[test]
fn native_nft_tables_are_not_counted() {
    common::root_or_skip!();
    common::enter_new_netns();
    common::sh(
        "nft add table ip other; nft add chain ip other c '{ type filter hook input priority 0; }'
         nft add rule ip other c accept; nft add rule ip other c drop
         nft add table ip6 other; nft add chain ip6 other c; nft add rule ip6 other c accept
         iptables-nft -A INPUT -j ACCEPT",
    );
    let socket = NftSocket::open().unwrap();
    assert_eq!(exact_count(&socket, &Family::BOTH), 1);
    assert_eq!(socket.builtin_chain_rules(&[Ipv4]).unwrap(), 1);
    assert_eq!(socket.builtin_chain_rules(&[Ipv6]).unwrap(), 0);
}

#[test]
fn reads_change_nothing_in_an_empty_namespace() {
    common::root_or_skip!();
    common::enter_new_netns();
    let socket = NftSocket::open().unwrap();
    let before = socket.generation().unwrap();
    let lookups = [
        object(Ipv4, "mangle", Some("KUBE-IPTABLES-HINT")),
        object(Ipv6, "mangle", Some("KUBE-KUBELET-CANARY")),
        object(Ipv4, "filter", None),
    ];
    assert_eq!(socket.exists(&lookups).unwrap(), [false; 3]);
    assert_eq!(socket.builtin_chain_rules(&Family::BOTH).unwrap(), 0);
    let count = socket.count_rules(&Family::BOTH, Some(0)).unwrap();
    assert_eq!((count.rules, count.complete, count.generation), (0, true, Some(before)));
    assert_eq!(socket.generation().unwrap(), before);
    assert_eq!(common::sh("nft list ruleset").trim(), "");
}

#[test]
fn waiting_for_commits_changes_nothing() {
    common::root_or_skip!();
    // The empty batch that waits for the commit mutex: no generation bump,
    // no notification (`nft monitor` prints every committed change and
    // every new generation), and ERESTART for a generation that is not the
    // current one.
    common::enter_new_netns();
    restore(Ipv4, &ruleset(Ipv4));
    let socket = NftSocket::open().unwrap();
    let generation = socket.generation().unwrap();
    let ruleset_before = common::sh("nft list ruleset");
    let mut monitor = Command::new("nft")
        .arg("monitor")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    for _ in 0..100 {
        assert!(socket.wait_for_commits(generation).unwrap());
        assert!(!socket.wait_for_commits(generation.wrapping_add(1)).unwrap());
    }
    assert_eq!(socket.generation().unwrap(), generation);
    // One commit of its own, so the monitor is seen to work.
    common::sh("iptables-nft -N MONITOR-SEES-THIS");
    std::thread::sleep(std::time::Duration::from_millis(300));
    monitor.kill().unwrap();
    let output = monitor.wait_with_output().unwrap();
    let seen = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = seen.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.iter().any(|l| l.contains("MONITOR-SEES-THIS")), "{seen}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains("MONITOR-SEES-THIS") || l.contains("new generation")),
        "{seen}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.contains("new generation")).count(),
        1,
        "{seen}"
    );
    common::sh("iptables-nft -X MONITOR-SEES-THIS");
    assert_eq!(common::sh("nft list ruleset"), ruleset_before);
}

#[test]
fn generation_follows_committed_changes_only() {
    common::root_or_skip!();
    common::enter_new_netns();
    let socket = NftSocket::open().unwrap();
    let before = socket.generation().unwrap();
    common::sh("iptables-nft -A INPUT -j ACCEPT");
    let after = socket.generation().unwrap();
    assert_ne!(after, before);
    assert_eq!(socket.count_rules(&Family::BOTH, None).unwrap().generation, Some(after));
    assert_eq!(socket.generation().unwrap(), after);
}

#[test]
fn counts_stay_consistent_while_the_ruleset_changes() {
    common::root_or_skip!();
    common::enter_new_netns();
    for family in Family::BOTH {
        restore(family, &ruleset(family));
    }
    // Adds and deletes up to 20 rules per family, over and over.
    let mut churn = Command::new("sh")
        .arg("-c")
        .arg(
            "while true; do
               for i in $(seq 20); do iptables-nft -A SVC -j ACCEPT; ip6tables-nft -I INPUT -j ACCEPT; done
               for i in $(seq 20); do iptables-nft -D SVC -j ACCEPT; ip6tables-nft -D INPUT -j ACCEPT; done
             done",
        )
        .spawn()
        .unwrap();
    let socket = NftSocket::open().unwrap();
    let started = Instant::now();
    let mut counts = 0;
    while started.elapsed().as_secs() < 3 {
        let count = socket.count_rules(&Family::BOTH, None).unwrap();
        assert!(count.complete && (38..=78).contains(&count.rules), "{count:?}");
        let low = socket.builtin_chain_rules(&Family::BOTH).unwrap();
        assert!((24..=24 + 20).contains(&low), "{low}");
        assert_eq!(rules_complete(&socket, &Family::BOTH, Some(30)), (31, false));
        counts += 1;
    }
    churn.kill().unwrap();
    churn.wait().unwrap();
    assert!(counts > 10, "only {counts} rounds");
}

/// A kube-proxy-like ruleset: filter 34 rules, nat 2,968 rules over a
/// thousand user chains.
fn kube_proxy_like_ruleset() -> String {
    let mut filter = String::from("*filter\n:INPUT ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n-A INPUT -j KUBE-FIREWALL\n");
    for i in 0..33 {
        filter.push_str(&format!(
            "-A KUBE-FIREWALL -s 10.0.{i}.0/24 -m comment --comment \"fw {i}\" -j DROP\n"
        ));
    }
    let mut chains = String::from("*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n");
    let mut rules =
        String::from("-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n");
    for s in 0..989 {
        chains.push_str(&format!(":KUBE-SVC-{s} - [0:0]\n:KUBE-SEP-{s} - [0:0]\n"));
        let ip = format!("10.96.{}.{}", s / 250, s % 250 + 1);
        rules.push_str(&format!(
            "-A KUBE-SERVICES -d {ip}/32 -p tcp -m comment --comment \"svc {s}\" -m tcp --dport 80 -j KUBE-SVC-{s}\n\
             -A KUBE-SVC-{s} -m comment --comment \"svc {s}\" -j KUBE-SEP-{s}\n\
             -A KUBE-SEP-{s} -p tcp -m comment --comment \"svc {s}\" -m tcp -j DNAT --to-destination 10.244.0.1:8080\n"
        ));
    }
    format!("{filter}COMMIT\n{chains}{rules}COMMIT\n")
}

#[test]
fn no_call_decides_on_a_count_torn_by_a_concurrent_restore() {
    common::root_or_skip!();
    // Legacy 100 rules, nft 3,002: every call must go to nft, or report the
    // nft count unknown (and then default to nft); never to legacy.
    let node = common::Node::new("torn-count");
    let legacy: String = (0..100)
        .map(|i| format!("-A INPUT -s 10.1.0.{i}/32 -j ACCEPT\n"))
        .collect();
    // Loaded under a lock path of its own: the lock the wrapper sees is never
    // created, so an unknown count falls through to the default (nft).
    let setup_lock = node.path("setup.lock");
    common::sh(&format!(
        "XTABLES_LOCKFILE={} iptables-legacy-restore <<'EOF'\n*filter\n:INPUT ACCEPT [0:0]\n{legacy}COMMIT\nEOF",
        setup_lock.display()
    ));
    let ruleset = node.path("nft.rules");
    std::fs::write(&ruleset, kube_proxy_like_ruleset()).unwrap();
    node.sh(&format!("iptables-nft-restore < {}", ruleset.display()));
    assert_eq!(saved_rules(Ipv4), 3002);
    assert_eq!(common::save_rule_lines("iptables-legacy-save"), 100);

    let mut restorer = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while :; do iptables-nft-restore < {} || true; done",
            ruleset.display()
        ))
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut decided = std::collections::BTreeMap::<String, u32>::new();
    while started.elapsed().as_secs() < 8 {
        *decided.entry(node.version_mode("iptables")).or_default() += 1;
    }
    restorer.kill().unwrap();
    restorer.wait().unwrap();
    let calls: u32 = decided.values().sum();
    assert!(calls > 50, "only {calls} calls: {decided:?}");
    assert_eq!(decided.get("legacy"), None, "torn counts decided legacy: {decided:?}");
    assert!(!node.lockfile.exists());
}

/// Two threads that spin until the returned flag is cleared: the
/// committing process then gets preempted, as on a busy node.
fn load_both_cpus() -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    Vec<std::thread::JoinHandle<()>>,
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let running = std::sync::Arc::new(AtomicBool::new(true));
    let spinners = (0..2)
        .map(|_| {
            let running = running.clone();
            std::thread::spawn(move || {
                while running.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    (running, spinners)
}

/// Counts IPv4 over and over (at most `rounds` iterations, `seconds` at most)
/// while `writer` runs beside two busy threads; returns (right, unknown,
/// the wrong counts). Every state `writer` commits holds `expected` rules.
fn counts_beside(writer: &str, expected: u64, rounds: usize, seconds: u64) -> (usize, usize, Vec<u64>) {
    let mut writer = Command::new("sh").arg("-c").arg(writer).spawn().unwrap();
    let (running, spinners) = load_both_cpus();
    let socket = NftSocket::open().unwrap();
    let started = Instant::now();
    let (mut right, mut unknown, mut wrong) = (0, 0, Vec::new());
    for _ in 0..rounds {
        if started.elapsed().as_secs() >= seconds {
            break;
        }
        match socket.count_rules(&[Ipv4], None) {
            Ok(count) if count.complete && count.rules == expected => right += 1,
            Ok(count) => wrong.push(count.rules),
            Err(e) if RulesetKeptChanging::is(&e) => unknown += 1,
            Err(e) => panic!("{e}"),
        }
    }
    running.store(false, std::sync::atomic::Ordering::Relaxed);
    spinners.into_iter().for_each(|s| s.join().unwrap());
    writer.kill().unwrap();
    writer.wait().unwrap();
    (right, unknown, wrong)
}

#[test]
fn no_count_is_torn_by_a_restore_loop_on_a_busy_machine() {
    common::root_or_skip!();
    // The same 3,002 rules restored over and over (each restore replaces
    // both tables) while both CPUs are busy: every generation holds 3,002
    // rules, so any other count is torn. The old bracket (GETGEN around
    // the dumps) let through counts read while a commit was still removing
    // the old tables' rules from the kernel's lists, after it had moved the
    // generation (seen: 503 of 1,000).
    common::enter_new_netns();
    let dir = std::env::temp_dir().join(format!("iptw-busy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ruleset = dir.join("rules");
    // nat (2,968 rules) before filter: the commit then takes the old filter
    // table out of the kernel's list only after it has activated all of
    // nat's new rules, and a listener (`nft monitor`, as firewalld or a
    // monitoring agent keep) makes it build a notification for each: the
    // window after the generation moved grows from microseconds to
    // milliseconds, as preemption makes it on a busy node.
    let rules = kube_proxy_like_ruleset();
    let nat_at = rules.find("*nat\n").unwrap();
    std::fs::write(&ruleset, format!("{}{}", &rules[nat_at..], &rules[..nat_at])).unwrap();
    common::sh(&format!("iptables-nft-restore < {}", ruleset.display()));
    assert_eq!(saved_rules(Ipv4), 3002);
    let mut monitor = Command::new("nft")
        .arg("monitor")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let writer = format!("while :; do iptables-nft-restore < {}; done", ruleset.display());
    let (right, unknown, wrong) = counts_beside(&writer, 3002, 3000, 40);
    monitor.kill().unwrap();
    monitor.wait().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        wrong.is_empty(),
        "torn counts {wrong:?} ({right} right, {unknown} unknown)"
    );
    assert!(right > 10, "only {right} counts ({unknown} unknown)");
}

#[test]
fn no_count_is_torn_by_noflush_restores_into_user_chains() {
    common::root_or_skip!();
    // kube-proxy's way: `iptables-nft-restore --noflush` re-declaring (and
    // so flushing) 300 user chains of nat and filling them again, the same
    // rules each time, in one transaction. While such a transaction is
    // being prepared its new rules sit, inactive, in the chains' lists,
    // shifting where a dump's next datagram resumes, and the generation
    // has not moved yet.
    common::enter_new_netns();
    let dir = std::env::temp_dir().join(format!("iptw-noflush-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ruleset = dir.join("rules");
    std::fs::write(&ruleset, kube_proxy_like_ruleset()).unwrap();
    common::sh(&format!("iptables-nft-restore < {}", ruleset.display()));
    let mut refill = String::from("*nat\n");
    for s in 0..300 {
        refill.push_str(&format!(":KUBE-SVC-{s} - [0:0]\n"));
    }
    for s in 0..300 {
        refill.push_str(&format!(
            "-A KUBE-SVC-{s} -m comment --comment \"svc {s}\" -j KUBE-SEP-{s}\n"
        ));
    }
    refill.push_str("COMMIT\n");
    let refill_file = dir.join("refill");
    std::fs::write(&refill_file, refill).unwrap();
    common::sh(&format!("iptables-nft-restore --noflush < {}", refill_file.display()));
    assert_eq!(saved_rules(Ipv4), 3002);
    let writer = format!(
        "while :; do iptables-nft-restore --noflush < {}; done",
        refill_file.display()
    );
    let (right, unknown, wrong) = counts_beside(&writer, 3002, 3000, 40);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        wrong.is_empty(),
        "torn counts {wrong:?} ({right} right, {unknown} unknown)"
    );
    assert!(right > 10, "only {right} counts ({unknown} unknown)");
}

#[test]
fn commits_in_other_tables_leave_the_count_known() {
    common::root_or_skip!();
    // A legacy host (1,000 legacy rules, nothing in iptables-nft's tables)
    // beside another nftables user committing in a loop, as Docker's
    // nftables backend, firewalld or fail2ban do: the generation moves all
    // the time, but only tables iptables-nft never touches change, so the
    // nft count stays known (0) and every call goes to legacy.
    let node = common::Node::new("other-commits");
    let legacy: String = (0..1000)
        .map(|i| format!("-A INPUT -s 10.3.{}.{}/32 -j ACCEPT\n", i / 256, i % 256))
        .collect();
    let setup_lock = node.path("setup.lock");
    common::sh(&format!(
        "XTABLES_LOCKFILE={} iptables-legacy-restore <<'EOF'\n*filter\n:INPUT ACCEPT [0:0]\n{legacy}COMMIT\nEOF",
        setup_lock.display()
    ));
    // Another user's own table with 2,000 rules (a family's dump walks
    // them too, so each reading takes a while), and two processes adding
    // and deleting a table of their own as fast as they can.
    let mut other: String = "table ip other {\n chain forward {\n type filter hook forward priority 10;\n".into();
    for i in 0..2000 {
        other.push_str(&format!("  ip saddr 10.4.{}.{} counter accept\n", i / 256, i % 256));
    }
    other.push_str(" }\n}\n");
    let other_file = node.path("other.nft");
    std::fs::write(&other_file, other).unwrap();
    common::sh(&format!("nft -f {}", other_file.display()));
    // A process group of its own, so that one kill stops the loops too
    // (without procps: the suite's own container has no pkill).
    let mut churn = Command::new("sh")
        .arg("-c")
        .arg("for i in 1 2; do (while :; do nft add table ip churn$i; nft delete table ip churn$i; done) & done; wait")
        .process_group(0)
        .spawn()
        .unwrap();
    let mut decided = std::collections::BTreeMap::<String, u32>::new();
    for _ in 0..40 {
        *decided.entry(node.version_mode("iptables")).or_default() += 1;
    }
    let report = node.detect();
    let group = i32::try_from(churn.id()).unwrap();
    // SAFETY: kill(2) with a negative pid signals that process group, the
    // churn loops' own; it touches no memory.
    assert_eq!(unsafe { libc::kill(-group, libc::SIGKILL) }, 0);
    churn.wait().unwrap();
    assert_eq!(decided.get("legacy"), Some(&40), "{decided:?}");
    let nft = &report["rule_counts"]["nft"];
    assert_eq!(
        (nft["low"].as_u64(), nft["high"].as_u64()),
        (Some(0), Some(0)),
        "{report}"
    );
    assert_eq!(report["mode"], "legacy", "{report}");
}

/// An `nft -f` script that replaces the rules of `ip filter` and `ip nat`
/// in one transaction: `filter` rules in filter INPUT, `nat` in nat
/// PREROUTING.
fn atomic_swap_script(filter: usize, nat: usize) -> String {
    let mut script = String::from(
        "table ip filter { chain INPUT { type filter hook input priority 0; }; }\n\
         table ip nat { chain PREROUTING { type nat hook prerouting priority -100; }; }\n\
         flush table ip filter\nflush table ip nat\n",
    );
    for i in 0..filter {
        script.push_str(&format!(
            "add rule ip filter INPUT ip saddr 10.0.{}.{} accept\n",
            i / 256,
            i % 256
        ));
    }
    for i in 0..nat {
        script.push_str(&format!(
            "add rule ip nat PREROUTING ip daddr 10.1.{}.{} accept\n",
            i / 256,
            i % 256
        ));
    }
    script
}

#[test]
fn counts_are_never_torn_by_atomic_swaps_between_tables() {
    common::root_or_skip!();
    // One rule, moved atomically between filter and nat over and over (small
    // transactions, so commits are frequent). Every generation holds one
    // rule; filter from one generation and nat from the next would be 0 or
    // 2. Each table's dump is consistent on its own (the kernel flags a dump
    // interrupted by a commit), so only the generation bracket around all
    // of them keeps out a commit between two tables' dumps.
    common::enter_new_netns();
    let dir = std::env::temp_dir().join(format!("iptw-torn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("a.nft"), dir.join("b.nft"));
    std::fs::write(&a, atomic_swap_script(1, 0)).unwrap();
    std::fs::write(&b, atomic_swap_script(0, 1)).unwrap();
    common::sh(&format!("nft -f {}", a.display()));
    let socket = NftSocket::open().unwrap();
    assert_eq!(exact_count(&socket, &[Ipv4]), 1);

    let mut swapper = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while :; do nft -f {} && nft -f {}; done",
            b.display(),
            a.display()
        ))
        .spawn()
        .unwrap();
    let started = Instant::now();
    let (mut counted, mut unknown, mut torn) = (0, 0, Vec::new());
    while started.elapsed().as_secs() < 4 {
        match socket.count_rules(&[Ipv4], None) {
            Ok(count) if count.rules == 1 && count.complete => counted += 1,
            Ok(count) => torn.push(count.rules),
            Err(e) if RulesetKeptChanging::is(&e) => unknown += 1,
            Err(e) => panic!("{e}"),
        }
    }
    swapper.kill().unwrap();
    swapper.wait().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    // The GETGEN bracket alone could not close one window: the commit bumps
    // the generation before it switches the visible ruleset and takes the
    // old rules out of the lists (about 1 torn count in 200,000 with this
    // loop, against 57 in 10,100 without the bracket). Waiting for the
    // commit mutex after the first GETGEN closes it: none.
    assert!(
        torn.is_empty(),
        "torn counts {torn:?} ({counted} right, {unknown} unknown)"
    );
    assert!(counted > 10, "only {counted} counts ({unknown} unknown)");
}

#[test]
fn chain_use_counts_show_a_transaction_before_its_commit() {
    common::root_or_skip!();
    // Why NFTA_CHAIN_USE gives no exact count: the kernel changes it while a
    // transaction is prepared, and moves the generation only at the commit.
    // INPUT alternates between 0 and 3,000 rules (one table, one commit per
    // restore); a lookup between two equal GETGENs sees values in between.
    common::enter_new_netns();
    let dir = std::env::temp_dir().join(format!("iptw-use-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (empty, full) = (dir.join("empty.rules"), dir.join("full.rules"));
    std::fs::write(&empty, "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n").unwrap();
    let rules: String = (0..3000)
        .map(|i| format!("-A INPUT -s 10.2.{}.{}/32 -j ACCEPT\n", i / 256, i % 256))
        .collect();
    std::fs::write(&full, format!("*filter\n:INPUT ACCEPT [0:0]\n{rules}COMMIT\n")).unwrap();
    let mut restorer = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while :; do iptables-nft-restore < {}; iptables-nft-restore < {}; done",
            full.display(),
            empty.display()
        ))
        .spawn()
        .unwrap();
    let socket = NftSocket::open().unwrap();
    let started = Instant::now();
    let mut between = None;
    // Seen within a second here; an emulated 32-bit guest under load
    // took longer than 10 s once: the loop ends at the first one seen.
    while between.is_none() && started.elapsed().as_secs() < 90 {
        let before = socket.generation().unwrap();
        let rules = socket.builtin_chain_rules(&[Ipv4]).unwrap();
        if socket.generation().unwrap() == before && rules != 0 && rules != 3000 {
            between = Some(rules);
        }
    }
    restorer.kill().unwrap();
    restorer.wait().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(between.is_some(), "no use count between the committed states seen");
}
