//! `iptables-wrapper stale`: what the backend the host does not use still
//! holds, shown or removed. The way out of the mixed state an upgrade leaves
//! (the host switched to nft, legacy rules stay in the kernel, which
//! evaluates both) without a reboot.
//!
//! It decides the host's backend per family as a wrapped call does, and
//! acts only when that decision is certain: the override, the host link, or
//! a hint chain present in that backend alone ([`certainty`]). Counts, the
//! lock and the default can be wrong exactly in the mixed state, so then it
//! refuses (exit 2) and says what would make it certain.
//!
//! Showing only reads, with `detect`'s promises: legacy tables are looked up
//! only when listed, nf_tables is asked only once files show it is in the
//! kernel. Removing first saves the stale backend's full ruleset per family
//! into a backup directory ([`remove`]), then replaces each stale table by
//! an empty one with that backend's own restore tool, one table per commit,
//! then reads again. What it cannot see: a write into the stale backend
//! (a component still calling it directly) between the backup and its
//! table's removal is removed without being in the backup; a write after
//! the removal shows in the final read and on the next run.

pub mod find;
pub mod remove;
pub mod show;

use crate::command::WrappedCommand;
use crate::decision::{self, Decision, Depth, Source};
use crate::escape::printable;
use crate::family::Family;
use crate::host_link::DEFAULT_HOST_ROOT;
use crate::mode::{Mode, OVERRIDE_VAR};
use crate::settings::HOST_ROOT_VAR;
use crate::standard_fds::say;
use std::path::PathBuf;

/// Nothing stale: the exit status of a show or a removal that leaves nothing.
pub const EXIT_NOTHING_STALE: i32 = 0;
/// Something stale (shown, or left after a removal), or a removal that failed.
pub const EXIT_STALE: i32 = 1;
/// Refused: the host's backend is not certain (or the command line is wrong).
pub const EXIT_REFUSED: i32 = 2;

/// What the command line asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub json: bool,
    pub verbose: bool,
    pub remove: bool,
    pub backup_dir: Option<PathBuf>,
}

/// The host's backend for one family, decided with certainty.
#[derive(Clone, Debug)]
pub struct HostBackend {
    pub family: Family,
    pub decision: Decision,
}

impl HostBackend {
    /// The backend the host does not use: the one whose state is stale.
    pub fn stale(&self) -> Mode {
        self.decision.mode.other()
    }
}

/// Runs `stale` as asked; returns the exit status.
pub fn run(options: &Options) -> i32 {
    let hosts = match host_backends() {
        Ok(hosts) => hosts,
        Err(refusal) => {
            if options.json {
                show::print_json_refusal(&refusal);
            }
            say(&printable(&refusal));
            return EXIT_REFUSED;
        }
    };
    if options.remove {
        remove::run(&hosts, options)
    } else {
        show::run(&hosts, options)
    }
}

/// Decides each family's host backend; Err with one line when either is not
/// certain.
fn host_backends() -> Result<Vec<HostBackend>, String> {
    let mut hosts = Vec::new();
    for family in Family::BOTH {
        let command = WrappedCommand::from_name(family.program()).expect("a known name");
        let decision = decision::decide(&command, Depth::Everything).map_err(|invalid| invalid.to_string())?;
        if let Err(why) = certainty(&decision) {
            return Err(format!(
                "stale: refused: {} uses {} by {}: {} ({why}), which is not certain enough to remove the other backend's rules; mount the host's /etc/alternatives at {DEFAULT_HOST_ROOT}/etc/alternatives (or set {HOST_ROOT_VAR} to where the host's root is), or set {OVERRIDE_VAR}=nft or {OVERRIDE_VAR}=legacy",
                family.program(),
                decision.mode,
                decision.decided_by.key(),
                decision.reason,
            ));
        }
        hosts.push(HostBackend { family, decision });
    }
    Ok(hosts)
}

/// Whether a decision is certain enough to call the other backend stale:
/// the override, the host link, or a hint chain found in the chosen backend
/// while the other's hint chains were read and are absent. Err: what is
/// missing.
pub fn certainty(decision: &Decision) -> Result<(), String> {
    match decision.decided_by {
        Source::Override | Source::HostLink => Ok(()),
        Source::HintChain => {
            let hints = || decision.evidence.iter().filter(|e| e.source == Source::HintChain);
            if let Some(other) = hints().find(|e| e.points_to == Some(decision.mode.other())) {
                Err(format!("a hint chain is in both backends: {}", other.location))
            } else if let Some(unread) = hints().find(|e| e.finding.is_unknown()) {
                Err(format!("{}: {}", unread.location, unread.finding))
            } else {
                Ok(())
            }
        }
        source => Err(format!("decided by {}", source.key())),
    }
}

#[cfg(test)]
mod tests {
    use super::certainty;
    use crate::decision::{Decision, Evidence, Finding, Source};
    use crate::mode::Mode;

    fn by_hint_chain(finding: Finding) -> Decision {
        Decision {
            command: "iptables",
            mode: Mode::Nft,
            decided_by: Source::HintChain,
            reason: "hint chain KUBE-IPTABLES-HINT found in nft (ipv4)".into(),
            evidence: vec![Evidence {
                source: Source::HintChain,
                location: "legacy mangle hint chains".into(),
                finding,
                method: "none".into(),
                points_to: None,
            }],
            rule_counts: None,
            lacking: Vec::new(),
            took: None,
        }
    }

    #[test]
    fn unread_hint_chains_are_found_by_their_finding() {
        assert_eq!(
            certainty(&by_hint_chain(Finding::unknown("GET_INFO refused"))),
            Err("legacy mangle hint chains: unknown: GET_INFO refused".to_string())
        );
        assert_eq!(
            certainty(&by_hint_chain(Finding::Absent("unknown (a name)".into()))),
            Ok(())
        );
        assert_eq!(
            certainty(&by_hint_chain(Finding::Absent("absent (ipv4, ipv6)".into()))),
            Ok(())
        );
    }
}
