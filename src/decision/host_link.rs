//! The second source: the host's alternatives link, read through the host
//! root's mount (see the crate's `host_link`). A link whose target is a
//! backend's file name decides; one that names no backend is shown, no
//! hint; no link at all is absent (the host root may not be mounted).
//!
//! With the host on nft and warnings wanted, legacy rules left here still
//! apply (the kernel evaluates both backends): the upgrade-without-reboot
//! case, so the legacy tables already listed are read for stale state. What
//! it cannot see: whether the link still tells the truth (a host that
//! switched backends without updating it), and, for a large table on a
//! wrapped call, more than an upper bound of its rules.

use super::collector::{Collector, Depth};
use super::evidence::{Evidence, Finding, Source};
use super::legacy_state::{describe_state, rules};
use crate::command::WrappedCommand;
use crate::family::Family;
use crate::host_link;
use crate::kernel::legacy::{self, LegacyFamily};
use crate::mode::Mode;

/// Where the stale-rules warning sends the operator.
pub const STALE_COMMAND_HINT: &str =
    "`iptables-wrapper stale` shows them, `iptables-wrapper stale --remove` removes them";

/// Stale legacy tables up to this size are walked for their exact rule
/// count on every call; larger ones only get GET_INFO's upper bound there.
const WALK_STALE_TABLES_UP_TO_BYTES: u32 = 16 * 1024;

/// Records the host's links and decides by the one that names a backend;
/// under an nft link, reads the stale legacy tables when warnings are wanted.
pub(super) fn read_host_link(collector: &mut Collector, command: &WrappedCommand) {
    let root = host_link::host_root();
    let links = host_link::read(&root, command.family, collector.depth.stops_early());
    for link in &links {
        let value = match link.mode {
            Some(_) => format!("-> {}", link.target.display()),
            None => format!("-> {} (not a backend's file name: no hint)", link.target.display()),
        };
        collector.add(Evidence {
            source: Source::HostLink,
            location: link.path.display().to_string(),
            finding: Finding::Known(value),
            method: "readlink (not followed)".into(),
            points_to: link.mode,
        });
    }
    match host_link::deciding(&links) {
        Some(link) => {
            let mode = link.mode.expect("a deciding link names a mode");
            collector.decide(
                mode,
                Source::HostLink,
                format!("host link {} -> {}", link.path.display(), link.target.display()),
            );
            if mode == Mode::Nft && collector.depth.warns() {
                read_stale_legacy_tables(collector);
            }
        }
        None if links.is_empty() => collector.add(Evidence {
            source: Source::HostLink,
            location: root
                .join(host_link::candidates(command.family)[0])
                .display()
                .to_string(),
            finding: Finding::Absent("no host link (host root not mounted?)".into()),
            method: "readlink".into(),
            points_to: None,
        }),
        None => {}
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
fn read_stale_legacy_tables(collector: &mut Collector) {
    for family in Family::BOTH {
        let location = format!("legacy {} tables", family.label());
        let method = "/proc/net/ip*_tables_names, getsockopt GET_INFO, GET_ENTRIES".to_string();
        let names = match legacy::listed_tables(family) {
            Ok(Some(names)) if !names.is_empty() => names,
            Ok(_) => continue,
            Err(why) => {
                collector.add(Evidence {
                    source: Source::RuleCounts,
                    location,
                    finding: Finding::unknown(why),
                    method: "none".into(),
                    points_to: None,
                });
                continue;
            }
        };
        let listed = names.join(", ");
        let tables = match LegacyFamily::open_listed(family, names) {
            Ok(tables) => tables,
            // Without CAP_NET_ADMIN (a non-root image) GET_INFO is refused.
            // The tables may hold rules the kernel applies: warn, saying
            // what is not known, rather than run a save tool on every call.
            // Known, not unknown: that the tables exist is what was found,
            // and what makes this evidence for legacy.
            Err(e) => {
                collector.add(Evidence {
                    source: Source::RuleCounts,
                    location,
                    finding: Finding::Known(format!(
                        "{listed} exist; whether they hold rules is unknown ({e}): stale legacy rules may still apply; {STALE_COMMAND_HINT}"
                    )),
                    method,
                    points_to: Some(Mode::Legacy),
                });
                continue;
            }
        };
        let walk_all = collector.depth == Depth::Everything;
        let holding: Vec<String> = tables
            .tables
            .iter()
            .filter_map(|table| {
                let contents = (walk_all || table.size <= WALK_STALE_TABLES_UP_TO_BYTES)
                    .then(|| tables.contents(table).ok())
                    .flatten();
                match contents {
                    Some(contents) => describe_state(&table.name, &contents),
                    // Unread (a walk that kept failing): no rule, and its
                    // policies are not known.
                    None if table.is_empty() => None,
                    None => Some(format!(
                        "{} holds up to {}",
                        table.name,
                        rules(table.rule_upper_bound())
                    )),
                }
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
        collector.add(Evidence {
            source: Source::RuleCounts,
            location,
            finding,
            method,
            points_to,
        });
    }
}
