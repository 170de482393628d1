//! The fourth source: `/run/xtables.lock` (or `XTABLES_LOCKFILE`, see the
//! crate's `xtables_lock`) as a tie-breaker. It is evidence only as a
//! regular file that is 0600 or held, and it decides legacy only when the
//! kernel shows legacy traces, state a legacy write left (a rule, a DROP
//! policy), not merely listed tables: go-iptables makes and locks the file
//! on nft hosts as well, and a read-only `iptables-legacy -L` leaves empty
//! tables. Like every source, it decides only when none before it did.
//!
//! What it cannot see: who made or holds the file (legacy iptables and
//! go-iptables leave it alike), and, with the rule counts unknown, whether
//! there is a tie to break at all (then it decides nothing).

use super::collector::Collector;
use super::counts::RuleCounts;
use super::evidence::{Evidence, Finding};
use super::host::{FileReading, Host, LegacyTables};
use super::legacy_state::rules;
use super::source::Source;
use crate::escape::Shown as _;
use crate::family::Family;
use crate::mode::Mode;
use crate::xtables_lock::{self, LockFileState, LockObservation};

/// The lock file's state (see the crate's `xtables_lock`).
pub(super) struct LockFile;

impl FileReading for LockFile {
    type Found = LockFileState;

    fn read_live(&self) -> LockFileState {
        xtables_lock::inspect()
    }

    #[cfg(test)]
    fn unrecorded() -> LockFileState {
        LockFileState {
            path: "/run/xtables.lock".into(),
            observed: LockObservation::Absent,
        }
    }
}

/// The lock file as a tie-breaker: evidence only as a regular file that is
/// 0600 or held, and deciding only when legacy holds state here too (a rule
/// or a DROP policy: go-iptables makes and locks the file on
/// nft hosts as well, and a read-only `iptables-legacy -L` leaves empty
/// tables) and the rule counts were known on both sides (a count left
/// unknown is no tie to break).
pub(super) fn read_xtables_lock(collector: &mut Collector, host: &mut impl Host, counts: Option<&RuleCounts>) {
    let lock = host.read(&LockFile);
    let mut value = lock.describe();
    let mut traces = None;
    if lock.hints_legacy() && counts.is_none() {
        value.push_str("; the rule counts are unknown, so there is no tie for it to break");
    } else if lock.hints_legacy() {
        // A tie of counts above 0: legacy's rules are the trace, unread.
        let counted = counts.map_or(0, |counts| counts.legacy.low);
        let traces_read = if counted > 0 {
            Ok(vec![format!("{} (ipv4 + ipv6)", rules(counted))])
        } else {
            legacy_traces(host)
        };
        match traces_read {
            Ok(tables) if tables.is_empty() => {
                value.push_str("; no legacy table holds a rule or a DROP policy, so it decides nothing")
            }
            Ok(tables) => {
                value.push_str(&format!("; legacy state: {}", tables.join(", ")));
                traces = Some(tables);
            }
            Err(why) => value.push_str(&format!(
                "; it decides nothing, as the legacy tables cannot be read ({why})"
            )),
        }
    }
    // No file, or something other than a regular file: no lock file there.
    // Any file is known, whatever its notes leave unknown.
    let finding = match lock.observed {
        LockObservation::Absent | LockObservation::NotAFile { .. } => Finding::Absent(value),
        LockObservation::Held { .. } | LockObservation::Mode0600 | LockObservation::Other { .. } => {
            Finding::Known(value)
        }
    };
    collector.add(|| Evidence {
        source: Source::XtablesLock,
        location: lock.path.shown().to_string(),
        finding,
        method: "stat, /proc/locks, /proc/net/ip*_tables_names, getsockopt GET_INFO, GET_ENTRIES".into(),
        points_to: traces.is_some().then_some(Mode::Legacy),
    });
    if let Some(tables) = traces {
        collector.decide(
            Mode::Legacy,
            Source::XtablesLock,
            format!(
                "{} is {}, and legacy holds state ({}): a tie-breaker",
                lock.path.shown(),
                lock.describe(),
                tables.join(", ")
            ),
        );
    }
}

/// What legacy holds in this network namespace, both families (`ipv4
/// filter holds 0 rules, policy FORWARD DROP`, ...): only listed tables are
/// read, by GET_INFO and GET_ENTRIES (GET_INFO cannot show a policy). Empty
/// tables are no trace. Reached only on a tie at 0 rules with the lock file
/// hinting legacy.
fn legacy_traces(host: &mut impl Host) -> Result<Vec<String>, String> {
    let mut traces = Vec::new();
    for family in Family::BOTH {
        let tables = match host.legacy_tables(family, u32::MAX) {
            LegacyTables::NoneListed => continue,
            LegacyTables::Unlisted(why) | LegacyTables::Unopened { why, .. } => return Err(why),
            LegacyTables::Opened { tables, .. } => tables,
        };
        for table in tables {
            let walked = table
                .walked
                .unwrap_or_else(|| Err(format!("{} was not walked", table.name)));
            if let Some(state) = walked? {
                traces.push(format!("{} {state}", family.label()));
            }
        }
    }
    Ok(traces)
}
