//! `detect --format prometheus`: the host's state as Prometheus text
//! exposition (also valid OpenMetrics text), for node-exporter's textfile
//! collector or a scrape: per family the backend the host uses, the source
//! that decided and whether its program is found, each backend's rule count
//! and whether it is known,
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
//!
//! This module reads the snapshot; `exposition` writes it, one function
//! per metric family.

mod exposition;

use crate::backend;
use crate::command::WrappedCommand;
use crate::decision::{self, Decision, Depth};
use crate::family::Family;
use crate::kernel::modules::{self, Presence};
use crate::kernel::KernelReader;
use crate::kernel::IPTABLES_TABLES;
use crate::mode::Mode;
use crate::settings::InvalidSetting;
use crate::stale;
use exposition::render;
use std::time::{Duration, Instant, SystemTime};

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
    /// Whether the chosen backend's program for the family's command is
    /// found (the search a wrapped call makes, without the exec).
    runnable: bool,
}

/// Everything exported, as read.
#[derive(Clone, Debug)]
struct Snapshot {
    families: Vec<FamilyState>,
    /// Each backend's rule count, legacy first: IPv4 and IPv6 together, as
    /// the IPv4 decision counted them (each family's decision counts both).
    counts: [(Mode, Count); 2],
    /// Removals of stale tables that died before their report, as the
    /// record of a removal in progress names them.
    interrupted_removals: usize,
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
        let runnable = backend::locate(&command, decision.mode).is_ok();
        families.push(FamilyState {
            family,
            decision,
            stale,
            runnable,
        });
    }
    let counts = [Mode::Legacy, Mode::Nft].map(|mode| (mode, backend_count(&families[0].decision, mode)));
    Ok(Snapshot {
        families,
        counts,
        interrupted_removals: stale::in_progress::interrupted(),
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
    if finding.unknown().is_some() {
        return StaleState::Unknown;
    }
    let tables = IPTABLES_TABLES.map(|name| {
        let mut state = TableState::default();
        for table in finding.tables().iter().filter(|table| table.name == name) {
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
