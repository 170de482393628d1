//! The decision over a recorded host, without root: each row of
//! docs/how-it-decides.md ("How it decides") and each warning, in process.
//! The same rows run against the real kernels in tests/decision.rs and
//! tests/kernel_evidence.rs; these say what the logic makes of each
//! reading, those that the readings are what the kernel holds.

use super::host::{LegacyTable, LegacyTables};
use super::host_link::Candidates;
use super::lock::LockFile;
use super::recorded::{link, settings_with, Recorded};
use super::{decide_on, Decision, Depth, Reads, Source};
use crate::command::WrappedCommand;
use crate::family::Family;
use crate::kernel::modules::Presence;
use crate::kernel::{HintChain, NftLookups, RuleBounds};
use crate::mode::Mode;
use crate::settings::Origin;
use crate::xtables_lock::{LockFileState, LockObservation};
use std::path::Path;

fn decide(host: &mut Recorded, depth: Depth) -> Decision {
    let command = WrappedCommand::from_name("iptables").expect("a known name");
    decide_on(&command, depth, host).expect("valid settings")
}

/// Decides at each depth; the mode and source must not depend on it.
fn decided(host: impl Fn() -> Recorded) -> (Mode, Source) {
    let outcomes: Vec<(Mode, Source)> = [Depth::Decide, Depth::DecideAndWarn, Depth::Everything]
        .into_iter()
        .map(|depth| {
            let decision = decide(&mut host(), depth);
            (decision.mode, decision.decided_by)
        })
        .collect();
    assert!(outcomes.windows(2).all(|pair| pair[0] == pair[1]), "{outcomes:?}");
    outcomes[0]
}

fn hint(family: Family) -> HintChain {
    HintChain {
        family,
        chain: "KUBE-IPTABLES-HINT",
    }
}

fn nft_with(hints: Vec<HintChain>, kube_proxy: Option<Vec<Family>>) -> Result<NftLookups, String> {
    Ok(NftLookups {
        hint_chains: hints,
        kube_proxy_tables: kube_proxy,
    })
}

fn counts(legacy: u64, nft: u64) -> Result<(RuleBounds, RuleBounds), String> {
    Ok((RuleBounds::exact(legacy), RuleBounds::exact(nft)))
}

/// A host whose legacy tables exist, so that the counts are read.
fn with_legacy_tables() -> Recorded {
    Recorded {
        legacy_has_no_tables: false,
        ..Recorded::default()
    }
}

#[test]
fn the_override_decides_from_the_environment_or_a_file_and_asks_no_kernel() {
    for (value, mode) in [("nft", Mode::Nft), ("legacy", Mode::Legacy), ("NF_TABLES", Mode::Nft)] {
        let host = || Recorded {
            settings: settings_with(Some(value), Origin::Environment),
            legacy_hints: Ok(vec![hint(Family::Ipv4)]),
            ..Recorded::default()
        };
        assert_eq!(decided(host), (mode, Source::Override));
        let mut quiet = host();
        let decision = decide(&mut quiet, Depth::Decide);
        assert!(quiet.kernel_reads.is_empty(), "{:?}", quiet.kernel_reads);
        assert_eq!(
            decision.reason.to_string(),
            format!("overridden by environment variable IPTABLES_MODE={value}")
        );
    }
    let mut pinned = Recorded {
        settings: settings_with(
            Some("legacy"),
            Origin::File {
                path: Path::new("/etc/iptables-wrapper/IPTABLES_MODE").into(),
                line: 1,
            },
        ),
        ..Recorded::default()
    };
    let decision = decide(&mut pinned, Depth::Decide);
    assert_eq!(
        decision.reason.to_string(),
        "pinned by the settings file /etc/iptables-wrapper/IPTABLES_MODE line 1: legacy"
    );
}

#[test]
fn auto_leaves_the_decision_to_the_sources_after_it() {
    let host = || Recorded {
        settings: settings_with(Some("auto"), Origin::Environment),
        ..Recorded::default()
    };
    assert_eq!(decided(host), (Mode::Nft, Source::RuleCounts));
}

#[test]
fn a_host_link_naming_a_backend_decides_without_the_kernel() {
    for (target, mode) in [
        ("/usr/sbin/iptables-legacy", Mode::Legacy),
        ("/usr/sbin/iptables-nft", Mode::Nft),
    ] {
        let host = || {
            Recorded {
                nft_lookups: nft_with(vec![hint(Family::Ipv4)], Some(Vec::new())),
                ..Recorded::default()
            }
            .found::<Candidates>(link("/host/etc/alternatives/iptables", target, Ok(mode)))
        };
        assert_eq!(decided(host), (mode, Source::HostLink));
        let mut quiet = host();
        let decision = decide(&mut quiet, Depth::Decide);
        assert!(quiet.kernel_reads.is_empty(), "{:?}", quiet.kernel_reads);
        assert_eq!(
            decision.reason.to_string(),
            format!("host link /host/etc/alternatives/iptables -> {target}")
        );
    }
}

#[test]
fn the_sources_that_read_no_kernel_ask_none_when_they_decide() {
    let stated = [
        Recorded {
            settings: settings_with(Some("nft"), Origin::Environment),
            ..Recorded::default()
        },
        Recorded::default().found::<Candidates>(link(
            "/host/usr/sbin/iptables",
            "xtables-legacy-multi",
            Ok(Mode::Legacy),
        )),
    ];
    for mut host in stated {
        let decision = decide(&mut host, Depth::Decide);
        assert_ne!(decision.decided_by.facts().reads, Reads::Kernel);
        assert!(host.kernel_reads.is_empty(), "{:?}", host.kernel_reads);
    }
}

#[test]
fn a_link_that_cannot_tell_is_no_hint_and_no_root_is_absent() {
    let no_hint = || {
        Recorded::default().found::<Candidates>(link(
            "/host/etc/alternatives/iptables",
            "/usr/sbin/xtables-legacy-multi.dpkg-old",
            Err("not a backend's file name".into()),
        ))
    };
    assert_eq!(decided(no_hint), (Mode::Nft, Source::RuleCounts));
    let decision = decide(&mut no_hint(), Depth::Everything);
    let shown = &decision
        .evidence
        .iter()
        .find(|e| e.source == Source::HostLink)
        .unwrap()
        .finding;
    assert!(shown.to_string().contains("cannot tell (no hint)"), "{shown}");
    let decision = decide(&mut Recorded::default(), Depth::Everything);
    let shown = &decision
        .evidence
        .iter()
        .find(|e| e.source == Source::HostLink)
        .unwrap()
        .finding;
    assert_eq!(shown.state(), "absent");
}

#[test]
fn a_hint_chain_in_nft_decides_nft_then_one_in_legacy_decides_legacy() {
    let in_both = || Recorded {
        nft_lookups: nft_with(vec![hint(Family::Ipv6)], Some(Vec::new())),
        legacy_hints: Ok(vec![hint(Family::Ipv4)]),
        ..with_legacy_tables()
    };
    assert_eq!(decided(in_both), (Mode::Nft, Source::HintChain));
    let in_legacy = || Recorded {
        legacy_hints: Ok(vec![hint(Family::Ipv4)]),
        ..with_legacy_tables()
    };
    assert_eq!(decided(in_legacy), (Mode::Legacy, Source::HintChain));
    assert_eq!(
        decide(&mut in_legacy(), Depth::Decide).reason.to_string(),
        "hint chain KUBE-IPTABLES-HINT found in legacy (ipv4), not in nft"
    );
    let nft_unread = || Recorded {
        nft_lookups: Err("netlink refused".into()),
        ..in_legacy()
    };
    assert_eq!(
        decide(&mut nft_unread(), Depth::Decide).reason.to_string(),
        "hint chain KUBE-IPTABLES-HINT found in legacy (ipv4), nft's could not be read"
    );
    // A wrapped call stops at the hint: no count.
    let mut quiet = in_legacy();
    decide(&mut quiet, Depth::Decide);
    assert!(!quiet.kernel_reads.contains(&"rule counts"), "{:?}", quiet.kernel_reads);
}

#[test]
fn a_kube_proxy_table_decides_nft_only_where_legacy_holds_no_rules() {
    let table = || Recorded {
        nft_lookups: nft_with(Vec::new(), Some(vec![Family::Ipv4])),
        counts: counts(30, 0),
        ..with_legacy_tables()
    };
    assert_eq!(decided(table), (Mode::Nft, Source::KubeProxyTable));
    let legacy_busy = || Recorded {
        legacy_may_hold_rules: Ok(true),
        ..table()
    };
    assert_eq!(decided(legacy_busy), (Mode::Legacy, Source::RuleCounts));
    let legacy_unread = || Recorded {
        legacy_may_hold_rules: Err("GET_INFO refused".into()),
        ..table()
    };
    assert_eq!(decided(legacy_unread), (Mode::Nft, Source::KubeProxyTable));
    assert_eq!(
        decide(&mut legacy_unread(), Depth::Decide).reason.to_string(),
        "kube-proxy's nftables table found (ipv4), legacy cannot be read"
    );
    // Tables that cannot be asked are unknown, never absent.
    let unasked = Recorded {
        nft_lookups: nft_with(Vec::new(), None),
        ..with_legacy_tables()
    };
    let decision = decide(&mut { unasked }, Depth::Everything);
    let table = decision
        .evidence
        .iter()
        .find(|e| e.source == Source::KubeProxyTable)
        .unwrap();
    assert!(table.finding.is_unknown());
}

#[test]
fn no_legacy_table_decides_nft_without_counting() {
    let mut quiet = Recorded::default();
    let decision = decide(&mut quiet, Depth::Decide);
    assert_eq!((decision.mode, decision.decided_by), (Mode::Nft, Source::RuleCounts));
    assert!(!quiet.kernel_reads.contains(&"rule counts"), "{:?}", quiet.kernel_reads);
    // Only where nf_tables is known to be there.
    let unsure = || Recorded {
        nf_tables: Presence::Unknown("modules.builtin unreadable".into()),
        ..Recorded::default()
    };
    assert_eq!(decided(unsure), (Mode::Nft, Source::Default));
}

#[test]
fn the_counts_decide_strictly_and_a_tie_decides_nothing() {
    let more_legacy = || Recorded {
        counts: counts(5, 2),
        ..with_legacy_tables()
    };
    assert_eq!(decided(more_legacy), (Mode::Legacy, Source::RuleCounts));
    assert_eq!(
        decide(&mut more_legacy(), Depth::Decide).reason.to_string(),
        "legacy holds more rules (5) than nft (2)"
    );
    let more_nft = || Recorded {
        counts: counts(2, 5),
        ..with_legacy_tables()
    };
    assert_eq!(decided(more_nft), (Mode::Nft, Source::RuleCounts));
    let tie = || Recorded {
        counts: counts(3, 3),
        ..with_legacy_tables()
    };
    assert_eq!(decided(tie), (Mode::Nft, Source::Default));
    assert_eq!(
        decide(&mut tie(), Depth::Decide).reason.to_string(),
        "the rule counts tie (legacy 3, nft 3) and nothing else decides: nft is the default"
    );
}

fn legacy_filter(holds: Option<&str>) -> LegacyTables {
    LegacyTables::Opened {
        listed: vec!["filter".into()],
        tables: vec![LegacyTable {
            name: "filter".into(),
            empty: holds.is_none(),
            rule_upper_bound: 0,
            walked: Some(Ok(holds.map(str::to_string))),
        }],
    }
}

#[test]
fn the_lock_file_breaks_a_tie_only_with_legacy_traces() {
    let lock = |observed| LockFileState {
        path: "/run/xtables.lock".into(),
        observed,
    };
    let held_tie = |traces: LegacyTables| {
        move || {
            Recorded {
                counts: counts(0, 0),
                legacy_tables: traces.clone(),
                ..with_legacy_tables()
            }
            .found::<LockFile>(lock(LockObservation::Held { mode: 0o600 }))
        }
    };
    assert_eq!(
        decided(held_tie(legacy_filter(Some(
            "filter holds 0 rules, policy FORWARD DROP"
        )))),
        (Mode::Legacy, Source::XtablesLock)
    );
    // Empty tables, as a read-only `iptables-legacy -L` leaves them: none.
    assert_eq!(decided(held_tie(legacy_filter(None))), (Mode::Nft, Source::Default));
    // Unknown counts are no tie to break.
    let unknown_counts = || Recorded {
        counts: Err("GET_INFO refused".into()),
        ..held_tie(legacy_filter(Some("filter holds 1 rule")))()
    };
    assert_eq!(decided(unknown_counts), (Mode::Nft, Source::Default));
    // A lock file kubelet made (0644) is no hint.
    let other = || {
        held_tie(legacy_filter(Some("filter holds 1 rule")))()
            .found::<LockFile>(lock(LockObservation::Other { mode: 0o644 }))
    };
    assert_eq!(decided(other), (Mode::Nft, Source::Default));
}

#[test]
fn the_default_is_legacy_only_where_nft_is_lacking_and_legacy_is_not() {
    let nft_missing = || Recorded {
        nft_lookups: Err("nf_tables is not in this kernel".into()),
        nf_tables: Presence::Missing("no module".into()),
        ..with_legacy_tables()
    };
    assert_eq!(decided(nft_missing), (Mode::Legacy, Source::Default));
    let both_missing = || Recorded {
        x_tables: Presence::Missing("no module".into()),
        ..nft_missing()
    };
    assert_eq!(decided(both_missing), (Mode::Nft, Source::Default));
    let nft_refused = || Recorded {
        unusable: [Some("seccomp refuses netlink".into()), None],
        counts: counts(0, 0),
        ..with_legacy_tables()
    };
    assert_eq!(decided(nft_refused), (Mode::Legacy, Source::Default));
}

#[test]
fn warnings_name_disagreement_and_contradiction() {
    let mut host = Recorded {
        legacy_hints: Ok(vec![hint(Family::Ipv4)]),
        ..with_legacy_tables()
    }
    .found::<Candidates>(link(
        "/host/etc/alternatives/iptables",
        "/usr/sbin/iptables-nft",
        Ok(Mode::Nft),
    ));
    let decision = decide(&mut host, Depth::Everything);
    assert_eq!(
        decision.warnings(),
        ["iptables uses nft (host link /host/etc/alternatives/iptables -> /usr/sbin/iptables-nft); contradicting evidence for legacy: legacy ipv4 mangle chain KUBE-IPTABLES-HINT: present (`iptables-wrapper stale --remove` refuses this decision)"]
    );
    // Decided by a hint chain, more rules elsewhere only disagree.
    let mut host = Recorded {
        nft_lookups: nft_with(vec![hint(Family::Ipv4)], Some(Vec::new())),
        counts: counts(40, 1),
        ..with_legacy_tables()
    };
    let decision = decide(&mut host, Depth::Everything);
    assert_eq!(decision.contradictions().count(), 0);
    assert!(decision.warnings()[0].contains("disagreeing evidence for legacy: legacy rules (ipv4 + ipv6): 40"));
}

#[test]
fn a_hint_chain_alone_against_rules_elsewhere_is_called_a_stray() {
    let mut host = Recorded {
        nft_lookups: nft_with(vec![hint(Family::Ipv4)], Some(Vec::new())),
        counts: counts(12, 0),
        ..with_legacy_tables()
    };
    let decision = decide(&mut host, Depth::Everything);
    assert!(decision
        .warnings()
        .iter()
        .any(|w| w.ends_with("but nft holds no rules while legacy holds 12: the hint chain may be a stray one")));
}

#[test]
fn a_mixed_state_warns_only_when_the_counts_decided() {
    let mixed = || Recorded {
        counts: counts(20, 11),
        ..with_legacy_tables()
    };
    let decision = decide(&mut mixed(), Depth::Everything);
    assert_eq!(decision.decided_by, Source::RuleCounts);
    assert!(decision
        .warnings()
        .iter()
        .any(|w| w.starts_with("both backends hold many rules")));
    let mut linked = mixed().found::<Candidates>(link("/host/usr/sbin/iptables", "iptables-legacy", Ok(Mode::Legacy)));
    let decision = decide(&mut linked, Depth::Everything);
    assert!(decision.is_mixed());
    assert!(!decision.warnings().iter().any(|w| w.starts_with("both backends")));
}

#[test]
fn a_default_resting_on_unknowns_names_them() {
    let mut host = Recorded {
        counts: Err("GET_INFO refused".into()),
        ..with_legacy_tables()
    };
    let decision = decide(&mut host, Depth::DecideAndWarn);
    assert_eq!(decision.decided_by, Source::Default);
    let warnings = decision.warnings();
    assert!(
        warnings[0]
            .starts_with("iptables uses nft only by default, and part of the kernel's state is unknown (rule counts)"),
        "{warnings:?}"
    );
}

#[test]
fn an_override_picking_a_lacking_backend_is_obeyed_with_a_warning() {
    let mut host = Recorded {
        settings: settings_with(Some("legacy"), Origin::Environment),
        x_tables: Presence::Missing("CONFIG_IP_NF_IPTABLES unset".into()),
        ..Recorded::default()
    };
    let decision = decide(&mut host, Depth::DecideAndWarn);
    assert_eq!(decision.mode, Mode::Legacy);
    assert_eq!(
        decision.warnings(),
        ["iptables uses legacy (overridden by environment variable IPTABLES_MODE=legacy), but the running kernel lacks it (ip_tables: CONFIG_IP_NF_IPTABLES unset): the backend's calls will likely fail"]
    );
    // A call whose warnings nobody sees does not look.
    let mut quiet = Recorded {
        x_tables: Presence::Missing("CONFIG_IP_NF_IPTABLES unset".into()),
        ..Recorded {
            settings: settings_with(Some("legacy"), Origin::Environment),
            ..Recorded::default()
        }
    };
    assert!(decide(&mut quiet, Depth::Decide).lacking.is_empty());
}

#[test]
fn stale_legacy_tables_under_an_nft_link_warn_when_warnings_are_wanted() {
    let host = || {
        Recorded {
            legacy_tables: legacy_filter(Some("filter holds 3 rules")),
            ..Recorded::default()
        }
        .found::<Candidates>(link(
            "/host/etc/alternatives/iptables",
            "/usr/sbin/iptables-nft",
            Ok(Mode::Nft),
        ))
    };
    let decision = decide(&mut host(), Depth::DecideAndWarn);
    let warnings = decision.warnings();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("disagreeing evidence for legacy: legacy ipv4 tables: filter holds 3 rules (stale legacy rules may still apply;"));
    let mut quiet = host();
    assert!(decide(&mut quiet, Depth::Decide).warnings().is_empty());
    assert!(!quiet.kernel_reads.contains(&"legacy tables"));
    // Tables GET_INFO refuses exist all the same.
    let refused = || Recorded {
        legacy_tables: LegacyTables::Unopened {
            listed: vec!["filter".into(), "nat".into()],
            why: "Operation not permitted".into(),
        },
        ..host()
    };
    let warnings = decide(&mut refused(), Depth::DecideAndWarn).warnings();
    assert!(warnings[0].contains("filter, nat exist; whether they hold rules is unknown (Operation not permitted)"));
    // Empty tables are nothing stale.
    let empty = Recorded {
        legacy_tables: legacy_filter(None),
        ..host()
    };
    assert!(decide(&mut { empty }, Depth::DecideAndWarn).warnings().is_empty());
}
