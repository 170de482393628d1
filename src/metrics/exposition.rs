//! Writing a [`Snapshot`] as text exposition: one small function per
//! metric family in [`FAMILIES`], in the order written, each its gauge's
//! name, help and samples. A new metric is one function and one line there,
//! and its description in `docs/metrics.md`.

use super::{Count, Snapshot, StaleState, TableState};
use crate::decision::{self, Source};
use crate::kernel::IPTABLES_TABLES;
use std::fmt::{Display, Write};
use std::time::UNIX_EPOCH;

/// The prefix of every metric name.
const PREFIX: &str = "iptables_wrapper_";

/// The three values of every `state` label, in the order they are written.
const STATES: [&str; 3] = ["known", "absent", "unknown"];

/// The exposition being written: one metric family at a time, its HELP and
/// TYPE lines written with its first sample. A family with no sample (a
/// count that is unknown) is left out whole: some parsers take HELP and TYPE
/// lines without a sample as the start of the next family.
struct Exposition {
    text: String,
    /// The family being written (without the prefix), its help, and whether
    /// its HELP and TYPE lines are written yet.
    family: (&'static str, &'static str, bool),
}

impl Exposition {
    /// Starts the gauge `name` (without the prefix).
    fn gauge(&mut self, name: &'static str, help: &'static str) {
        self.family = (name, help, false);
    }

    /// One sample of the current gauge.
    fn sample(&mut self, labels: &[(&str, &'static str)], value: impl Display) {
        let (name, help, described) = &mut self.family;
        if !*described {
            let _ = writeln!(self.text, "# HELP {PREFIX}{name} {help}");
            let _ = writeln!(self.text, "# TYPE {PREFIX}{name} gauge");
            *described = true;
        }
        let _ = write!(self.text, "{PREFIX}{name}");
        for (index, (label, label_value)) in labels.iter().enumerate() {
            let separator = if index == 0 { '{' } else { ',' };
            let _ = write!(self.text, "{separator}{label}=\"{label_value}\"");
        }
        if !labels.is_empty() {
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }

    /// The three samples of a state gauge: 1 for `current`, 0 for the others.
    fn states(&mut self, labels: &[(&str, &'static str)], current: &str) {
        for state in STATES {
            let mut with_state = labels.to_vec();
            with_state.push(("state", state));
            self.sample(&with_state, u8::from(state == current));
        }
    }
}

/// Writes one metric family (or, for the per-table ones, a few) of a snapshot.
type MetricFamily = fn(&mut Exposition, &Snapshot);

/// Every metric family, in the order written.
const FAMILIES: &[MetricFamily] = &[
    host_backend_info,
    backend_runnable,
    rules,
    rules_state,
    mixed_state,
    stale_state,
    stale_per_table,
    stale_tables_left_alone,
    disagreeing_evidence,
    contradicting_evidence,
    warnings,
    stale_removal_interrupted,
    decision_duration_seconds,
    detect_duration_seconds,
    detect_timestamp_seconds,
];

/// The snapshot as text exposition, ending in `# EOF`.
pub(super) fn render(snapshot: &Snapshot) -> String {
    let mut out = Exposition {
        text: String::new(),
        family: ("", "", false),
    };
    for write_family in FAMILIES {
        write_family(&mut out, snapshot);
    }
    out.text.push_str("# EOF\n");
    out.text
}

fn host_backend_info(out: &mut Exposition, snapshot: &Snapshot) {
    out.gauge(
        "host_backend_info",
        "The backend the host's iptables calls go to, per family, and the source that decided (always 1).",
    );
    for state in &snapshot.families {
        out.sample(
            &[
                ("family", state.family.label()),
                ("backend", state.decision.mode.name()),
                ("decided_by", state.decision.decided_by.key()),
            ],
            1,
        );
    }
}

fn backend_runnable(out: &mut Exposition, snapshot: &Snapshot) {
    out.gauge(
        "backend_runnable",
        "1 when the chosen backend's program for the family's command is found, 0 when every call will fail (detect names the programs tried).",
    );
    for state in &snapshot.families {
        out.sample(
            &[
                ("family", state.family.label()),
                ("backend", state.decision.mode.name()),
            ],
            u8::from(state.runnable),
        );
    }
}

fn rules(out: &mut Exposition, snapshot: &Snapshot) {
    out.gauge(
        "rules",
        "Rules in the iptables tables of each backend, IPv4 and IPv6 together; no sample when unknown.",
    );
    for (mode, count) in snapshot.counts {
        if let Some(rules) = count.rules() {
            out.sample(&[("backend", mode.name())], rules);
        }
    }
}

fn rules_state(out: &mut Exposition, snapshot: &Snapshot) {
    out.gauge(
        "rules_state",
        "Whether each backend's rule count is known, absent (the kernel lacks the backend: 0 rules) or unknown (1 for the current state).",
    );
    for (mode, count) in snapshot.counts {
        out.states(&[("backend", mode.name())], count.state());
    }
}

fn mixed_state(out: &mut Exposition, snapshot: &Snapshot) {
    let mixed = match snapshot.counts.map(|(_, count)| count) {
        [Count::Absent, _] | [_, Count::Absent] => Some(false),
        [Count::Known(legacy), Count::Known(nft)] => {
            Some(legacy >= decision::MIXED_STATE_RULES && nft >= decision::MIXED_STATE_RULES)
        }
        _ => None,
    };
    out.gauge(
        "mixed_state",
        "1 when both backends hold at least 10 rules (the mixed state), 0 when not; no sample when a count is unknown.",
    );
    if let Some(mixed) = mixed {
        out.sample(&[], u8::from(mixed));
    }
}

fn stale_state(out: &mut Exposition, snapshot: &Snapshot) {
    out.gauge(
        "stale_state",
        "Whether what the backend the host does not use holds in each family is known, absent (the kernel lacks that backend) or unknown (1 for the current state).",
    );
    for state in &snapshot.families {
        out.states(
            &[
                ("family", state.family.label()),
                ("backend", state.decision.mode.other().name()),
            ],
            state.stale.state(),
        );
    }
}

/// `stale_rules`, `stale_non_accept_policies`, `stale_user_chains`: one
/// sample per family and iptables table, read alike.
fn stale_per_table(out: &mut Exposition, snapshot: &Snapshot) {
    type TableField = fn(&TableState) -> u64;
    let per_table: [(&'static str, &'static str, TableField); 3] = [
        (
            "stale_rules",
            "Rules in the backend the host does not use, per family and table; no sample when unknown.",
            |table| table.rules,
        ),
        (
            "stale_non_accept_policies",
            "Built-in chains whose policy is not ACCEPT in the backend the host does not use, per family and table; no sample when unknown.",
            |table| table.non_accept_policies,
        ),
        (
            "stale_user_chains",
            "User chains in the backend the host does not use, per family and table; no sample when unknown.",
            |table| table.user_chains,
        ),
    ];
    for (name, help, field) in per_table {
        out.gauge(name, help);
        for state in &snapshot.families {
            let tables = match &state.stale {
                StaleState::Known { tables, .. } => *tables,
                StaleState::Absent => Default::default(),
                StaleState::Unknown => continue,
            };
            for (table, held) in IPTABLES_TABLES.iter().zip(&tables) {
                out.sample(
                    &[
                        ("family", state.family.label()),
                        ("backend", state.decision.mode.other().name()),
                        ("table", table),
                    ],
                    field(held),
                );
            }
        }
    }
}

fn stale_tables_left_alone(out: &mut Exposition, snapshot: &Snapshot) {
    out.gauge(
        "stale_tables_left_alone",
        "Tables named like iptables tables that hold state in the backend the host does not use but are not that backend's (iptables-wrapper stale leaves them); no sample when unknown.",
    );
    for state in &snapshot.families {
        let left_alone = match &state.stale {
            StaleState::Known { left_alone, .. } => *left_alone,
            StaleState::Absent => 0,
            StaleState::Unknown => continue,
        };
        out.sample(
            &[
                ("family", state.family.label()),
                ("backend", state.decision.mode.other().name()),
            ],
            left_alone,
        );
    }
}

fn disagreeing_evidence(out: &mut Exposition, snapshot: &Snapshot) {
    out.gauge(
        "disagreeing_evidence",
        "Pieces of evidence pointing to the other backend than the one chosen, per family and source read.",
    );
    for state in &snapshot.families {
        let decision = &state.decision;
        let mut sources: Vec<Source> = Vec::new();
        for evidence in &decision.evidence {
            if !sources.contains(&evidence.source) {
                sources.push(evidence.source);
            }
        }
        for source in sources {
            out.sample(
                &[("family", state.family.label()), ("source", source.key())],
                decision.disagreements().filter(|e| e.source == source).count(),
            );
        }
    }
}

fn contradicting_evidence(out: &mut Exposition, snapshot: &Snapshot) {
    out.gauge(
        "contradicting_evidence",
        "Pieces of evidence contradicting a decision by the override or the host link (another host link, a hint chain only in the other backend); stale --remove refuses such a decision.",
    );
    for state in &snapshot.families {
        out.sample(
            &[("family", state.family.label())],
            state.decision.contradictions().count(),
        );
    }
}

fn warnings(out: &mut Exposition, snapshot: &Snapshot) {
    out.gauge(
        "warnings",
        "Warnings detect gives per family (disagreements, the mixed state, a default resting on unknowns, a backend the kernel lacks); their words are in iptables-wrapper detect.",
    );
    for state in &snapshot.families {
        out.sample(&[("family", state.family.label())], state.decision.warnings().len());
    }
}

fn stale_removal_interrupted(out: &mut Exposition, snapshot: &Snapshot) {
    out.gauge(
        "stale_removal_interrupted",
        "Removals of stale tables (stale --remove) that died before their report and left the record of a removal in progress; what each emptied and its undo are in iptables-wrapper stale.",
    );
    out.sample(&[], snapshot.interrupted_removals);
}

fn decision_duration_seconds(out: &mut Exposition, snapshot: &Snapshot) {
    out.gauge(
        "decision_duration_seconds",
        "How long each family's decision took, reading every source.",
    );
    for state in &snapshot.families {
        if let Some(took) = state.decision.took {
            out.sample(&[("family", state.family.label())], took.as_secs_f64());
        }
    }
}

fn detect_duration_seconds(out: &mut Exposition, snapshot: &Snapshot) {
    out.gauge(
        "detect_duration_seconds",
        "How long reading everything exported took (both decisions and the stale tables).",
    );
    out.sample(&[], snapshot.took.as_secs_f64());
}

fn detect_timestamp_seconds(out: &mut Exposition, snapshot: &Snapshot) {
    out.gauge(
        "detect_timestamp_seconds",
        "When this reading started, in seconds since the Unix epoch.",
    );
    let at = snapshot.at.duration_since(UNIX_EPOCH).unwrap_or_default();
    out.sample(&[], at.as_secs_f64());
}

#[cfg(test)]
mod tests {
    use super::render;
    use crate::decision::{Decision, Source};
    use crate::family::Family;
    use crate::metrics::{Count, FamilyState, Snapshot, StaleState};
    use crate::mode::Mode;
    use std::time::{Duration, UNIX_EPOCH};

    fn unreadable() -> Snapshot {
        let decision = |command| Decision {
            command,
            mode: Mode::Nft,
            decided_by: Source::Default,
            reason: "no evidence for either backend: nft is the default".into(),
            evidence: Vec::new(),
            rule_counts: None,
            lacking: Vec::new(),
            took: None,
        };
        Snapshot {
            families: vec![
                FamilyState {
                    family: Family::Ipv4,
                    decision: decision("iptables"),
                    stale: StaleState::Unknown,
                    runnable: true,
                },
                FamilyState {
                    family: Family::Ipv6,
                    decision: decision("ip6tables"),
                    stale: StaleState::Unknown,
                    runnable: true,
                },
            ],
            counts: [(Mode::Legacy, Count::Unknown), (Mode::Nft, Count::Known(3))],
            interrupted_removals: 0,
            took: Duration::from_millis(5),
            at: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        }
    }

    #[test]
    fn an_unknown_count_has_no_sample_and_says_unknown() {
        let text = render(&unreadable());
        assert!(!text.contains("iptables_wrapper_rules{backend=\"legacy\"}"), "{text}");
        assert!(text.contains("iptables_wrapper_rules{backend=\"nft\"} 3\n"), "{text}");
        assert!(
            text.contains("iptables_wrapper_rules_state{backend=\"legacy\",state=\"unknown\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("iptables_wrapper_rules_state{backend=\"legacy\",state=\"known\"} 0\n"),
            "{text}"
        );
        // Whether both backends are busy is unknown too: no sample, and
        // no HELP or TYPE line without one.
        assert!(!text.contains("iptables_wrapper_mixed_state"), "{text}");
        // Unread stale tables have no samples, only their state.
        assert!(!text.contains("iptables_wrapper_stale_rules{"), "{text}");
        assert!(
            text.contains("iptables_wrapper_stale_state{family=\"ipv6\",backend=\"legacy\",state=\"unknown\"} 1\n"),
            "{text}"
        );
        assert!(
            text.ends_with("iptables_wrapper_detect_timestamp_seconds 1700000000\n# EOF\n"),
            "{text}"
        );
    }

    #[test]
    fn an_absent_backend_holds_no_rules_and_nothing_is_mixed() {
        let mut snapshot = unreadable();
        snapshot.counts = [(Mode::Legacy, Count::Absent), (Mode::Nft, Count::Unknown)];
        snapshot.families[0].stale = StaleState::Absent;
        let text = render(&snapshot);
        assert!(
            text.contains("iptables_wrapper_rules{backend=\"legacy\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("iptables_wrapper_rules_state{backend=\"legacy\",state=\"absent\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("\niptables_wrapper_mixed_state 0\n"), "{text}");
        assert!(
            text.contains("iptables_wrapper_stale_rules{family=\"ipv4\",backend=\"legacy\",table=\"filter\"} 0\n"),
            "{text}"
        );
        assert!(!text.contains("iptables_wrapper_stale_rules{family=\"ipv6\""), "{text}");
    }
}
