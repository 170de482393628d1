//! `detect --format prometheus`: the host's state as Prometheus text
//! exposition (also valid OpenMetrics text), for node-exporter's textfile
//! collector or a scrape: per family the backend the host uses and the
//! source that decided, each backend's rule count and whether it is known,
//! what the backend the host does not use still holds per table, the
//! disagreeing evidence and warnings, and how long reading took. Each
//! metric and label is described in `docs/metrics.md`; names are stable.
//!
//! It decides what is exported, never what a call does: it runs only in
//! `detect`, reading as `detect` and `stale` read (both families' decisions
//! with every source, then [`stale::find`] of the other backend), so a
//! wrapped call pays nothing for it.
//!
//! Unknown stays unknown: a count that could not be read has no sample
//! (never 0, never NaN), and a state gauge says `state="unknown"` instead.
//! Every label value is a `&'static str` from a fixed set (families,
//! backends, tables, source keys, states), so no text from outside (a chain
//! name, an error message) reaches the exposition. What it cannot show: the
//! warnings' words (see `detect` or `detect --json`), and a backend that is
//! partly readable (the decision's counts read both backends or neither).

use crate::command::WrappedCommand;
use crate::decision::{self, Decision, Depth, Source};
use crate::family::Family;
use crate::kernel::modules::{self, Presence};
use crate::kernel::KernelReader;
use crate::kernel::IPTABLES_TABLES;
use crate::mode::Mode;
use crate::settings::InvalidSetting;
use crate::stale;
use std::fmt::{Display, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The prefix of every metric name.
const PREFIX: &str = "iptables_wrapper_";

/// The three values of every `state` label, in the order they are written.
const STATES: [&str; 3] = ["known", "absent", "unknown"];

/// What one backend's rule count is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Count {
    /// Read: this many rules.
    Known(u64),
    /// The running kernel does not have the backend now (not loaded, or not
    /// in it at all): it holds no rule.
    Absent,
    /// Could not be read: no figure at all.
    Unknown,
}

impl Count {
    fn state(self) -> &'static str {
        match self {
            Count::Known(_) => "known",
            Count::Absent => "absent",
            Count::Unknown => "unknown",
        }
    }

    /// The figure to export: none when unknown.
    fn rules(self) -> Option<u64> {
        match self {
            Count::Known(rules) => Some(rules),
            Count::Absent => Some(0),
            Count::Unknown => None,
        }
    }
}

/// What one stale table holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TableState {
    rules: u64,
    non_accept_policies: u64,
    user_chains: u64,
}

/// What the backend a family's host does not use still holds.
#[derive(Clone, Debug, PartialEq, Eq)]
enum StaleState {
    /// Read: per iptables table (in [`IPTABLES_TABLES`] order), and how many
    /// tables holding state are not that backend's to call stale.
    Known {
        tables: [TableState; IPTABLES_TABLES.len()],
        left_alone: u64,
    },
    /// The running kernel does not have that backend now: nothing in it.
    Absent,
    /// Could not be read.
    Unknown,
}

impl StaleState {
    fn state(&self) -> &'static str {
        match self {
            StaleState::Known { .. } => "known",
            StaleState::Absent => "absent",
            StaleState::Unknown => "unknown",
        }
    }
}

/// One family: its decision, and what the other backend holds.
#[derive(Clone, Debug)]
struct FamilyState {
    family: Family,
    decision: Decision,
    stale: StaleState,
}

/// Everything exported, as read.
#[derive(Clone, Debug)]
struct Snapshot {
    families: Vec<FamilyState>,
    /// Each backend's rule count, legacy first: IPv4 and IPv6 together, as
    /// the IPv4 decision counted them (each family's decision counts both).
    counts: [(Mode, Count); 2],
    /// Reading everything, both decisions and the stale tables.
    took: Duration,
    /// When the reading started.
    at: SystemTime,
}

/// Reads both families' state and renders it. Fails only on invalid
/// settings (as `detect` does).
pub fn exposition() -> Result<String, InvalidSetting> {
    Ok(render(&read()?))
}

/// Reads both families' decisions (every source) and what the other
/// backend holds in each.
fn read() -> Result<Snapshot, InvalidSetting> {
    let at = SystemTime::now();
    let started = Instant::now();
    let mut families = Vec::new();
    // One reader for both decisions: the rules are counted once.
    let mut kernel = KernelReader::new();
    for family in Family::BOTH {
        let command = WrappedCommand::from_name(family.program()).expect("a known name");
        let decision = decision::decide_with(&command, Depth::Everything, &mut kernel)?;
        let stale = stale_state(decision.mode.other(), family);
        families.push(FamilyState {
            family,
            decision,
            stale,
        });
    }
    let counts = [Mode::Legacy, Mode::Nft].map(|mode| (mode, backend_count(&families[0].decision, mode)));
    Ok(Snapshot {
        families,
        counts,
        took: started.elapsed(),
        at,
    })
}

/// Whether the running kernel has `mode` for `family` now, as far as files
/// tell (nothing is asked): None when that cannot be told.
fn in_kernel(mode: Mode, family: Family) -> Option<bool> {
    let presence = match mode {
        Mode::Nft => modules::nf_tables(),
        Mode::Legacy => modules::x_tables(family),
    };
    match presence {
        Presence::Present(_) | Presence::Askable(_) => Some(true),
        Presence::NotLoaded(_) | Presence::Missing(_) => Some(false),
        Presence::Unknown(_) => None,
    }
}

/// A backend's rule count as `decision` read it: absent when the kernel has
/// the backend in neither family.
fn backend_count(decision: &Decision, mode: Mode) -> Count {
    if Family::BOTH
        .iter()
        .all(|&family| in_kernel(mode, family) == Some(false))
    {
        return Count::Absent;
    }
    let bounds = decision.rule_counts.as_ref().map(|counts| match mode {
        Mode::Legacy => counts.legacy,
        Mode::Nft => counts.nft,
    });
    match bounds {
        Some(bounds) if bounds.is_exact() => Count::Known(bounds.low),
        _ => Count::Unknown,
    }
}

/// What `backend` holds in `family`, per iptables table: the one place this
/// module reads `stale::find`.
fn stale_state(backend: Mode, family: Family) -> StaleState {
    if in_kernel(backend, family) == Some(false) {
        return StaleState::Absent;
    }
    let finding = stale::find::find(backend, family);
    if finding.unknown.is_some() {
        return StaleState::Unknown;
    }
    let tables = IPTABLES_TABLES.map(|name| {
        let mut state = TableState::default();
        for table in finding.tables.iter().filter(|table| table.name == name) {
            for chain in &table.chains {
                state.rules += chain.rules;
                if !chain.builtin {
                    state.user_chains += 1;
                }
                if chain.builtin && chain.policy != Some("ACCEPT") {
                    state.non_accept_policies += 1;
                }
            }
        }
        state
    });
    StaleState::Known {
        tables,
        left_alone: finding.left.len() as u64,
    }
}

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

/// The snapshot as text exposition, ending in `# EOF`.
fn render(snapshot: &Snapshot) -> String {
    let mut out = Exposition {
        text: String::new(),
        family: ("", "", false),
    };
    let families = &snapshot.families;

    out.gauge(
        "host_backend_info",
        "The backend the host's iptables calls go to, per family, and the source that decided (always 1).",
    );
    for state in families {
        out.sample(
            &[
                ("family", state.family.label()),
                ("backend", state.decision.mode.name()),
                ("decided_by", state.decision.decided_by.key()),
            ],
            1,
        );
    }

    out.gauge(
        "rules",
        "Rules in the iptables tables of each backend, IPv4 and IPv6 together; no sample when unknown.",
    );
    for (mode, count) in snapshot.counts {
        if let Some(rules) = count.rules() {
            out.sample(&[("backend", mode.name())], rules);
        }
    }
    out.gauge(
        "rules_state",
        "Whether each backend's rule count is known, absent (the kernel lacks the backend: 0 rules) or unknown (1 for the current state).",
    );
    for (mode, count) in snapshot.counts {
        out.states(&[("backend", mode.name())], count.state());
    }

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

    out.gauge(
        "stale_state",
        "Whether what the backend the host does not use holds in each family is known, absent (the kernel lacks that backend) or unknown (1 for the current state).",
    );
    for state in families {
        out.states(
            &[
                ("family", state.family.label()),
                ("backend", state.decision.mode.other().name()),
            ],
            state.stale.state(),
        );
    }
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
        for state in families {
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
    out.gauge(
        "stale_tables_left_alone",
        "Tables named like iptables tables that hold state in the backend the host does not use but are not that backend's (iptables-wrapper stale leaves them); no sample when unknown.",
    );
    for state in families {
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

    out.gauge(
        "disagreeing_evidence",
        "Pieces of evidence pointing to the other backend than the one chosen, per family and source read.",
    );
    for state in families {
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
    out.gauge(
        "contradicting_evidence",
        "Pieces of evidence contradicting a decision by the override or the host link (another host link, a hint chain only in the other backend); stale --remove refuses such a decision.",
    );
    for state in families {
        out.sample(
            &[("family", state.family.label())],
            state.decision.contradictions().count(),
        );
    }
    out.gauge(
        "warnings",
        "Warnings detect gives per family (disagreements, the mixed state, a default resting on unknowns, a backend the kernel lacks); their words are in iptables-wrapper detect.",
    );
    for state in families {
        out.sample(&[("family", state.family.label())], state.decision.warnings().len());
    }

    out.gauge(
        "decision_duration_seconds",
        "How long each family's decision took, reading every source.",
    );
    for state in families {
        if let Some(took) = state.decision.took {
            out.sample(&[("family", state.family.label())], took.as_secs_f64());
        }
    }
    out.gauge(
        "detect_duration_seconds",
        "How long reading everything exported took (both decisions and the stale tables).",
    );
    out.sample(&[], snapshot.took.as_secs_f64());
    out.gauge(
        "detect_timestamp_seconds",
        "When this reading started, in seconds since the Unix epoch.",
    );
    let at = snapshot.at.duration_since(UNIX_EPOCH).unwrap_or_default();
    out.sample(&[], at.as_secs_f64());

    out.text.push_str("# EOF\n");
    out.text
}

#[cfg(test)]
mod tests {
    use super::{render, Count, FamilyState, Snapshot, StaleState};
    use crate::decision::{Decision, Source};
    use crate::family::Family;
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
                },
                FamilyState {
                    family: Family::Ipv6,
                    decision: decision("ip6tables"),
                    stale: StaleState::Unknown,
                },
            ],
            counts: [(Mode::Legacy, Count::Unknown), (Mode::Nft, Count::Known(3))],
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
