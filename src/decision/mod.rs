//! The decision, made afresh on every call: which backend this call goes to,
//! which source decided and why ([`Reason`]), and every piece of evidence
//! read on the way (kept where warnings or the report read it).
//!
//! First match wins: the `IPTABLES_MODE` override (from the environment or
//! the settings directory, see `settings`); the host's alternatives
//! link; the kernel's state (the hint chains, nft kube-proxy tables, rule
//! counts); the `/run/xtables.lock` tie-breaker; otherwise nft. On the hot
//! path reading stops at the first source that decides, and what could only
//! add a warning (stale legacy tables under an nft host link, whether the
//! kernel has the backend the override or the link picked) is read only when
//! the caller will show or record warnings ([`Depth::DecideAndWarn`]);
//! `detect` reads everything so it can show where sources disagree.
//!
//! Evidence that cannot be read is unknown, and an unknown side never loses
//! a comparison: rule counts decide only when both are known. The lock file
//! decides only when the kernel shows legacy traces, state a legacy write
//! left (a rule, a DROP policy), not merely listed tables (go-iptables
//! makes and locks it on nft hosts too, and a read-only `iptables-legacy -L`
//! leaves empty tables). A backend the running kernel lacks (a kernel built
//! without legacy x_tables, or without nf_tables), or that this process is
//! known to be unable to use (a seccomp filter refusing its socket, see
//! [`KernelReader::unusable`]), is never picked by counts, the lock or the
//! default; the override and the host link are obeyed anyway, with a
//! warning.
//!
//! Each source is read in a module of its own: `override_setting`,
//! `host_link` (with the stale legacy tables under an nft link),
//! `kernel_state` (hint chains, kube-proxy tables) and `counts`, `lock`, and
//! `presence` (with the default); what each source is ([`Source::facts`])
//! is in `source`, what they read of the host behind the `Host` trait in
//! `host` (files through one generic reading, each source's own
//! `FileReading`); `evidence` says what a piece of evidence knows, `collector` how
//! much is read and what was. This module orders the sources
//! (`decide_on`, top to bottom) and says what their evidence adds up to
//! ([`Decision::warnings`]).
//! It sees only what they found, and weighs it by its [`Finding`], never by
//! its text.

mod collector;
mod counts;
mod evidence;
mod host;
mod host_link;
mod kernel_state;
mod legacy_state;
mod lock;
mod override_setting;
mod presence;
mod reason;
#[cfg(test)]
mod recorded;
#[cfg(test)]
mod rows_tests;
mod source;

pub use collector::Depth;
pub use counts::{RuleCounts, MIXED_STATE_RULES};
pub use evidence::{Evidence, Finding, ReasonShown};
pub use host_link::STALE_COMMAND_HINT;
pub use reason::Reason;
pub use source::{AgainstStated, Facts, Reads, ReasonKept, Source};

use crate::command::WrappedCommand;
use crate::host_link::DEFAULT_HOST_ROOT;
use crate::kernel::KernelReader;
use crate::mode::{Mode, OVERRIDE_VAR};
use crate::settings::InvalidSetting;
use collector::Collector;
use host::{Host, LiveHost};
use std::time::{Duration, Instant};

/// The outcome: the mode, the source that decided and why, the evidence.
#[derive(Clone, Debug)]
pub struct Decision {
    pub command: &'static str,
    pub mode: Mode,
    pub decided_by: Source,
    /// Why this mode (one line, as `Display` shows it).
    pub reason: Reason,
    /// What was read, in order; empty at [`Depth::Decide`], where nothing
    /// reads it (no warning is shown or recorded).
    pub evidence: Vec<Evidence>,
    pub rule_counts: Option<RuleCounts>,
    /// Backends the running kernel lacks, or that this process is known to
    /// be unable to use, each with a clause saying so ("the running kernel
    /// lacks it (...)", "this process cannot use it (...)").
    pub lacking: Vec<(Mode, String)>,
    /// How long deciding took, when it was timed: for `detect` and for a
    /// call that logs at debug level (reading the clock costs a wrapped call
    /// two page faults of the vDSO otherwise).
    pub took: Option<Duration>,
}

impl Decision {
    /// Evidence that points to the other mode.
    pub fn disagreements(&self) -> impl Iterator<Item = &Evidence> {
        self.evidence.iter().filter(|e| e.points_to == Some(self.mode.other()))
    }

    /// Evidence that contradicts a decision by one source the operator or
    /// the host set (the override, the host link): another host link
    /// pointing to the other backend, or kubelet's or kube-proxy's hint
    /// chains (or kube-proxy's nftables table) pointing there while none
    /// points to the chosen backend. `stale --remove` refuses such a
    /// decision; wrapped calls still follow it.
    pub fn contradictions(&self) -> impl Iterator<Item = &Evidence> {
        let stated = self.decided_by.is_stated();
        let chosen_hint = self
            .evidence
            .iter()
            .any(|e| e.source == Source::HintChain && e.points_to == Some(self.mode));
        self.disagreements().filter(move |e| {
            stated
                && match e.source.facts().against_stated {
                    AgainstStated::Contradicts => true,
                    AgainstStated::ContradictsUnlessAHintAgrees => !chosen_hint,
                    AgainstStated::Disagrees => false,
                }
        })
    }

    /// Both backends hold many rules, as far as they were counted.
    pub fn is_mixed(&self) -> bool {
        self.rule_counts.as_ref().is_some_and(RuleCounts::is_mixed)
    }

    /// Why a decision by a hint chain rests on nothing but that chain, if
    /// it does: the chosen backend holds no rules while the other holds
    /// some. An empty chain is what any old container, or a read-only look
    /// from the wrong backend, can leave behind.
    pub fn hint_contradicted(&self) -> Option<String> {
        if self.decided_by != Source::HintChain {
            return None;
        }
        let counts = self.rule_counts.as_ref()?;
        let (chosen, other) = match self.mode {
            Mode::Legacy => (counts.legacy, counts.nft),
            Mode::Nft => (counts.nft, counts.legacy),
        };
        (chosen.high == 0 && other.low > 0).then(|| {
            format!(
                "{} holds no rules while {} holds {}: the hint chain may be a stray one",
                self.mode,
                self.mode.other(),
                counts::describe_bounds(other)
            )
        })
    }

    /// The warning lines to print for disagreements and a mixed state.
    pub fn warnings(&self) -> Vec<String> {
        let contradicting: Vec<&Evidence> = self.contradictions().collect();
        let mut warnings: Vec<String> = self
            .disagreements()
            .map(|e| {
                let (kind, refused) = if contradicting.contains(&e) {
                    (
                        "contradicting",
                        " (`iptables-wrapper stale --remove` refuses this decision)",
                    )
                } else {
                    ("disagreeing", "")
                };
                format!(
                    "{} uses {} ({}); {kind} evidence for {}: {}: {}{refused}",
                    self.command,
                    self.mode,
                    self.reason,
                    self.mode.other(),
                    e.location,
                    e.finding
                )
            })
            .collect();
        if let Some(why) = self.hint_contradicted() {
            warnings.push(format!(
                "{} uses {} ({}), but {why}",
                self.command, self.mode, self.reason
            ));
        }
        // Both backends busy is only a risk when nothing stronger than the
        // counts decided.
        if self.decided_by.facts().rests_on_counts && self.is_mixed() {
            warnings.push(format!(
                "both backends hold many rules (mixed state); mount the host's root at {DEFAULT_HOST_ROOT} or set {OVERRIDE_VAR} so the choice does not rest on counts"
            ));
        }
        if self.decided_by == Source::Default {
            let unknown: Vec<&str> = self
                .evidence
                .iter()
                .filter(|e| e.finding.is_unknown())
                .map(|e| e.location.as_str())
                .collect();
            if !unknown.is_empty() {
                warnings.push(format!(
                    "{} uses {} only by default, and part of the kernel's state is unknown ({}){}; or mount the host's root at {DEFAULT_HOST_ROOT} or set {OVERRIDE_VAR} so the choice does not rest on the default",
                    self.command,
                    self.mode,
                    unknown.join("; "),
                    crate::privilege::unknown_cause(crate::kernel::procfs::is_mounted)
                ));
            }
        }
        for (_, how) in self.lacking.iter().filter(|(mode, _)| *mode == self.mode) {
            warnings.push(format!(
                "{} uses {} ({}), but {how}: the backend's calls will likely fail",
                self.command, self.mode, self.reason
            ));
        }
        warnings
    }
}

/// Decides the mode for `command`. Fails only on invalid settings.
pub fn decide(command: &WrappedCommand, depth: Depth) -> Result<Decision, InvalidSetting> {
    decide_with(command, depth, &mut KernelReader::new())
}

/// Decides the mode for `command` with `kernel`, which keeps what it read
/// for the next decision (`stale` and the metrics decide for both families
/// of one state, and so count its rules once).
pub fn decide_with(
    command: &WrappedCommand,
    depth: Depth,
    kernel: &mut KernelReader,
) -> Result<Decision, InvalidSetting> {
    decide_on(command, depth, &mut LiveHost::new(kernel))
}

/// Decides the mode for `command` from what `host` reads: the sources in
/// the order they are consulted, each step taken only while none before it
/// decided (or `detect` reads on).
pub(crate) fn decide_on(
    command: &WrappedCommand,
    depth: Depth,
    host: &mut impl Host,
) -> Result<Decision, InvalidSetting> {
    if let Some(invalid) = &host.settings().invalid {
        return Err(invalid.clone());
    }
    let started = (depth == Depth::Everything || log::log_enabled!(log::Level::Debug)).then(Instant::now);
    let mut collector = Collector::new(depth);
    let mut rule_counts = None;

    override_setting::read_override(&mut collector, host);
    if !collector.done() {
        host_link::read_host_link(&mut collector, host, command);
    }
    if !collector.done() {
        let nft_lookups = kernel_state::read_hint_chains(&mut collector, host);
        if !collector.done() {
            kernel_state::read_kube_proxy_tables(&mut collector, host, &nft_lookups);
        }
        if !collector.done() {
            kernel_state::read_absent_legacy(&mut collector, host, &nft_lookups);
        }
        if !collector.done() {
            rule_counts = counts::read_rule_counts(&mut collector, host);
        }
    }
    if !collector.done() {
        lock::read_xtables_lock(&mut collector, host, rule_counts.as_ref());
    }
    let lacking = presence::read_backend_presence(&mut collector, host, command.family);
    let (mode, decided_by, reason) = collector
        .decided
        .take()
        .unwrap_or_else(|| presence::default_mode(&lacking, rule_counts.as_ref()));
    Ok(Decision {
        command: command.name,
        mode,
        decided_by,
        reason,
        evidence: collector.evidence,
        rule_counts,
        lacking,
        took: started.map(|started| started.elapsed()),
    })
}

#[cfg(test)]
mod tests {
    use super::{Decision, Evidence, Finding, Source};
    use crate::mode::Mode;

    fn evidence(source: Source, location: &str, finding: Finding) -> Evidence {
        Evidence {
            source,
            location: location.into(),
            finding,
            method: "test".into(),
            points_to: None,
        }
    }

    fn by_default(evidence: Vec<Evidence>) -> Decision {
        Decision {
            command: "iptables",
            mode: Mode::Nft,
            decided_by: Source::Default,
            reason: "no evidence for either backend: nft is the default".into(),
            evidence,
            rule_counts: None,
            lacking: Vec::new(),
            took: None,
        }
    }

    #[test]
    fn a_default_resting_on_unknowns_names_them_by_their_finding() {
        // The reads were refused, as a caller without CAP_NET_ADMIN sees:
        // the process notes it (whichever test runs first).
        crate::privilege::note_failure(Some(libc::EPERM));
        let decision = by_default(vec![
            // Known and absent texts that merely start with "unknown" are
            // not unknown.
            evidence(
                Source::HostLink,
                "/host/etc/alternatives/iptables",
                Finding::Known("unknown-target".into()),
            ),
            evidence(
                Source::XtablesLock,
                "/run/xtables.lock",
                Finding::Absent("unknown".into()),
            ),
            evidence(Source::RuleCounts, "rule counts", Finding::unknown("GET_INFO refused")),
            evidence(
                Source::KubeProxyTable,
                "nft tables ip/ip6 kube-proxy",
                Finding::unknown_aside("netlink refused; the save tool cannot show them"),
            ),
        ]);
        assert_eq!(
            decision.warnings(),
            ["iptables uses nft only by default, and part of the kernel's state is unknown (rule counts; nft tables ip/ip6 kube-proxy); reading it needs CAP_NET_ADMIN (root); or mount the host's root at /host or set IPTABLES_MODE so the choice does not rest on the default"]
        );
    }

    #[test]
    fn known_texts_starting_with_unknown_give_no_warning() {
        let decision = by_default(vec![
            evidence(Source::Override, "IPTABLES_MODE", Finding::Known("unknown".into())),
            evidence(
                Source::HintChain,
                "nft mangle chains",
                Finding::Absent("unknown: absent".into()),
            ),
        ]);
        assert!(decision.warnings().is_empty(), "{:?}", decision.warnings());
    }

    #[test]
    fn a_disagreement_shows_its_finding_as_rendered() {
        let mut decision = by_default(Vec::new());
        decision.decided_by = Source::HostLink;
        decision.reason = "host link /host/etc/alternatives/iptables -> /usr/sbin/iptables-nft".into();
        decision.evidence.push(Evidence {
            points_to: Some(Mode::Legacy),
            ..evidence(
                Source::HintChain,
                "legacy ipv4 mangle chain KUBE-IPTABLES-HINT",
                Finding::Known("present".into()),
            )
        });
        assert_eq!(
            decision.warnings(),
            ["iptables uses nft (host link /host/etc/alternatives/iptables -> /usr/sbin/iptables-nft); contradicting evidence for legacy: legacy ipv4 mangle chain KUBE-IPTABLES-HINT: present (`iptables-wrapper stale --remove` refuses this decision)"]
        );
        // With a hint chain in nft too, it only disagrees.
        decision.evidence.push(Evidence {
            points_to: Some(Mode::Nft),
            ..evidence(
                Source::HintChain,
                "nft ipv4 mangle chain KUBE-IPTABLES-HINT",
                Finding::Known("present".into()),
            )
        });
        assert!(decision.warnings()[0].contains("; disagreeing evidence for legacy: "));
        assert_eq!(decision.contradictions().count(), 0);
    }
}
