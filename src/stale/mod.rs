//! `iptables-wrapper stale`: what the backend the host does not use still
//! holds, shown or removed. The way out of the mixed state an upgrade leaves
//! (the host switched to nft, legacy rules stay in the kernel, which
//! evaluates both) without a reboot.
//!
//! It decides the host's backend per family as a wrapped call does, and
//! removes only when that decision is certain: the override or the host
//! link ([`certainty()`]), not contradicted by each family's own state
//! (`family_contradiction`) nor by other evidence ([`mod@certainty`]). A
//! hint chain says where kubelet and kube-proxy write, not where the
//! host's other writers do; counts, the lock and the default can be wrong
//! exactly in the mixed state. So on those `--remove` refuses (exit 2) and
//! says what would make it certain, and showing shows what each backend
//! holds, saying that which one is stale is not certain, and why.
//!
//! Showing only reads, with `detect`'s promises: legacy tables are looked up
//! only when listed, nf_tables is asked only once files show it is in the
//! kernel. Removing first saves the stale backend's full ruleset per family
//! into a backup directory ([`backup`]), proves that the backup restores
//! each stale table exactly ([`proof`]), judges each family as one whole
//! ([`judge`]: what may go without a twin in the host's backend,
//! [`opening`]), then empties each family that may go, holding writers off
//! meanwhile, then reads again ([`remove`]). A write
//! after the removal shows in the final read and on the next run.

pub mod backup;
pub mod certainty;
mod difference;
mod effects;
mod fates;
pub mod find;
mod finding;
pub mod hooks;
pub mod in_progress;
pub mod ipsets;
pub mod judge;
pub mod live_save;
pub mod look;
pub mod opening;
pub mod proof;
pub mod removal_report;
pub mod remove;
pub mod rotation;
mod same_way;
pub mod save_tool;
mod saved_rules;
mod saved_table;
pub mod show;
pub mod signals;
pub mod uncertain;

use crate::command::WrappedCommand;
use crate::decision::{self, Decision, Depth, Source};
use crate::escape::printable;
use crate::escape::Shown as _;
use crate::family::Family;
use crate::host_link::{self, HostLinks};
use crate::kernel::KernelReader;
use crate::mode::{Mode, OVERRIDE_VAR};
use crate::settings::{InvalidSetting, HOST_ROOT_VAR};
use crate::standard_fds::say;
use look::Look;
use std::path::PathBuf;
use uncertain::Uncertain;

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
    /// `--allow-opening`: empty tables whose filtering items the host's
    /// backend does not enforce ([`opening`]).
    pub allow_opening: bool,
    /// `--despite-contradiction`: remove by `IPTABLES_MODE` although other
    /// evidence contradicts it ([`mod@certainty`]).
    pub despite_contradiction: bool,
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
    for line in in_progress::notice() {
        say(&format!("stale: {line}"));
    }
    let mut look = Look::default();
    let Decided { hosts, doubts } = match host_backends(options, &mut look) {
        Ok(decided) => decided,
        Err(invalid) => {
            let invalid = invalid.to_string();
            if options.json {
                show::print_json_refusal(&[], &invalid, &[]);
            }
            say(&printable(&invalid));
            return EXIT_REFUSED;
        }
    };
    let uncertain = (!doubts.is_empty()).then(|| doubted(&doubts, &hosts));
    match (uncertain, options.remove) {
        (None, true) => remove::run(&hosts, options, &mut look),
        (None, false) => show::run(&hosts, None, options, &mut look),
        (Some(why), false) => show::run(&hosts, Some(&why), options, &mut look),
        (Some(why), true) => {
            let contradicted = contradicting_lines(&doubts);
            let refusal = format!("stale --remove: refused: {why}");
            if options.json {
                show::print_json_refusal(&hosts, &refusal, &contradicted);
            }
            say(&printable(&refusal));
            for line in &contradicted {
                say(&printable(&format!("stale --remove: contradicted by: {line}")));
            }
            EXIT_REFUSED
        }
    }
}

/// What [`host_backends`] decided: each family's host backend, and the
/// families that are not certain, each with why.
struct Decided {
    hosts: Vec<HostBackend>,
    doubts: Vec<Doubt>,
}

/// A family whose decision is not certain enough, and why.
struct Doubt {
    family: Family,
    mode: Mode,
    decided_by: Source,
    why: Uncertain,
}

impl Doubt {
    /// `ip6tables uses nft by hint-chain (...)`.
    fn line(&self) -> String {
        format!(
            "{} uses {} by {} ({})",
            self.family.program(),
            self.mode,
            self.decided_by.key(),
            self.why
        )
    }
}

/// The evidence contradicting the families' decisions, one line each,
/// naming its family.
fn contradicting_lines(doubts: &[Doubt]) -> Vec<String> {
    doubts
        .iter()
        .filter_map(|d| match &d.why {
            Uncertain::Contradicted(lines) => Some(lines.iter().map(move |l| format!("{}: {l}", d.family.label()))),
            Uncertain::BySource { .. } => None,
        })
        .flatten()
        .collect()
}

/// Decides each family's host backend (Err: a setting is invalid), with
/// why the families that are not certain are not.
fn host_backends(options: &Options, look: &mut Look) -> Result<Decided, InvalidSetting> {
    let mut hosts = Vec::new();
    let mut doubts = Vec::new();
    let mut kernel = KernelReader::new();
    for family in Family::BOTH {
        let command = WrappedCommand::from_name(family.program()).expect("a known name");
        // The override and the host link are certain by themselves: then
        // nothing more is read (counting 55,000 nft rules takes a second).
        let mut decision = decision::decide_with(&command, Depth::DecideAndWarn, &mut kernel)?;
        if !decision.decided_by.certain_enough_to_remove() {
            decision = decision::decide_with(&command, Depth::Everything, &mut kernel)?;
        }
        let mut certain = certainty(&decision);
        if certain.is_ok() {
            let stale = look.of(decision.mode.other(), family).clone();
            let chosen = look.of(decision.mode, family);
            let mut lines = certainty::contradictions(&decision, family, &mut kernel, &stale, chosen);
            lines.extend(family_state(decision.mode, &stale, chosen));
            let overruled = decision.decided_by == Source::Override && options.despite_contradiction;
            if overruled {
                for line in &lines {
                    say(&printable(&format!(
                        "stale: {OVERRIDE_VAR} overrides contradicting evidence ({}): {line}",
                        family.label()
                    )));
                }
            } else if !lines.is_empty() {
                certain = Err(Uncertain::Contradicted(lines));
            }
        }
        if let Err(why) = certain {
            doubts.push(Doubt {
                family,
                mode: decision.mode,
                decided_by: decision.decided_by,
                why,
            });
        }
        hosts.push(HostBackend { family, decision });
    }
    Ok(Decided { hosts, doubts })
}

/// Why the `doubts` stop a removal, and what would let it go ahead. The
/// override decides both families, so it is offered only where both are
/// decided alike; and the host root only where it is not there.
fn doubted(doubts: &[Doubt], hosts: &[HostBackend]) -> String {
    let whys: Vec<String> = doubts.iter().map(Doubt::line).collect();
    let modes: Vec<Mode> = hosts.iter().map(|h| h.decision.mode).collect();
    let alike = modes.windows(2).all(|pair| pair[0] == pair[1]);
    let overridden = hosts.iter().all(|h| h.decision.decided_by == Source::Override);
    let contradicted = doubts.iter().any(|d| matches!(d.why, Uncertain::Contradicted(_)));
    let by_link = hosts.iter().any(|h| h.decision.decided_by == Source::HostLink);
    let advice = if contradicted && overridden {
        format!("if {OVERRIDE_VAR}={} is right, pass --despite-contradiction", modes[0])
    } else if contradicted && by_link && alike {
        format!(
            "remove the contradicting evidence, or if {} is right for both families, set {OVERRIDE_VAR}={} and pass --despite-contradiction",
            modes[0], modes[0]
        )
    } else if contradicted && by_link {
        let decided: Vec<String> = hosts
            .iter()
            .map(|h| format!("{} {}", h.family.label(), h.decision.mode))
            .collect();
        format!(
            "remove the contradicting evidence ({OVERRIDE_VAR} would decide both families, which are decided apart here: {})",
            decided.join(", ")
        )
    } else {
        let root = host_link::host_root();
        let family = doubts[0].family;
        let place = match host_link::read(&root, family, false) {
            HostLinks::NoRoot(_) => format!(
                "mount the host's root at {} (or at least its /etc/alternatives at {}/etc/alternatives; {HOST_ROOT_VAR} says where it is)",
                root.shown(),
                root.shown()
            ),
            _ => format!(
                "the host's root at {} holds no iptables link that decides (such as {}; docs/node-os.md lists each place read)",
                root.shown(),
                root.join(host_link::candidates(family)[0]).shown()
            ),
        };
        format!(
            "{place}; or set {OVERRIDE_VAR}=nft or {OVERRIDE_VAR}=legacy{}",
            if contradicted {
                " (and pass --despite-contradiction if the evidence still contradicts it)"
            } else {
                ""
            }
        )
    };
    format!(
        "{}, which is not certain enough to call the other backend's rules stale; {advice}",
        whys.join("; ")
    )
}

/// Whether a decision is certain enough to call the other backend stale:
/// the override or the host link. Err: why not ([`Uncertain::BySource`]).
/// A hint chain says where kubelet and kube-proxy write, not where the
/// host's other writers do (a libvirt or hand-written nat table in the
/// other backend is no Kubernetes state); the counts, the lock and the
/// default say nothing certain.
pub fn certainty(decision: &Decision) -> Result<(), Uncertain> {
    if decision.decided_by.certain_enough_to_remove() {
        return Ok(());
    }
    Err(Uncertain::BySource {
        reason: decision.reason.to_string(),
        doubt: decision.decided_by.facts().doubt,
    })
}

/// Why a family's own state contradicts a decision for `mode` (see
/// [`family_contradiction`]), from what `mode` holds there (`chosen`) and
/// what the other backend holds (`stale`); None when it does not.
fn family_state(mode: Mode, stale: &find::Finding, chosen: &find::Finding) -> Option<String> {
    let state = |finding: &find::Finding| match finding.unknown() {
        Some(why) => Err(why.to_string()),
        None => Ok(decisive_state(finding.tables())),
    };
    family_contradiction(mode, chosen.family, state(chosen), state(stale))
}

/// What in `tables` decides a packet's fate: their rules and non-ACCEPT
/// policies, in words ("3 rules, 1 DROP policy"); None when nothing (empty
/// user chains, such as hint chains, decide nothing).
fn decisive_state(tables: &[find::StaleTable]) -> Option<String> {
    let chains = || tables.iter().flat_map(|t| &t.chains);
    let rules: u64 = chains().map(|c| c.rules).sum();
    let policies = chains().filter(|c| c.builtin && c.policy != Some("ACCEPT")).count();
    let mut parts = Vec::new();
    if rules > 0 {
        parts.push(format!("{rules} rule{}", if rules == 1 { "" } else { "s" }));
    }
    if policies > 0 {
        parts.push(format!(
            "{policies} non-ACCEPT polic{}",
            if policies == 1 { "y" } else { "ies" }
        ));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Why `family`'s state contradicts a decision for `mode`: in `family`,
/// the other backend holds rules or non-ACCEPT policies (`other`) while
/// `mode` holds neither (`chosen`), or while what `mode` holds cannot be
/// read (nothing then says the host's rules are there). Tables are empty
/// at boot: what the other holds, something wrote there since, and nothing
/// wrote to `mode`. A stale state that cannot be read stops a removal by
/// itself, saying so.
fn family_contradiction(
    mode: Mode,
    family: Family,
    chosen: Result<Option<String>, String>,
    other: Result<Option<String>, String>,
) -> Option<String> {
    match (chosen, other) {
        (Ok(None), Ok(Some(held))) => Some(format!(
            "in {} {} holds {held} while {mode} holds none: what wrote them writes to {} (writers not restarted since the host switched, a program that runs iptables-{} by name)",
            family.label(),
            mode.other(),
            mode.other(),
            mode.other()
        )),
        (Err(why), Ok(Some(held))) => Some(format!(
            "in {} {} holds {held} while what {mode} holds cannot be read ({why}): nothing shows that the host's rules are in {mode}",
            family.label(),
            mode.other()
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{certainty, decisive_state, family_contradiction, find};
    use crate::decision::{Decision, Source};
    use crate::family::Family;
    use crate::mode::Mode;

    fn decided_by(source: Source) -> Decision {
        Decision {
            command: "iptables",
            mode: Mode::Nft,
            decided_by: source,
            reason: "hint chain KUBE-IPTABLES-HINT found in nft (ipv4)".into(),
            evidence: Vec::new(),
            rule_counts: None,
            lacking: Vec::new(),
            took: None,
        }
    }

    #[test]
    fn only_the_override_and_the_host_link_are_certain() {
        assert_eq!(certainty(&decided_by(Source::Override)), Ok(()));
        assert_eq!(certainty(&decided_by(Source::HostLink)), Ok(()));
        assert!(certainty(&decided_by(Source::HintChain))
            .is_err_and(|why| why.to_string().contains("not where the host's other writers do")));
        assert!(certainty(&decided_by(Source::RuleCounts)).is_err());
    }

    #[test]
    fn a_decision_is_contradicted_by_its_familys_own_state() {
        let held = || Ok(Some("3 rules".to_string()));
        assert!(
            family_contradiction(Mode::Nft, Family::Ipv6, Ok(None), held()).is_some_and(|why| why
                .starts_with("in ipv6 legacy holds 3 rules while nft holds none: what wrote them writes to legacy"))
        );
        assert_eq!(family_contradiction(Mode::Nft, Family::Ipv6, held(), held()), None);
        assert_eq!(family_contradiction(Mode::Nft, Family::Ipv4, Ok(None), Ok(None)), None);
        assert_eq!(
            family_contradiction(Mode::Legacy, Family::Ipv6, Err("refused".into()), Ok(None)),
            None
        );
        assert!(
            family_contradiction(Mode::Legacy, Family::Ipv4, Err("refused".into()), held()).is_some_and(
                |why| why.starts_with("in ipv4 nft holds 3 rules while what legacy holds cannot be read (refused)")
            )
        );
        assert_eq!(
            family_contradiction(Mode::Legacy, Family::Ipv4, held(), Err("refused".into())),
            None
        );
    }

    #[test]
    fn only_rules_and_policies_other_than_accept_are_decisive() {
        let chain = |name: &str, builtin: bool, policy: Option<&'static str>, rules: u64| find::StaleChain {
            name: name.into(),
            builtin,
            policy,
            rules,
        };
        let table = |chains| find::StaleTable {
            name: "filter",
            chains,
            builtin_chains: vec!["INPUT", "FORWARD", "OUTPUT"],
        };
        assert_eq!(
            decisive_state(&[table(vec![chain("KUBE-IPTABLES-HINT", false, None, 0)])]),
            None
        );
        assert_eq!(
            decisive_state(&[table(vec![
                chain("INPUT", true, Some("DROP"), 0),
                chain("FORWARD", true, Some("DROP"), 2)
            ])]),
            Some("2 rules, 2 non-ACCEPT policies".to_string())
        );
        assert_eq!(
            decisive_state(&[table(vec![chain("OUTPUT", true, Some("ACCEPT"), 1)])]),
            Some("1 rule".to_string())
        );
    }
}
