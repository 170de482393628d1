//! The nf_tables count cache against real rulesets: every figure it gives
//! equals the save tools' count, it is used only for the generation and the
//! network namespace it was counted in, and a damaged, foreign or linked
//! file is ignored. Each test runs in network namespaces of its own.

mod common;

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::PathBuf;

use common::Node;
use iptables_wrapper::kernel::count_cache::{self, Entry, Namespace};
use iptables_wrapper::kernel::nft::NftSocket;
use iptables_wrapper::kernel::RuleBounds;
use serde_json::Value;

/// The two families' save tools, for the exact counts.
const NFT_SAVES: [&str; 2] = ["iptables-nft-save", "ip6tables-nft-save"];
const LEGACY_SAVES: [&str; 2] = ["iptables-legacy-save", "ip6tables-legacy-save"];

fn saved(tools: [&str; 2]) -> u64 {
    tools.iter().map(|tool| common::save_rule_lines(tool)).sum()
}

/// One long built-in chain: `rules` rules in INPUT.
fn long_builtin_chain(rules: usize, v6: bool) -> String {
    let mut text = String::from("*filter\n:INPUT ACCEPT [0:0]\n");
    for i in 0..rules {
        let source = if v6 {
            format!("fd00::{:x}", i + 1)
        } else {
            format!("10.{}.{}.{}", i / 65536, i / 256 % 256, i % 256)
        };
        text.push_str(&format!("-A INPUT -s {source} -p tcp -m tcp --dport 80 -j ACCEPT\n"));
    }
    text + "COMMIT\n"
}

/// One long user chain jumped to from INPUT (twice) and from OUTPUT.
fn long_user_chain(rules: usize, v6: bool) -> String {
    let body = long_builtin_chain(rules, v6);
    body.replace(":INPUT ACCEPT [0:0]\n", ":INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:LONG - [0:0]\n-A INPUT -j LONG\n-A INPUT -p udp -j LONG\n-A OUTPUT -j LONG\n")
        .replace("-A INPUT -s", "-A LONG -s")
}

/// kube-proxy-like: per service a KUBE-SERVICES jump, a KUBE-SVC and a
/// KUBE-SEP chain, in nat; a few filter rules.
fn kube_proxy_like(services: usize, v6: bool) -> String {
    let mut chains = String::from("*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n");
    let mut rules =
        String::from("-A PREROUTING -m comment --comment \"portals\" -j KUBE-SERVICES\n-A OUTPUT -j KUBE-SERVICES\n");
    for s in 0..services {
        let (ip, pod) = if v6 {
            (format!("fd00::{:x}/128", s + 1), format!("[fd01::{:x}]:8080", s + 1))
        } else {
            (
                format!("10.96.{}.{}/32", s / 250, s % 250 + 1),
                format!("10.244.{}.{}:8080", s / 250, s % 250 + 1),
            )
        };
        chains.push_str(&format!(":KUBE-SVC-{s} - [0:0]\n:KUBE-SEP-{s} - [0:0]\n"));
        rules.push_str(&format!(
            "-A KUBE-SERVICES -d {ip} -p tcp -m comment --comment \"svc {s}\" -m tcp --dport 80 -j KUBE-SVC-{s}\n\
             -A KUBE-SVC-{s} -m comment --comment \"svc {s}\" -j KUBE-SEP-{s}\n\
             -A KUBE-SEP-{s} -p tcp -m tcp -j DNAT --to-destination {pod}\n"
        ));
    }
    format!("{chains}{rules}COMMIT\n*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT\nCOMMIT\n")
}

/// Runs a setup script with a lock file of its own, so that the lock the
/// wrapper sees is never created (it would decide a tie).
fn setup(node: &Node, script: &str) {
    common::sh(&format!(
        "export XTABLES_LOCKFILE={}\n{script}",
        node.path("setup.lock").display()
    ));
}

fn restore(node: &Node, tool: &str, rules: &str) {
    let file = node.path(&format!("{tool}.rules"));
    std::fs::write(&file, rules).unwrap();
    setup(node, &format!("{tool} < {}", file.display()));
}

/// Loads `v4` and `v6` into both backends: a tie, so counts decide nothing
/// and the nft rules must be counted exactly.
fn tie(node: &Node, v4: &str, v6: &str) {
    for backend in ["legacy", "nft"] {
        restore(node, &format!("iptables-{backend}-restore"), v4);
        restore(node, &format!("ip6tables-{backend}-restore"), v6);
    }
}

/// The nft count in `detect --json`: (low, high, exact, method).
fn nft_count(report: &Value) -> (u64, Option<u64>, bool, String) {
    let nft = &report["rule_counts"]["nft"];
    (
        nft["low"].as_u64().unwrap(),
        nft["high"].as_u64(),
        nft["exact"].as_u64() == nft["low"].as_u64(),
        nft["method"].as_str().unwrap().to_string(),
    )
}

fn run_dir(node: &Node) -> PathBuf {
    node.path("run")
}

fn generation() -> u32 {
    NftSocket::open().unwrap().generation().unwrap()
}

/// The cache's entry for this namespace: (generation, count, confirmed).
fn cached_entry(node: &Node) -> Option<(u32, RuleBounds, bool)> {
    let contents = std::fs::read(run_dir(node).join(count_cache::FILE_NAME)).ok()?;
    let namespace = this_namespace();
    count_cache::parse(&contents)?
        .into_iter()
        .find(|(ns, _)| *ns == namespace)
        .map(|(_, entry)| (entry.generation, entry.rules, entry.confirmed))
}

/// The wrapped call counts (a tie needs every nft rule) and stores the
/// count pending; `detect` counts again, which confirms it; the next
/// `detect` counts again too and finds the cache agreeing. Every figure
/// equals the save tools' `-A` lines.
fn assert_cached_count_is_exact(node: &Node) {
    let expected = saved(NFT_SAVES);
    assert_eq!(saved(LEGACY_SAVES), expected, "the setup is a tie");
    assert_eq!(node.version_mode("iptables"), "nft", "a tie goes to the default");
    let generation = generation();
    assert_eq!(
        cached_entry(node),
        Some((generation, RuleBounds::exact(expected), false))
    );
    let (low, _, exact, method) = nft_count(&node.detect());
    assert_eq!((low, exact), (expected, true));
    assert_eq!(
        method,
        format!("netlink GETRULE dumps, generation {generation}"),
        "a count seen once is not served"
    );
    assert_eq!(
        cached_entry(node),
        Some((generation, RuleBounds::exact(expected), true))
    );
    let (low, _, exact, method) = nft_count(&node.detect());
    assert_eq!((low, exact), (expected, true), "the cached figure stays the same");
    assert_eq!(
        method,
        format!("netlink GETRULE dumps, generation {generation}; the count cache agrees")
    );
}

#[test]
fn cached_counts_are_exact_for_a_long_builtin_chain() {
    common::root_or_skip!();
    let node = Node::new("cache-builtin");
    tie(&node, &long_builtin_chain(3000, false), &long_builtin_chain(1500, true));
    assert_cached_count_is_exact(&node);
}

#[test]
fn cached_counts_are_exact_for_a_long_user_chain() {
    common::root_or_skip!();
    let node = Node::new("cache-user-chain");
    tie(&node, &long_user_chain(3000, false), &long_user_chain(1500, true));
    assert_cached_count_is_exact(&node);
}

#[test]
fn cached_counts_are_exact_for_the_kube_proxy_shape() {
    common::root_or_skip!();
    let node = Node::new("cache-kube-proxy");
    tie(&node, &kube_proxy_like(700, false), &kube_proxy_like(300, true));
    assert_cached_count_is_exact(&node);
}

#[test]
fn a_changed_ruleset_is_counted_again() {
    common::root_or_skip!();
    let node = Node::new("cache-changed");
    tie(&node, &long_builtin_chain(500, false), &long_builtin_chain(200, true));
    assert_cached_count_is_exact(&node);
    // One more nft rule: nft now holds more, a new generation, a new count.
    setup(&node, "ip6tables-nft -A INPUT -j ACCEPT");
    let changed = generation();
    let report = node.detect();
    let (low, _, exact, method) = nft_count(&report);
    assert_eq!((low, exact), (saved(NFT_SAVES), true));
    assert_eq!(low, 701);
    assert_eq!(method, format!("netlink GETRULE dumps, generation {changed}"));
    assert_eq!(node.version_mode("iptables"), "nft");
    // A change that keeps the number of rules still moves the generation.
    setup(
        &node,
        "ip6tables-nft -D INPUT -j ACCEPT; iptables-nft -I INPUT -j DROP; iptables-legacy -I INPUT -j DROP",
    );
    assert_eq!(node.version_mode("iptables"), "nft");
    let (low, _, exact, _) = nft_count(&node.detect());
    assert_eq!((low, exact), (saved(NFT_SAVES), true));
    let (low, _, exact, method) = nft_count(&node.detect());
    assert_eq!((low, exact), (saved(NFT_SAVES), true));
    assert_eq!(low, 701);
    assert_eq!(
        method,
        format!(
            "netlink GETRULE dumps, generation {}; the count cache agrees",
            generation()
        )
    );
}

#[test]
fn a_damaged_cache_file_is_ignored_and_replaced() {
    common::root_or_skip!();
    let node = Node::new("cache-damaged");
    tie(&node, &long_builtin_chain(400, false), &long_builtin_chain(100, true));
    assert_cached_count_is_exact(&node);
    let file = run_dir(&node).join(count_cache::FILE_NAME);
    let good = std::fs::read(&file).unwrap();
    let damaged: Vec<Vec<u8>> = vec![
        good[..good.len() / 2].to_vec(),
        String::from_utf8(good.clone())
            .unwrap()
            .replace(" 500 ", " 5x0 ")
            .into_bytes(),
        b"\0\xff garbage".to_vec(),
        vec![b'9'; count_cache::MAX_FILE_LEN + 1],
    ];
    for contents in damaged {
        std::fs::write(&file, &contents).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (low, _, exact, method) = nft_count(&node.detect());
        assert_eq!((low, exact), (500, true));
        assert!(method.starts_with("netlink GETRULE dumps"), "{method}");
        let rewritten = std::fs::read(&file).unwrap();
        assert!(
            count_cache::parse(&rewritten).is_some(),
            "replaced by a good file: {:?}",
            String::from_utf8_lossy(&rewritten)
        );
    }
}

/// This namespace's cache key.
fn this_namespace() -> Namespace {
    Namespace::with_cookie(NftSocket::open().unwrap().netns_cookie().unwrap()).expect("a boot id")
}

#[test]
fn a_cache_file_is_used_only_when_private_and_not_linked() {
    common::root_or_skip!();
    let node = Node::new("cache-forged");
    tie(&node, &long_builtin_chain(300, false), &long_builtin_chain(100, true));
    assert_eq!(node.version_mode("iptables"), "nft");
    // A forged entry for this very namespace and generation.
    let forged = count_cache::format(&[(
        this_namespace(),
        Entry {
            generation: generation(),
            rules: RuleBounds::exact(7777),
            confirmed: true,
        },
    )]);
    let file = run_dir(&node).join(count_cache::FILE_NAME);
    let elsewhere = node.path("forged");
    std::fs::write(&elsewhere, &forged).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();

    let unused = |report: &Value| {
        let (low, _, _, method) = nft_count(report);
        (low, method.contains("count cache"))
    };
    std::fs::remove_file(&file).unwrap();
    symlink(&elsewhere, &file).unwrap();
    assert_eq!(unused(&node.detect()), (400, false), "a symlink is not followed");

    std::fs::remove_file(&file).unwrap();
    std::fs::copy(&elsewhere, &file).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        unused(&node.detect()),
        (400, false),
        "a file others can read is not used"
    );

    // The same file, private: the wrapper reads it (which is why the
    // directory and file checks above matter), but detect counts anyway and
    // says the cache disagrees.
    std::fs::write(&file, &forged).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (low, _, exact, method) = nft_count(&node.detect());
    assert_eq!((low, exact), (400, true));
    assert!(
        method.ends_with("; the count cache said 7777: disagrees, replaced"),
        "{method}"
    );
    assert_eq!(
        cached_entry(&node),
        Some((generation(), RuleBounds::exact(400), false)),
        "the fresh count replaced the forged one"
    );
}

#[test]
fn a_cached_count_below_what_the_built_in_chains_hold_is_not_used() {
    common::root_or_skip!();
    // nft: 301 rules, all but one in a user chain (the built-in chains'
    // lookups show 1); legacy: 200. A forged entry saying nft holds none
    // contradicts the one rule the call reads anyway: it is dropped and the
    // rules counted, so the call still goes to nft.
    let node = Node::new("cache-below-bounds");
    let user_chain = long_user_chain(300, false)
        .replace("-A INPUT -p udp -j LONG\n", "")
        .replace("-A OUTPUT -j LONG\n", "");
    restore(&node, "iptables-nft-restore", &user_chain);
    restore(&node, "iptables-legacy-restore", &long_builtin_chain(200, false));
    assert_eq!((saved(NFT_SAVES), saved(LEGACY_SAVES)), (301, 200));
    assert_eq!(node.version_mode("iptables"), "nft");
    for forged_count in [0, 150] {
        let forged = count_cache::format(&[(
            this_namespace(),
            Entry {
                generation: generation(),
                rules: RuleBounds::exact(forged_count),
                confirmed: true,
            },
        )]);
        let file = run_dir(&node).join(count_cache::FILE_NAME);
        std::fs::write(&file, &forged).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let decided = node.version_mode("iptables");
        if forged_count == 0 {
            assert_eq!(decided, "nft", "a count below the bounds is not used");
            assert_eq!(
                cached_entry(&node),
                Some((
                    generation(),
                    RuleBounds {
                        low: 201,
                        high: u64::MAX
                    },
                    false
                )),
                "the call counted (until past legacy's 200), and its count replaced the forged one"
            );
        } else {
            // Within the bounds a forged count is believed: the trust
            // boundary is the runtime directory (see docs/limits.md, "The count cache is trusted as far as its directory is").
            assert_eq!(decided, "legacy");
            let (low, _, _, method) = nft_count(&node.detect());
            assert_eq!(low, 301, "detect always counts");
            assert!(
                method.ends_with("; the count cache said 150: disagrees, replaced"),
                "{method}"
            );
        }
    }
}

#[test]
fn a_count_from_another_network_namespace_is_not_used() {
    common::root_or_skip!();
    // Two namespaces with the same commits (so the same generation id) but
    // different rules, sharing one runtime directory.
    let node = Node::new("cache-two-netns");
    tie(&node, &long_builtin_chain(300, false), &long_builtin_chain(100, true));
    let first_generation = generation();
    assert_eq!(nft_count(&node.detect()).0, 400);
    assert_eq!(nft_count(&node.detect()).0, 400, "confirmed");

    let second = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                common::enter_new_netns();
                tie(&node, &long_builtin_chain(301, false), &long_builtin_chain(100, true));
                assert_eq!(generation(), first_generation, "the same generation id in both");
                let (low, _, _, method) = nft_count(&node.detect());
                assert_eq!(nft_count(&node.detect()).0, 401, "confirmed");
                let again = nft_count(&node.detect());
                (low, method, again.0, again.3, generation())
            })
            .join()
            .unwrap()
    });
    let (low, method, again, again_method, second_generation) = second;
    assert_eq!(low, 401, "not the other namespace's 400");
    assert!(method.starts_with("netlink GETRULE dumps"), "{method}");
    assert_eq!(again, 401);
    assert_eq!(
        again_method,
        format!("netlink GETRULE dumps, generation {second_generation}; the count cache agrees")
    );
    // Both namespaces keep their own entry.
    let (low, _, _, method) = nft_count(&node.detect());
    assert_eq!(low, 400);
    assert!(method.ends_with("the count cache agrees"), "{method}");
    let entries = count_cache::parse(&std::fs::read(run_dir(&node).join(count_cache::FILE_NAME)).unwrap()).unwrap();
    assert_eq!(entries.len(), 2);
}

#[test]
fn the_cache_file_is_private() {
    common::root_or_skip!();
    let node = Node::new("cache-private");
    tie(&node, &long_builtin_chain(50, false), &long_builtin_chain(50, true));
    assert_eq!(node.version_mode("iptables"), "nft");
    let dir = std::fs::symlink_metadata(run_dir(&node)).unwrap();
    assert!(dir.is_dir());
    assert_eq!(dir.permissions().mode() & 0o777, 0o700);
    let file = std::fs::symlink_metadata(run_dir(&node).join(count_cache::FILE_NAME)).unwrap();
    assert!(file.is_file());
    assert_eq!(file.permissions().mode() & 0o777, 0o600);
}

#[test]
fn no_runtime_directory_no_cache_still_exact() {
    common::root_or_skip!();
    let node = Node::new("cache-none");
    tie(&node, &long_builtin_chain(200, false), &long_builtin_chain(10, true));
    // A regular file where the directory would be: nothing can be stored.
    std::fs::write(run_dir(&node), b"not a directory").unwrap();
    for _ in 0..2 {
        let (low, _, exact, method) = nft_count(&node.detect());
        assert_eq!((low, exact), (210, true));
        assert!(method.starts_with("netlink GETRULE dumps"), "{method}");
    }
}

#[test]
fn legacy_get_info_cannot_tell_rules_from_user_chains() {
    common::root_or_skip!();
    // Why legacy counts are not cached: no key from GET_INFO is exact. A user
    // chain holding two rules and two empty user chains give the same entry
    // count, size and valid hooks (and the same hook and underflow offsets).
    use iptables_wrapper::family::Family;
    use iptables_wrapper::kernel::legacy::LegacyFamily;
    let mut seen = Vec::new();
    for script in [
        "iptables-legacy -N X; iptables-legacy -A X -j LOG; iptables-legacy -A X -j ACCEPT",
        "iptables-legacy -N X; iptables-legacy -N Y",
    ] {
        common::enter_new_netns();
        let lock = std::env::temp_dir().join(format!("iptw-getinfo-{}.lock", std::process::id()));
        common::sh(&format!("export XTABLES_LOCKFILE={}\n{script}", lock.display()));
        let _ = std::fs::remove_file(&lock);
        let tables = LegacyFamily::open(Family::Ipv4).unwrap();
        let filter = tables.table("filter").unwrap().clone();
        let rules = tables.entries(&filter).unwrap().rules;
        seen.push((filter, rules));
    }
    assert_eq!(seen[0].0, seen[1].0, "the same GET_INFO");
    assert_eq!((seen[0].1, seen[1].1), (2, 0), "different rule counts");
}
