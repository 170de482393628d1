//! The second source: the host's iptables link, read through the host
//! root's mount (see the crate's `host_link`: the alternatives link or its
//! node OS's own place). Links whose target is a backend's file name
//! decide; a candidate that cannot tell is shown with why, no hint; no
//! candidate at all is absent (the host root may not be mounted).
//!
//! With the host on nft and warnings wanted, legacy rules left here still
//! apply (the kernel evaluates both backends): the upgrade-without-reboot
//! case, so the legacy tables already listed are read for stale state. What
//! it cannot see: whether the link still tells the truth (a host that
//! switched backends without updating it), and, for a large table on a
//! wrapped call, more than an upper bound of its rules.

use super::collector::{Collector, Depth};
use super::evidence::{Evidence, Finding};
use super::host::{FileReading, Host, LegacyTables};
use super::legacy_state::rules;
use super::reason::Reason;
use super::source::Source;
use crate::command::WrappedCommand;
use crate::escape::Shown as _;
use crate::family::Family;
use crate::host_link::{self, HostLink, HostLinks};
use crate::mode::Mode;
use std::path::{Path, PathBuf};

/// Where the stale-rules warning sends the operator.
pub const STALE_COMMAND_HINT: &str =
    "`iptables-wrapper stale` shows them, `iptables-wrapper stale --remove` removes them";

/// Stale legacy tables up to this size are walked for their exact rule
/// count on every call; larger ones only get GET_INFO's upper bound there.
const WALK_STALE_TABLES_UP_TO_BYTES: u32 = 16 * 1024;

/// The host link candidates of `family` under `root` (see the crate's
/// `host_link`): every one, or only up to the first that exists.
pub(super) struct Candidates {
    root: PathBuf,
    family: Family,
    every_candidate: bool,
}

impl FileReading for Candidates {
    type Found = HostLinks;

    fn read_live(&self) -> HostLinks {
        host_link::read(&self.root, self.family, self.every_candidate)
    }

    #[cfg(test)]
    fn unrecorded() -> HostLinks {
        HostLinks::NoRoot("does not exist (the host root is not mounted)".into())
    }
}

/// Records what the host root's first existing candidate says and decides
/// by it when its links name a backend; under an nft link, reads the stale
/// legacy tables when warnings are wanted. One piece of evidence on a call;
/// `detect` also shows where it looked first and found nothing.
pub(super) fn read_host_link(collector: &mut Collector, host: &mut impl Host, command: &WrappedCommand) {
    let reading = Candidates {
        root: host.host_root(),
        family: command.family,
        every_candidate: !collector.depth.stops_early(),
    };
    let found = host.read(&reading);
    let root = reading.root;
    let candidates = host_link::candidates(command.family);
    let (link, missing, later) = match found {
        HostLinks::NoRoot(why) => {
            collector.add(|| absent(root.shown().to_string(), format!("no host link: {why}"), "stat"));
            return;
        }
        HostLinks::NoneExists => {
            collector.add(|| {
                absent(
                    places(&root, candidates),
                    format!("no host link: none of these exists under {}", root.shown()),
                    "readlink",
                )
            });
            return;
        }
        HostLinks::Found { link, missing, later } => (link, missing, later),
    };
    if collector.depth == Depth::Everything && !missing.is_empty() {
        collector.add(|| absent(places(&root, &missing), "absent (read first)".into(), "readlink"));
    }
    collector.add(|| link_evidence(&link, ""));
    // `detect` only: the later candidates that exist (say an `iptables`
    // group that disagrees with the `ip6tables` one) are shown, and weigh
    // as disagreeing evidence, but never decide.
    for other in &later {
        collector.add(|| link_evidence(other, " (read after the first, does not decide)"));
    }
    if let Ok(mode) = link.answer {
        let reason = Reason::HostLink {
            path: link.path,
            chain: link.chain,
        };
        collector.decide(mode, Source::HostLink, reason);
        if mode == Mode::Nft && collector.depth.warns() {
            read_stale_legacy_tables(collector, host);
        }
    }
}

/// What a candidate's links say, as evidence.
fn link_evidence(link: &HostLink, note: &str) -> Evidence {
    let chain = link.shown_chain();
    let (value, points_to) = match &link.answer {
        Ok(mode) => (format!("{chain}{note}"), Some(*mode)),
        Err(why) if chain.is_empty() => (format!("cannot tell (no hint): {why}{note}"), None),
        Err(why) => (format!("{chain}: cannot tell (no hint): {why}{note}"), None),
    };
    Evidence {
        source: Source::HostLink,
        location: link.path.shown().to_string(),
        finding: Finding::Known(value),
        method: "readlink inside the host root (not followed, nothing run)".into(),
        points_to,
    }
}

/// `ROOT/{a, b, c}`: candidates under the root, in one location.
fn places(root: &Path, relative: &[&str]) -> String {
    format!("{}/{{{}}}", root.shown(), relative.join(", "))
}

fn absent(location: String, finding: String, method: &str) -> Evidence {
    Evidence {
        source: Source::HostLink,
        location,
        finding: Finding::Absent(finding),
        method: method.into(),
        points_to: None,
    }
}

/// With the host on nft, legacy rules left here still apply (the kernel
/// evaluates both backends): the upgrade-without-reboot case. Only tables
/// already listed are read, by GET_INFO (one small copy each) and, for a
/// table of at most 16 KiB (and every table for `detect`), GET_ENTRIES for
/// its chains: a table holding only its built-in chains with ACCEPT
/// policies is nothing stale (a read-only `iptables-legacy -L` leaves such
/// tables), one with a `FORWARD DROP` policy and no rule is (it drops
/// traffic as surely as a rule). A large table on a call gets GET_INFO's
/// upper bound.
fn read_stale_legacy_tables(collector: &mut Collector, host: &mut impl Host) {
    for family in Family::BOTH {
        let location = format!("legacy {} tables", family.label());
        let method = "/proc/net/ip*_tables_names, getsockopt GET_INFO, GET_ENTRIES".to_string();
        let walk_up_to = if collector.depth == Depth::Everything {
            u32::MAX
        } else {
            WALK_STALE_TABLES_UP_TO_BYTES
        };
        let (listed, tables) = match host.legacy_tables(family, walk_up_to) {
            LegacyTables::NoneListed => continue,
            LegacyTables::Unlisted(why) => {
                collector.add(|| Evidence {
                    source: Source::RuleCounts,
                    location,
                    finding: Finding::unknown(why),
                    method: "none".into(),
                    points_to: None,
                });
                continue;
            }
            // Without CAP_NET_ADMIN (a non-root image) GET_INFO is refused.
            // The tables may hold rules the kernel applies: warn, saying
            // what is not known, rather than run a save tool on every call.
            // Known, not unknown: that the tables exist is what was found,
            // and what makes this evidence for legacy.
            LegacyTables::Unopened { listed, why } => {
                collector.add(|| Evidence {
                    source: Source::RuleCounts,
                    location,
                    finding: Finding::Known(format!(
                        "{} exist; whether they hold rules is unknown ({why}): stale legacy rules may still apply; {STALE_COMMAND_HINT}",
                        listed.join(", ")
                    )),
                    method,
                    points_to: Some(Mode::Legacy),
                });
                continue;
            }
            LegacyTables::Opened { listed, tables } => (listed.join(", "), tables),
        };
        let holding: Vec<String> = tables
            .into_iter()
            .filter_map(|table| match table.walked {
                Some(Ok(state)) => state,
                // Unread (not walked, or a walk that kept failing): no rule,
                // and its policies are not known.
                _ if table.empty => None,
                _ => Some(format!("{} holds up to {}", table.name, rules(table.rule_upper_bound))),
            })
            .collect();
        let (finding, points_to) = if holding.is_empty() {
            (
                Finding::Absent(format!("{listed} exist, without rules or DROP policies: nothing stale")),
                None,
            )
        } else {
            (
                Finding::Known(format!(
                    "{} (stale legacy rules may still apply; {STALE_COMMAND_HINT})",
                    holding.join(", ")
                )),
                Some(Mode::Legacy),
            )
        };
        collector.add(|| Evidence {
            source: Source::RuleCounts,
            location,
            finding,
            method,
            points_to,
        });
    }
}
