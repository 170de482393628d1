//! What the wrapper can and cannot see of the kernel, each test in a network
//! namespace of its own: unreadable `/proc`, built-in modules without sysfs
//! entries, kernels lacking one backend (simulated with a mount namespace per
//! run: a tmpfs over `/proc` or `/sys`, a fake `/proc/modules`, module lists
//! under the host root), the save-tool fallback's bytes, the lock file, stale
//! legacy tables, host link names and the hint chains.

mod common;

use common::seccomp::{refuse_sockets, refuse_syscall, refuse_wrapper_raw_sockets};
use common::OutputWithin as _;
use common::{Node, WRAPPER};
use serde_json::Value;
use std::process::{Command, Output};

/// How a run sees the kernel through its own mount namespace.
#[derive(Clone, Copy)]
enum View<'a> {
    /// This machine's own `/proc`, `/sys` and module lists.
    AsIs,
    /// A tmpfs over `/proc`: no `/proc` at all.
    NoProc,
    /// A modular kernel: a fake `/proc` with this `/proc/modules` (this
    /// machine's kernel has no module support, so no real procfs has one),
    /// the real `/proc/<pid>` as `/proc/self`, a tmpfs over `/sys` (no module
    /// entries) and over this machine's own `/lib/modules` (only the host
    /// root's count); `/proc/thread-self/net` is the namespace's real one, or
    /// an empty directory when `x_tables` is false. Being in a tmpfs, the
    /// table lists are not trusted: legacy is unknown.
    Modular { proc_modules: &'a str, x_tables: bool },
    /// Lying table lists (`filter` and `nat`, both families): a directory
    /// holding them mounted over the run's own `net` directories, by either
    /// path (`/proc/thread-self/net`, that is `/proc/<pid>/task/<pid>/net`,
    /// and `/proc/self/net`, `/proc/<pid>/net`, which the wrapper's main
    /// thread reads: the shell execs the program, which keeps its pid).
    ListsMountedOverNet,
    /// Lying table lists in a tmpfs at `/proc`.
    ListsInTmpfsProc,
    /// The real procfs `net` directory of the process `OTHER_PID` (another
    /// network namespace) mounted over the run's own (both paths, as above).
    OtherNamespacesNet,
    /// A procfs of the run's own mounted with `subset=pid` (no
    /// `/proc/modules`, `/proc/sys`, `/proc/version`), a tmpfs over `/sys`
    /// and over this machine's `/lib/modules`.
    SubsetPid,
}

/// Writes lying legacy table lists (`filter`, `nat`) into `dir` (a shell word).
fn lying_lists(dir: &str) -> String {
    format!("mkdir -p {dir}; for f in ip_tables_names ip6_tables_names; do printf 'filter\\nnat\\n' > {dir}/$f; done")
}

/// The wrapper (or a wrapped command of the node) run with `args` in a
/// mount namespace of its own, seeing the kernel through `view`.
fn run_in_view(node: &Node, view: View, program: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    view_command(node, view, program, args, env)
        .output_within_limit()
        .expect("run unshare")
}

/// The command [`run_in_view`] runs.
fn view_command(node: &Node, view: View, program: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let no_modules = "mount -t tmpfs nosys /sys
for d in /lib/modules /usr/lib/modules; do if [ -d $d ]; then mount -t tmpfs nomodules $d; fi; done";
    let setup = match view {
        View::AsIs => String::new(),
        View::NoProc => "mount -t tmpfs noproc /proc".to_string(),
        View::Modular { proc_modules, x_tables } => format!(
            r#"stage="$STAGE"; mkdir -p "$stage/pid"
mount --bind /proc/$$ "$stage/pid"
mount -t tmpfs fakeproc /proc
mkdir -p /proc/self /proc/thread-self/net
mount --bind "$stage/pid" /proc/self
{}
printf '%s' '{proc_modules}' > /proc/modules
{no_modules}"#,
            if x_tables {
                r#"mount --bind "$stage/pid/net" /proc/thread-self/net"#
            } else {
                ""
            }
        ),
        View::ListsMountedOverNet => format!(
            "{}\nfor net in /proc/$$/task/$$/net /proc/$$/net; do mount --bind \"$STAGE/lists\" $net; done",
            lying_lists("\"$STAGE/lists\"")
        ),
        View::ListsInTmpfsProc => format!(
            "mount -t tmpfs fakeproc /proc\n{}\n{}",
            lying_lists("/proc/thread-self/net"),
            lying_lists("/proc/self/net")
        ),
        View::OtherNamespacesNet => {
            "for net in /proc/$$/task/$$/net /proc/$$/net; do mount --bind /proc/$OTHER_PID/net $net; done".to_string()
        }
        View::SubsetPid => format!("mount -t proc -o subset=pid proc /proc\n{no_modules}"),
    };
    let mut command = Command::new("unshare");
    command
        .args(["-m", "sh", "-ec"])
        .arg(format!("{setup}\nexec \"$@\""))
        .arg("sh")
        .arg(program)
        .args(args)
        .env("STAGE", node.path("stage"))
        .env("IPTABLES_WRAPPER_HOST_ROOT", &node.host_root)
        .env("IPTABLES_WRAPPER_RUN_DIR", node.path("run"))
        .env("XTABLES_LOCKFILE", &node.lockfile)
        .env_remove("IPTABLES_MODE")
        .env_remove("IPTABLES_WRAPPER_SBIN")
        .env_remove("IPTABLES_WRAPPER_LOG");
    for (name, value) in env {
        command.env(name, value);
    }
    command
}

/// `detect --json` in a view, parsed.
fn detect_in_view(node: &Node, view: View, env: &[(&str, &str)]) -> Value {
    let out = run_in_view(node, view, WRAPPER, &["detect", "--json"], env);
    parse_detect(&out)
}

fn parse_detect(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "detect failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn evidence(report: &Value) -> &Vec<Value> {
    report["evidence"].as_array().unwrap()
}

/// Evidence values of a source whose location contains `location`.
fn values<'a>(report: &'a Value, source: &str, location: &str) -> Vec<&'a str> {
    evidence(report)
        .iter()
        .filter(|e| e["source"] == source && e["location"].as_str().unwrap().contains(location))
        .map(|e| e["value"].as_str().unwrap())
        .collect()
}

fn warnings(report: &Value) -> Vec<&str> {
    report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect()
}

fn kernel_release() -> String {
    common::sh("uname -r").trim().to_string()
}

/// Writes a module list (`modules.builtin`, `modules.dep`) of the running
/// kernel's release under the node's host root.
fn host_module_list(node: &Node, list: &str, lines: &[&str]) {
    let dir = node.host_root.join("lib/modules").join(kernel_release());
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(dir.join(list), text).unwrap();
}

fn remove_host_module_lists(node: &Node) {
    let _ = std::fs::remove_dir_all(node.host_root.join("lib/modules"));
}

fn mode_and_source(report: &Value) -> (&str, &str) {
    (report["mode"].as_str().unwrap(), report["decided_by"].as_str().unwrap())
}

// Item 4: unknown is unknown, never zero.

/// A removal by the override whose own backend cannot be read (legacy,
/// without /proc) while the other holds rules is refused, naming why, and
/// empties nothing, `--allow-opening` or not: nothing shows that the
/// host's rules are where the override says. `--despite-contradiction`
/// is the operator's word that they are.
#[test]
fn a_host_backend_that_cannot_be_read_does_not_let_the_other_go() {
    common::root_or_skip!();
    let node = Node::new("unreadable-host");
    node.sh("iptables-nft -A INPUT -s 10.9.9.8 -j ACCEPT\niptables-nft -A INPUT -p tcp --dport 22 -j ACCEPT");
    host_module_list(
        &node,
        "modules.builtin",
        &["kernel/net/netfilter/nfnetlink.ko", "kernel/net/netfilter/nf_tables.ko"],
    );
    let before = node.sh("iptables-nft-save | grep -c '^-A'");
    let override_legacy = [("IPTABLES_MODE", "legacy")];
    for args in [
        &["stale", "--remove"][..],
        &["stale", "--remove", "--allow-opening"][..],
    ] {
        let out = run_in_view(&node, View::NoProc, WRAPPER, args, &override_legacy);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("in ipv4 nft holds 2 rules while what legacy holds cannot be read"),
            "{args:?}: {stderr}"
        );
        assert_eq!(node.sh("iptables-nft-save | grep -c '^-A'"), before, "{args:?}");
    }
    let out = run_in_view(&node, View::NoProc, WRAPPER, &["stale", "--json"], &override_legacy);
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["certain"], false, "{report}");
    let out = run_in_view(
        &node,
        View::NoProc,
        WRAPPER,
        &["stale", "--remove", "--allow-opening", "--despite-contradiction"],
        &override_legacy,
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(node.sh("iptables-nft-save | grep -c '^-A' || true").trim(), "0");
}

#[test]
fn without_proc_legacy_is_unknown_not_empty() {
    common::root_or_skip!();
    let node = Node::new("noproc");
    node.sh("iptables-legacy -t mangle -N KUBE-IPTABLES-HINT
         for i in 1 2 3; do iptables-legacy -A INPUT -s 10.0.0.$i -j ACCEPT; done
         iptables-nft -A INPUT -j ACCEPT");
    // The host's module list says nf_tables is built in: nft is asked, and
    // known, where legacy cannot be.
    host_module_list(
        &node,
        "modules.builtin",
        &["kernel/net/netfilter/nfnetlink.ko", "kernel/net/netfilter/nf_tables.ko"],
    );
    let report = detect_in_view(&node, View::NoProc, &[]);
    assert!(
        values(&report, "backend-presence", "nf_tables")[0].starts_with("present"),
        "{report}"
    );
    assert_eq!(
        values(&report, "hint-chain", "nft"),
        ["absent (ipv4, ipv6)"],
        "nft is read: {report}"
    );
    for e in evidence(&report) {
        let value = e["value"].as_str().unwrap();
        let method = e["method"].as_str().unwrap();
        let location = e["location"].as_str().unwrap();
        assert!(
            !method.contains("no legacy table") && !value.contains("no legacy table"),
            "legacy is unknown, not absent: {e}"
        );
        if location.starts_with("legacy") {
            assert!(value.starts_with("unknown"), "legacy evidence is unknown: {e}");
        }
    }
    assert!(
        values(&report, "rule-counts", "rule counts")
            .iter()
            .any(|v| v.starts_with("unknown")),
        "{report}"
    );
    // One nft rule against an unknown legacy count decides nothing (read
    // as 0, it would decide nft by the counts): the default decides, and
    // says so.
    assert_eq!(report["rule_counts"], Value::Null, "{report}");
    assert_eq!(mode_and_source(&report), ("nft", "default"), "{report}");
    assert!(
        values(&report, "rule-counts", "rule counts")
            .iter()
            .all(|v| v.starts_with("unknown: legacy")),
        "{report}"
    );
    assert!(
        warnings(&report).iter().any(|w| w.contains("unknown")),
        "the default is flagged as resting on unknown evidence: {report}"
    );
}

#[test]
fn each_evidence_says_what_it_knows() {
    common::root_or_skip!();
    // One nft rule, no hint chain, no legacy table, no host link, no lock
    // file: read as it is, then without /proc (legacy and nft unknown).
    let node = Node::new("states");
    node.sh("iptables-nft -A INPUT -j ACCEPT");
    let _ = std::fs::remove_file(&node.lockfile);
    let states = |report: &Value, source: &str, location: &str| -> Vec<String> {
        evidence(report)
            .iter()
            .filter(|e| e["source"] == source && e["location"].as_str().unwrap().contains(location))
            .map(|e| {
                e["state"]
                    .as_str()
                    .unwrap_or_else(|| panic!("no state: {e}"))
                    .to_string()
            })
            .collect()
    };
    let as_is = detect_in_view(&node, View::AsIs, &[]);
    let no_proc = detect_in_view(&node, View::NoProc, &[]);
    for report in [&as_is, &no_proc] {
        for e in evidence(report) {
            let state = e["state"].as_str().unwrap_or_else(|| panic!("no state: {e}"));
            assert!(["known", "absent", "unknown"].contains(&state), "{e}");
            assert_eq!(
                state == "unknown",
                e["value"].as_str().unwrap().starts_with("unknown"),
                "the state and the value agree: {e}"
            );
        }
        assert_eq!(states(report, "host-link", "alternatives"), ["absent"], "{report}");
        assert_eq!(states(report, "xtables-lock", ""), ["absent"], "{report}");
    }
    assert_eq!(mode_and_source(&as_is), ("nft", "rule-counts"), "{as_is}");
    assert_eq!(states(&as_is, "hint-chain", "nft mangle"), ["absent"], "{as_is}");
    assert_eq!(states(&as_is, "hint-chain", "legacy mangle"), ["absent"], "{as_is}");
    assert_eq!(
        states(&as_is, "rule-counts", "rules (ipv4 + ipv6)"),
        ["known", "known"],
        "{as_is}"
    );
    assert_eq!(states(&as_is, "backend-presence", "nf_tables"), ["known"], "{as_is}");
    assert_eq!(
        states(&no_proc, "hint-chain", "legacy mangle"),
        ["unknown"],
        "{no_proc}"
    );
    assert_eq!(states(&no_proc, "rule-counts", "rule counts"), ["unknown"], "{no_proc}");
}

#[test]
fn built_in_nf_tables_without_sysfs_entry_is_found() {
    common::root_or_skip!();
    // A modular kernel with nf_tables built in: no /sys/module/nf_tables,
    // not in /proc/modules; only modules.builtin says it is there.
    let node = Node::new("builtin");
    // The legacy call leaves a 0600 lock file and a legacy table: with the
    // counts unknown, that is no tie for the lock to break either.
    node.sh("iptables-nft -t mangle -N KUBE-IPTABLES-HINT; iptables-legacy -A INPUT -j ACCEPT");
    let modular = || View::Modular {
        proc_modules: "x_tables 61440 1 ip_tables, Live 0x0000000000000000\n",
        x_tables: true,
    };
    host_module_list(
        &node,
        "modules.builtin",
        &["kernel/net/netfilter/nfnetlink.ko", "kernel/net/netfilter/nf_tables.ko"],
    );
    let report = detect_in_view(&node, modular(), &[]);
    assert_eq!(mode_and_source(&report), ("nft", "hint-chain"), "{report}");
    let presence = values(&report, "backend-presence", "nf_tables");
    assert!(
        presence[0].starts_with("present") && presence[0].contains("modules.builtin"),
        "{report}"
    );

    // Without any module list nf_tables is unknown, and the one legacy rule
    // does not win against it.
    remove_host_module_lists(&node);
    let report = detect_in_view(&node, modular(), &[]);
    assert_eq!(mode_and_source(&report), ("nft", "default"), "{report}");
    let presence = values(&report, "backend-presence", "nf_tables");
    assert!(
        presence[0].starts_with("unknown") && presence[0].contains("modules.builtin"),
        "detect says why: {report}"
    );
    assert!(
        values(&report, "hint-chain", "nft")
            .iter()
            .all(|v| v.starts_with("unknown")),
        "{report}"
    );

    // Loaded as a module: /proc/modules says so.
    let report = detect_in_view(
        &node,
        View::Modular {
            proc_modules: "nf_tables 364544 0 - Live 0x0000000000000000\n",
            x_tables: true,
        },
        &[],
    );
    assert_eq!(mode_and_source(&report), ("nft", "hint-chain"), "{report}");
}

#[test]
fn save_tool_fallback_reads_bytes_not_text() {
    common::root_or_skip!();
    let node = Node::new("bytes");
    // A rule comment in Latin-1 (0xE9), a hint chain, and more nft rules.
    node.sh(r#"iptables-legacy -t mangle -N KUBE-IPTABLES-HINT
           iptables-legacy -A INPUT -m comment --comment "$(printf 'caf\351')" -j ACCEPT
           for i in 1 2 3; do iptables-nft -A INPUT -j ACCEPT; done"#);
    let mut command = node.wrapper();
    command.args(["detect", "--json"]);
    let report = parse_detect(&refuse_wrapper_raw_sockets(&mut command).output_within_limit().unwrap());
    assert!(
        values(&report, "hint-chain", "legacy ipv4 mangle chain KUBE-IPTABLES-HINT") == ["present"],
        "{report}"
    );
    let legacy_method = evidence(&report)
        .iter()
        .find(|e| e["location"] == "legacy rules (ipv4 + ipv6)")
        .map(|e| e["method"].as_str().unwrap().to_string())
        .unwrap_or_default();
    assert!(legacy_method.contains("iptables-legacy-save output"), "{report}");
    assert_eq!(report["rule_counts"]["legacy"]["exact"], 1, "{report}");
    assert_eq!(mode_and_source(&report), ("legacy", "hint-chain"), "{report}");
}

// Item 6: the lock file only tips a balance.

#[test]
fn lock_file_decides_only_beside_legacy_tables() {
    common::root_or_skip!();
    use std::os::unix::fs::PermissionsExt;
    let node = Node::new("locktraces");
    // go-iptables' lock on an nft host: 0600, held, and no legacy table.
    std::fs::write(&node.lockfile, "").unwrap();
    std::fs::set_permissions(&node.lockfile, std::fs::Permissions::from_mode(0o600)).unwrap();
    let held = nix::fcntl::Flock::lock(
        std::fs::File::open(&node.lockfile).unwrap(),
        nix::fcntl::FlockArg::LockExclusive,
    )
    .unwrap();
    let report = node.detect();
    // No legacy table: nft, and the lock decides nothing.
    assert_eq!(mode_and_source(&report), ("nft", "rule-counts"), "{report}");
    let lock = values(&report, "xtables-lock", &node.lockfile.display().to_string());
    assert!(
        lock[0].contains("locked right now") && lock[0].contains("decides nothing"),
        "shown: {report}"
    );
    assert!(
        warnings(&report).is_empty(),
        "no disagreement from the lock alone: {report}"
    );
    assert_eq!(node.version_mode("iptables"), "nft");

    // A legacy table with a DROP policy here (made with another lock file,
    // this one being held): now the lock breaks the 0-0 tie. (An empty
    // listed table is no trace: see tests/legacy_state.rs.)
    common::sh(&format!(
        "XTABLES_LOCKFILE={} iptables-legacy -t raw -P OUTPUT DROP",
        node.path("other.lock").display()
    ));
    let report = node.detect();
    assert_eq!(mode_and_source(&report), ("legacy", "xtables-lock"), "{report}");
    drop(held);

    // Only a regular file is evidence: /dev/null with a lock on it is not.
    let dev_null = nix::fcntl::Flock::lock(
        std::fs::File::open("/dev/null").unwrap(),
        nix::fcntl::FlockArg::LockShared,
    )
    .unwrap();
    let out = node
        .wrapper()
        .env("XTABLES_LOCKFILE", "/dev/null")
        .args(["detect", "--json"])
        .output_within_limit()
        .unwrap();
    let report = parse_detect(&out);
    assert_eq!(mode_and_source(&report), ("nft", "default"), "{report}");
    assert!(
        values(&report, "xtables-lock", "/dev/null")[0].contains("not a lock file"),
        "{report}"
    );
    drop(dev_null);
}

// Item 7: stale legacy rules, not stale legacy tables.

fn stale_warnings(node: &Node) -> (Vec<String>, String) {
    let report = node.detect();
    assert_eq!(mode_and_source(&report), ("nft", "host-link"), "{report}");
    let from_detect = warnings(&report)
        .iter()
        .filter(|w| w.contains("stale legacy rules"))
        .map(|w| w.to_string())
        .collect();
    // A call asked for its warnings (IPTABLES_WRAPPER_LOG set).
    let out = node.version_with_warnings("iptables");
    assert!(String::from_utf8_lossy(&out.stdout).contains("(nf_tables)"));
    (from_detect, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn empty_legacy_tables_are_not_stale_rules() {
    common::root_or_skip!();
    let node = Node::new("emptylegacy");
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    // Read-only legacy listings create empty tables; an empty user chain
    // holds no rule either.
    node.sh("iptables-legacy -L -n >/dev/null; ip6tables-legacy -t mangle -L -n >/dev/null; iptables-legacy -t nat -N EMPTY");
    let (from_detect, stderr) = stale_warnings(&node);
    assert!(from_detect.is_empty(), "{from_detect:?}");
    assert!(!stderr.contains("stale legacy rules"), "{stderr}");
    let report = node.detect();
    assert!(
        values(&report, "rule-counts", "legacy ipv4 tables")[0].contains("without rules"),
        "detect still shows the tables: {report}"
    );

    node.sh("iptables-legacy -t nat -A EMPTY -j RETURN");
    let (from_detect, stderr) = stale_warnings(&node);
    assert!(
        from_detect.iter().any(|w| w.contains("nat holds 1 rule")),
        "{from_detect:?}"
    );
    assert!(
        stderr.contains("stale") && stderr.contains("nat holds 1 rule"),
        "{stderr}"
    );
}

// Item 8: exact names for the host link.

#[test]
fn host_link_targets_are_classified_by_exact_name() {
    common::root_or_skip!();
    let node = Node::new("exactnames");
    for target in [
        "/usr/sbin/xtables-legacy-multi.dpkg-old",
        "/opt/iptables-legacy-foo",
        "/usr/sbin/iptables-nft-but-weird",
        "/usr/sbin/legacy",
    ] {
        node.set_host_link("iptables", target);
        let report = node.detect();
        // No hint, and no legacy table: nft.
        assert_eq!(mode_and_source(&report), ("nft", "rule-counts"), "{target}: {report}");
        let link = values(&report, "host-link", "etc/alternatives/iptables");
        assert!(link[0].contains(target) && link[0].contains("no hint"), "{report}");
        assert_eq!(node.version_mode("iptables"), "nft", "{target}");
    }
    for (target, mode) in [
        ("/usr/sbin/xtables-legacy-multi", "legacy"),
        ("/usr/sbin/iptables-legacy-restore", "legacy"),
        ("/usr/sbin/xtables-nft-multi", "nft"),
    ] {
        node.set_host_link("iptables", target);
        assert_eq!(mode_and_source(&node.detect()), (mode, "host-link"), "{target}");
    }
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-legacy");
    assert_eq!(node.version_mode("ip6tables"), "legacy");
}

// Item 9: kube-proxy's canary; kernels with one backend.

#[test]
fn kube_proxy_canary_is_a_hint_chain_in_both_backends() {
    common::root_or_skip!();
    let node = Node::new("canary");
    node.sh("iptables-nft -t mangle -N KUBE-PROXY-CANARY; for i in 1 2 3; do iptables-legacy -A INPUT -j ACCEPT; done");
    std::fs::remove_file(&node.lockfile).unwrap();
    let report = node.detect();
    assert_eq!(mode_and_source(&report), ("nft", "hint-chain"), "{report}");
    assert!(report["reason"].as_str().unwrap().contains("KUBE-PROXY-CANARY"));
    assert_eq!(node.version_mode("iptables"), "nft");

    let node = Node::new("canary6");
    node.sh(
        "ip6tables-legacy -t mangle -N KUBE-PROXY-CANARY; for i in 1 2 3; do iptables-nft -A INPUT -j ACCEPT; done",
    );
    assert_eq!(mode_and_source(&node.detect()), ("legacy", "hint-chain"));
    assert_eq!(node.version_mode("ip6tables"), "legacy");
}

#[test]
fn kernel_without_nf_tables_is_never_picked_by_default() {
    common::root_or_skip!();
    // An old COS-like kernel: nf_tables neither loaded, built in nor
    // installed as a module.
    let node = Node::new("nonft");
    let view = || View::Modular {
        proc_modules: "ip_tables 32768 0 - Live 0x0000000000000000\n",
        x_tables: true,
    };
    host_module_list(&node, "modules.builtin", &["kernel/net/netfilter/x_tables.ko"]);
    host_module_list(
        &node,
        "modules.dep",
        &["kernel/net/ipv4/netfilter/ip_tables.ko.zst: kernel/net/netfilter/x_tables.ko.zst"],
    );
    let report = detect_in_view(&node, view(), &[]);
    assert_eq!(mode_and_source(&report), ("legacy", "default"), "{report}");
    let presence = values(&report, "backend-presence", "nf_tables");
    assert!(presence[0].starts_with("not in this kernel"), "{report}");
    // Only the fake /proc's untrusted table lists are flagged.
    assert!(
        warnings(&report)
            .iter()
            .all(|w| w.contains("only by default") && w.contains("unknown")),
        "{report}"
    );

    let out = run_in_view(&node, view(), node.bin.join("iptables").to_str().unwrap(), &["-V"], &[]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(legacy)"),
        "a call too: {out:?}"
    );

    // The override is obeyed, with a warning.
    let report = detect_in_view(&node, view(), &[("IPTABLES_MODE", "nft")]);
    assert_eq!(mode_and_source(&report), ("nft", "override"), "{report}");
    assert!(warnings(&report).iter().any(|w| w.contains("lacks")), "{report}");
    let out = run_in_view(
        &node,
        view(),
        node.bin.join("iptables").to_str().unwrap(),
        &["-V"],
        &[("IPTABLES_MODE", "nft"), ("IPTABLES_WRAPPER_LOG", "warn")],
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("(nf_tables)"), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("lacks"), "{out:?}");

    // A module to load is not a lacking backend: the default stays nft.
    host_module_list(&node, "modules.dep", &["kernel/net/netfilter/nf_tables.ko.zst:"]);
    let report = detect_in_view(&node, view(), &[]);
    assert_eq!(mode_and_source(&report), ("nft", "default"), "{report}");
    assert!(values(&report, "backend-presence", "nf_tables")[0].starts_with("not loaded"));
}

#[test]
fn table_lists_hidden_by_a_mount_are_no_proof_of_a_kernel_without_legacy() {
    common::root_or_skip!();
    // A kernel built without legacy x_tables (6.17+) has no table lists in
    // its procfs. A fake /proc without them shows the same, but is not the
    // kernel's word: legacy is unknown, never "not in this kernel". (A
    // kernel that really lacks x_tables cannot be made here: this machine's
    // has it built in.)
    let node = Node::new("nolegacy");
    let view = || View::Modular {
        proc_modules: "nf_tables 364544 0 - Live 0x0000000000000000\n",
        x_tables: false,
    };
    host_module_list(&node, "modules.dep", &["kernel/net/netfilter/nf_tables.ko.zst:"]);
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    let report = detect_in_view(&node, view(), &[]);
    assert_eq!(mode_and_source(&report), ("legacy", "host-link"), "{report}");
    for module in ["ip_tables", "ip6_tables"] {
        let presence = values(&report, "backend-presence", module);
        assert!(
            presence[0].starts_with("unknown") && presence[0].contains("not the kernel's procfs"),
            "{report}"
        );
    }
    assert!(!warnings(&report).iter().any(|w| w.contains("lacks")), "{report}");
}

/// Whether the namespace's real procfs lists any legacy table.
fn legacy_tables_exist() -> bool {
    !(common::legacy_tables("ip_tables_names").trim().is_empty()
        && common::legacy_tables("ip6_tables_names").trim().is_empty())
}

#[test]
fn table_lists_that_are_not_the_kernels_own_are_not_trusted() {
    common::root_or_skip!();
    // Lists naming filter and nat, from a directory mounted over procfs, a
    // tmpfs at /proc, or another network namespace's real procfs: looking
    // the tables up would create them here. No call may, and legacy is
    // unknown.
    let node = Node::new("lyingproc");
    node.sh("for i in 1 2; do iptables-nft -A INPUT -j ACCEPT; done");
    // Another namespace whose legacy filter and nat tables exist.
    let mut other = Command::new("unshare")
        .args(["-n", "sh", "-c"])
        .arg("iptables-legacy -L -n >/dev/null && iptables-legacy -t nat -L -n >/dev/null && echo ready && exec sleep 60")
        .env("XTABLES_LOCKFILE", node.path("other.lock"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(other.stdout.as_mut().unwrap()), &mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");
    let other_pid = other.id().to_string();
    let env = [("OTHER_PID", other_pid.as_str())];
    for (name, view) in [
        ("a directory over /proc/thread-self/net", View::ListsMountedOverNet),
        ("a tmpfs at /proc", View::ListsInTmpfsProc),
        ("another namespace's procfs net", View::OtherNamespacesNet),
    ] {
        let report = detect_in_view(&node, view, &env);
        assert!(!legacy_tables_exist(), "{name}: detect created legacy tables: {report}");
        assert_eq!(mode_and_source(&report), ("nft", "default"), "{name}: {report}");
        for (source, location) in [
            ("hint-chain", "legacy mangle hint chains"),
            ("rule-counts", "rule counts"),
        ] {
            let found = values(&report, source, location);
            assert!(
                found.iter().all(|v| v.starts_with("unknown")) && !found.is_empty(),
                "{name}: {location} is unknown: {report}"
            );
        }
        assert!(
            warnings(&report).iter().any(|w| w.contains("unknown")),
            "{name}: {report}"
        );
        let out = run_in_view(&node, view, node.bin.join("iptables").to_str().unwrap(), &["-V"], &env);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("(nf_tables)"),
            "{name}: {out:?}"
        );
        assert!(!legacy_tables_exist(), "{name}: a call created legacy tables");
    }
    other.kill().unwrap();
    other.wait().unwrap();
}

#[test]
fn table_lists_are_checked_where_openat2_is_refused() {
    common::root_or_skip!();
    // Seccomp profiles older than openat2 (Linux 5.6) refuse it: the lists
    // are then opened with openat, and their own fstatfs must say procfs.
    let node = Node::new("noopenat2");
    node.sh("iptables-legacy -A INPUT -j ACCEPT; iptables-legacy -A INPUT -j ACCEPT");
    let refused = |view| {
        let mut command = view_command(&node, view, WRAPPER, &["detect", "--json"], &[]);
        refuse_syscall(&mut command, libc::SYS_openat2, &[]);
        parse_detect(&command.output_within_limit().unwrap())
    };
    // The kernel's own lists are read.
    let report = refused(View::AsIs);
    assert_eq!(report["rule_counts"]["legacy"]["exact"], 2, "{report}");
    // A directory mounted over them is not.
    let before = common::legacy_tables("ip_tables_names");
    let report = refused(View::ListsMountedOverNet);
    assert_eq!(
        common::legacy_tables("ip_tables_names"),
        before,
        "no table created: {report}"
    );
    assert!(
        values(&report, "rule-counts", "rule counts")[0].contains("not on procfs"),
        "{report}"
    );
}

#[test]
fn a_procfs_showing_only_processes_is_not_a_kernel_without_modules() {
    common::root_or_skip!();
    // systemd's ProcSubset=pid: no /proc/modules, as on a kernel without
    // module support, where asking nf_tables loads nothing. Here it says
    // nothing of the kind, so with neither sysfs nor module lists nf_tables
    // is unknown, and not asked (asking could load it).
    let node = Node::new("subsetpid");
    node.sh("iptables-nft -t mangle -N KUBE-IPTABLES-HINT; iptables-legacy -A INPUT -j ACCEPT");
    let trace = node.path("socket-trace");
    let out = run_in_view(
        &node,
        View::SubsetPid,
        "strace",
        &[
            "-f",
            "-qq",
            "-e",
            "trace=socket",
            "-o",
            trace.to_str().unwrap(),
            WRAPPER,
            "detect",
            "--json",
        ],
        &[],
    );
    let report = parse_detect(&out);
    let presence = values(&report, "backend-presence", "nf_tables");
    assert!(
        presence[0].starts_with("unknown") && presence[0].contains("subset=pid"),
        "{report}"
    );
    assert!(
        values(&report, "hint-chain", "nft")
            .iter()
            .all(|v| v.starts_with("unknown")),
        "nf_tables was not asked: {report}"
    );
    let sockets = std::fs::read_to_string(&trace).unwrap();
    assert!(!sockets.contains("AF_NETLINK"), "no netlink socket: {sockets}");
    // Such a procfs lists /proc/self/net's files; Linux 6.12 opens them,
    // 5.10 refuses (ENOENT), which says nothing of the legacy tables.
    let opened = run_in_view(&node, View::SubsetPid, "cat", &["/proc/self/net/ip_tables_names"], &[]);
    if opened.status.success() {
        assert!(sockets.contains("AF_INET"), "the trace saw the legacy reads: {sockets}");
    } else {
        assert!(sockets.is_empty(), "nothing asked: {sockets}");
        let presence = values(&report, "backend-presence", "ip_tables");
        assert!(
            presence[0].starts_with("unknown") && presence[0].contains("refuses to open"),
            "{report}"
        );
        assert_ne!(
            report["rule_counts"]["legacy"]["exact"], 0,
            "no count of none: {report}"
        );
    }
}

#[test]
fn a_backend_this_process_cannot_use_is_never_the_default() {
    common::root_or_skip!();
    // A seccomp filter refuses every netlink socket: the nft backend, run
    // by this process, would fail the same way. With 1,000 legacy rules the
    // call goes to legacy, and detect says why.
    let node = Node::new("seccompnl");
    let rules: String = (0..1000)
        .map(|i| format!("-A INPUT -s 10.0.{}.{} -j ACCEPT\n", i / 250, i % 250 + 1))
        .collect();
    std::fs::write(node.path("rules"), format!("*filter\n{rules}COMMIT\n")).unwrap();
    node.sh(&format!("iptables-legacy-restore < {}", node.path("rules").display()));
    let refuse_netlink = |command: &mut Command| {
        refuse_sockets(command, |call| call.domain == libc::AF_NETLINK);
    };
    let mut call = node.command("iptables");
    call.arg("-V");
    refuse_netlink(&mut call);
    let out = call.output_within_limit().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("(legacy)"), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");

    let mut detect = node.wrapper();
    detect.args(["detect", "--json"]);
    refuse_netlink(&mut detect);
    let report = parse_detect(&detect.output_within_limit().unwrap());
    assert_eq!(mode_and_source(&report), ("legacy", "default"), "{report}");
    let unusable = values(&report, "backend-presence", "nft from this process");
    assert!(unusable.len() == 1 && unusable[0].contains("seccomp"), "{report}");

    // The override is obeyed, with a warning.
    let mut call = node.command("iptables");
    call.env("IPTABLES_MODE", "nft")
        .env("IPTABLES_WRAPPER_LOG", "warn")
        .arg("-V");
    refuse_netlink(&mut call);
    let out = call.output_within_limit().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("this process cannot use it"),
        "{out:?}"
    );

    // Raw IP sockets refused to this process, which holds the capabilities
    // they need, and to the legacy save tool alike: the host link's legacy
    // is obeyed, with a warning.
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    let mut call = node.command("iptables");
    call.env("IPTABLES_WRAPPER_LOG", "warn").arg("-V");
    refuse_sockets(&mut call, |call| {
        call.domain == libc::AF_INET && call.protocol == libc::IPPROTO_RAW
    });
    let out = call.output_within_limit().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("uses legacy") && stderr.contains("this process cannot use it"),
        "{out:?}"
    );
}
