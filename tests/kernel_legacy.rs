//! The legacy x_tables reader against `iptables-legacy-save`, each test in a
//! network namespace of its own.

mod common;

use common::{enter_new_netns, save_rule_lines, sh};
use iptables_wrapper::family::Family;
use iptables_wrapper::kernel::legacy::{LegacyFamily, TableEntries};
use iptables_wrapper::save_text;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};

/// A ruleset with user chains, jumps, gotos, comments and extensions in
/// filter, nat, mangle and raw; `{src}` is replaced by a source network.
const RULESET: &str = r#"
*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A PREROUTING -p udp --dport 53 -j CT --notrack
-A OUTPUT -m comment --comment "raw output" -j ACCEPT
COMMIT
*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-IPTABLES-HINT - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:MARKING - [0:0]
-A PREROUTING -s {src} -j MARKING
-A MARKING -p tcp -m tcp --dport 80 -j MARK --set-xmark 0x1/0xffffffff
-A MARKING -m comment --comment "second mark" -j MARK --set-xmark 0x2/0xffffffff
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-A - [0:0]
:KUBE-SEP-A - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d {src} -p tcp -m tcp --dport 443 -j KUBE-SVC-A
-A KUBE-SVC-A -m comment --comment "default/api" -j KUBE-SEP-A
-A KUBE-SEP-A -p tcp -m tcp -j DNAT --to-destination {dnat}
-A POSTROUTING -m conntrack --ctstate DNAT -j MASQUERADE
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:EMPTY-CHAIN - [0:0]
-A INPUT -j KUBE-FIREWALL
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -p tcp -m multiport --dports 22,80,443 -j ACCEPT
-A INPUT -p tcp -m tcp --dport 8080 -m comment --comment "a comment" -j LOG --log-prefix "in: "
-A INPUT -s {src} -g KUBE-FORWARD
-A FORWARD -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FIREWALL -m comment --comment "drop marked" -m mark --mark 0x8000/0x8000 -j DROP
-A KUBE-FORWARD -m comment --comment "forward" -j ACCEPT
-A KUBE-FORWARD -j RETURN
-A OUTPUT -p udp -m udp --dport 53 -j ACCEPT
COMMIT
"#;

/// Rules in builtin chains only, so the bound is exact.
const NO_USER_CHAINS: &str = r#"
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A INPUT -m comment --comment "x" -j LOG
-A OUTPUT -j ACCEPT
COMMIT
*mangle
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A POSTROUTING -j MARK --set-xmark 0x1/0xffffffff
COMMIT
"#;

/// `iptables` or `ip6tables`, legacy flavour, with a suffix (`-save`, ...).
fn tool(family: Family, suffix: &str) -> String {
    format!("{}-legacy{suffix}", family.program())
}

/// `RULESET` (or another ruleset) with addresses of the family.
fn ruleset(template: &str, family: Family) -> String {
    let (src, dnat) = match family {
        Family::Ipv4 => ("10.0.0.0/8", "10.1.2.3:443"),
        Family::Ipv6 => ("fd00::/8", "[fd00::3]:443"),
    };
    template.replace("{src}", src).replace("{dnat}", dnat)
}

/// A fresh path in the temporary directory, unique to this call.
fn temp_path(what: &str) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("kernel_legacy-{}-{n}.{what}", std::process::id()))
}

fn restore(family: Family, rules: &str) {
    let path = temp_path("rules");
    std::fs::write(&path, rules).unwrap();
    sh(&format!("{} < {}", tool(family, "-restore"), path.display()));
    std::fs::remove_file(path).unwrap();
}

fn names_file(family: Family) -> &'static str {
    match family {
        Family::Ipv4 => "/proc/thread-self/net/ip_tables_names",
        Family::Ipv6 => "/proc/thread-self/net/ip6_tables_names",
    }
}

/// The tables listed in this namespace.
fn listed_tables(family: Family) -> BTreeSet<String> {
    std::fs::read_to_string(names_file(family))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// User chains of a listed table as `*-legacy-save -t` prints them.
fn saved_user_chains(family: Family, table: &str) -> BTreeSet<String> {
    sh(&format!("{} -t {table}", tool(family, "-save")))
        .lines()
        .filter_map(|text| match save_text::line(text.as_bytes()) {
            save_text::Line::Chain { name, policy: b"-" } => Some(String::from_utf8_lossy(name).into_owned()),
            _ => None,
        })
        .collect()
}

fn entries(legacy: &LegacyFamily, table: &str) -> TableEntries {
    let info = legacy.table(table).unwrap_or_else(|| panic!("{table} not listed"));
    legacy.entries(info).unwrap()
}

/// Compares every table with the save tool: rules, user chains and bound.
/// Returns the total rule count.
fn check_against_save(family: Family) -> u64 {
    let legacy = LegacyFamily::open(family).unwrap();
    assert_eq!(legacy.family, family);
    let mut total = 0;
    for info in &legacy.tables {
        let found = legacy.entries(info).unwrap();
        let saved = save_rule_lines(&format!("{} -t {}", tool(family, "-save"), info.name));
        assert_eq!(found.rules, saved, "{:?} {}", family, info.name);
        let chains: BTreeSet<String> = found.user_chains.iter().cloned().collect();
        assert_eq!(chains.len(), found.user_chains.len(), "duplicate chain names");
        assert_eq!(
            chains,
            saved_user_chains(family, &info.name),
            "{:?} {}",
            family,
            info.name
        );
        assert!(info.rule_upper_bound() >= found.rules);
        assert_eq!(
            info.rule_upper_bound(),
            found.rules + 2 * found.user_chains.len() as u64,
            "{:?} {}",
            family,
            info.name
        );
        total += found.rules;
    }
    assert_eq!(total, save_rule_lines(&tool(family, "-save")));
    total
}

fn exact_count_matches_save(family: Family) {
    enter_new_netns();
    restore(family, &ruleset(RULESET, family));
    let tables: BTreeSet<String> = ["filter", "mangle", "nat", "raw"].map(String::from).into();
    assert_eq!(listed_tables(family), tables);
    assert_eq!(check_against_save(family), 22);
    // Reading created nothing.
    assert_eq!(listed_tables(family), tables);
}

fn bound_is_exact_without_user_chains(family: Family) {
    enter_new_netns();
    restore(family, NO_USER_CHAINS);
    let legacy = LegacyFamily::open(family).unwrap();
    for table in ["filter", "mangle"] {
        let info = legacy.table(table).unwrap();
        let found = legacy.entries(info).unwrap();
        assert!(found.user_chains.is_empty());
        assert_eq!(info.rule_upper_bound(), found.rules, "{table}");
    }
    assert_eq!(check_against_save(family), 4);
}

fn finds_hint_chain(family: Family) {
    enter_new_netns();
    sh(&format!("{} -t mangle -N KUBE-IPTABLES-HINT", tool(family, "")));
    let legacy = LegacyFamily::open(family).unwrap();
    let mangle = entries(&legacy, "mangle");
    assert_eq!(
        mangle,
        TableEntries {
            rules: 0,
            user_chains: vec!["KUBE-IPTABLES-HINT".into()]
        }
    );
    assert_eq!(legacy.table("mangle").unwrap().rule_upper_bound(), 2);
}

fn empty_namespace_stays_empty(family: Family) {
    enter_new_netns();
    let legacy = LegacyFamily::open(family).unwrap();
    assert!(legacy.tables.is_empty());
    assert!(legacy.table("filter").is_none());
    assert!(listed_tables(family).is_empty());
    // Other families were not touched either.
    assert!(listed_tables(Family::Ipv4).is_empty() && listed_tables(Family::Ipv6).is_empty());
}

fn reading_mangle_creates_nothing_else(family: Family) {
    enter_new_netns();
    sh(&format!("{} -t mangle -A OUTPUT -j ACCEPT", tool(family, "")));
    let only_mangle: BTreeSet<String> = ["mangle".to_string()].into();
    assert_eq!(listed_tables(family), only_mangle);
    let legacy = LegacyFamily::open(family).unwrap();
    let names: Vec<&str> = legacy.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["mangle"]);
    assert_eq!(entries(&legacy, "mangle").rules, 1);
    // A table that is not listed is refused, not looked up.
    let mut filter = legacy.table("mangle").unwrap().clone();
    filter.name = "filter".into();
    assert!(legacy.entries(&filter).is_err());
    assert_eq!(listed_tables(family), only_mangle);
}

fn empty_table_counts_zero(family: Family) {
    enter_new_netns();
    sh(&format!("{} -t nat -L -n", tool(family, "")));
    let legacy = LegacyFamily::open(family).unwrap();
    let nat = legacy.table("nat").unwrap();
    assert_eq!(nat.rule_upper_bound(), 0);
    assert_eq!(legacy.entries(nat).unwrap(), TableEntries::default());
    assert_eq!(check_against_save(family), 0);
}

/// A shell loop (in this thread's namespace) that keeps changing the filter
/// table until the returned stop file exists.
fn start_churn(family: Family) -> (Child, PathBuf) {
    let stop = temp_path("stop");
    let ipt = tool(family, "");
    let script = format!(
        r#"while [ ! -e "{stop}" ]; do
  {ipt} -A INPUT -p tcp -m tcp --dport 1 -m comment --comment churn -j ACCEPT
  {ipt} -N CHURN
  {ipt} -A CHURN -j RETURN
  {ipt} -A INPUT -j CHURN
  {ipt} -D INPUT -j CHURN
  {ipt} -F CHURN
  {ipt} -X CHURN
  {ipt} -D INPUT -p tcp -m tcp --dport 1 -m comment --comment churn -j ACCEPT
done"#,
        stop = stop.display()
    );
    let child = Command::new("sh").arg("-ec").arg(script).spawn().unwrap();
    (child, stop)
}

fn consistent_while_changing(family: Family) {
    enter_new_netns();
    restore(family, &ruleset(RULESET, family));
    let legacy = LegacyFamily::open(family).unwrap();
    let base = entries(&legacy, "filter");
    let (mut churn, stop) = start_churn(family);
    // Read at least 200 times, and until three different states were seen.
    let started = std::time::Instant::now();
    let mut states = BTreeSet::new();
    let mut reads = 0;
    while reads < 200 || states.len() < 3 {
        assert!(
            started.elapsed().as_secs() < 20,
            "only saw {states:?}; churn loop exited: {:?}",
            churn.try_wait()
        );
        reads += 1;
        let found = entries(&legacy, "filter");
        // The loop has at most three rules and one chain of its own in.
        let extra: Vec<&String> = found
            .user_chains
            .iter()
            .filter(|c| !base.user_chains.contains(c))
            .collect();
        assert!(found.rules >= base.rules && found.rules <= base.rules + 3, "{found:?}");
        assert!(extra.is_empty() || extra == ["CHURN"], "{found:?}");
        assert!(
            base.user_chains.iter().all(|c| found.user_chains.contains(c)),
            "{found:?}"
        );
        if extra.is_empty() {
            // Without CHURN only the first rule of the loop can be present.
            assert!(found.rules <= base.rules + 1, "{found:?}");
        }
        states.insert((found.rules, extra.len()));
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    std::fs::write(&stop, "").unwrap();
    assert!(common::wait_within(churn, common::CHILD_LIMIT, "churn did not end")
        .status
        .success());
    std::fs::remove_file(stop).unwrap();
    // Settled again: back to the start.
    let legacy = LegacyFamily::open(family).unwrap();
    assert_eq!(entries(&legacy, "filter"), base);
}

/// Each check above runs as two tests, one per family.
macro_rules! tests_for_both_families {
    ($($check:ident),* $(,)?) => {
        mod ipv4 {
            $(#[test] fn $check() { crate::common::root_or_skip!(); super::$check(super::Family::Ipv4) })*
        }
        mod ipv6 {
            $(#[test] fn $check() { crate::common::root_or_skip!(); super::$check(super::Family::Ipv6) })*
        }
    };
}

tests_for_both_families!(
    exact_count_matches_save,
    bound_is_exact_without_user_chains,
    finds_hint_chain,
    empty_namespace_stays_empty,
    reading_mangle_creates_nothing_else,
    empty_table_counts_zero,
    consistent_while_changing,
);
