//! The decision, made afresh on every call: which backend this call goes to,
//! which source decided, and every piece of evidence read on the way.
//!
//! First match wins: the `IPTABLES_MODE` override; the host's alternatives
//! link; the kernel's state (kubelet's hint chains, nft kube-proxy tables,
//! rule counts); the weak `/run/xtables.lock` hint; otherwise nft. On the
//! hot path reading stops at the first source that decides; `detect` reads
//! everything so it can show where sources disagree.

use crate::command::WrappedCommand;
use crate::family::Family;
use crate::host_link::{self, DEFAULT_HOST_ROOT, HOST_ROOT_VAR};
use crate::kernel::{legacy, CountVerdict, HintChain, KernelReader, RuleBounds};
use crate::mode::{self, InvalidOverride, Mode, OVERRIDE_VAR};
use crate::xtables_lock;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Both backends holding at least this many rules is a mixed state.
pub const MIXED_STATE_RULES: u64 = 10;

/// How much to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// Stop at the first source that decides (every wrapped call).
    Decide,
    /// Read every source, with exact counts (the `detect` report).
    Everything,
}

/// The sources of evidence, in the order they are consulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Override,
    HostLink,
    HintChain,
    KubeProxyTable,
    RuleCounts,
    XtablesLock,
    Default,
}

impl Source {
    /// A stable key for machine-readable output.
    pub fn key(self) -> &'static str {
        match self {
            Source::Override => "override",
            Source::HostLink => "host-link",
            Source::HintChain => "hint-chain",
            Source::KubeProxyTable => "kube-proxy-table",
            Source::RuleCounts => "rule-counts",
            Source::XtablesLock => "xtables-lock",
            Source::Default => "default",
        }
    }
}

/// One piece of evidence: where it was read, what it said, how it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    pub source: Source,
    pub location: String,
    pub value: String,
    pub method: String,
    /// The mode it points to, if it points anywhere.
    pub points_to: Option<Mode>,
}

/// Both backends' rule counts, as far as they were read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleCounts {
    pub legacy: RuleBounds,
    pub legacy_method: String,
    pub nft: RuleBounds,
    pub nft_method: String,
}

impl RuleCounts {
    /// Both backends hold many rules: the counts are a poor guide.
    pub fn is_mixed(&self) -> bool {
        self.legacy.low >= MIXED_STATE_RULES && self.nft.low >= MIXED_STATE_RULES
    }
}

/// The outcome: the mode, the source that decided and why, the evidence.
#[derive(Clone, Debug)]
pub struct Decision {
    pub command: &'static str,
    pub mode: Mode,
    pub decided_by: Source,
    /// One line: why this mode.
    pub reason: String,
    pub evidence: Vec<Evidence>,
    pub rule_counts: Option<RuleCounts>,
    pub took: Duration,
}

impl Decision {
    /// Evidence that points to the other mode.
    pub fn disagreements(&self) -> impl Iterator<Item = &Evidence> {
        self.evidence.iter().filter(|e| e.points_to == Some(self.mode.other()))
    }

    /// Both backends hold many rules, as far as they were counted.
    pub fn is_mixed(&self) -> bool {
        self.rule_counts.as_ref().is_some_and(RuleCounts::is_mixed)
    }

    /// The warning lines to print for disagreements and a mixed state.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings: Vec<String> = self
            .disagreements()
            .map(|e| {
                format!(
                    "{} uses {} ({}); disagreeing evidence for {}: {}: {}",
                    self.command,
                    self.mode,
                    self.reason,
                    self.mode.other(),
                    e.location,
                    e.value
                )
            })
            .collect();
        // Both backends busy is only a risk when nothing stronger than the
        // counts decided.
        let rests_on_counts = matches!(
            self.decided_by,
            Source::RuleCounts | Source::XtablesLock | Source::Default
        );
        if rests_on_counts && self.is_mixed() {
            warnings.push(format!(
                "both backends hold many rules (mixed state); mount the host's /etc/alternatives at {DEFAULT_HOST_ROOT}/etc/alternatives or set {OVERRIDE_VAR} so the choice does not rest on counts"
            ));
        }
        warnings
    }
}

/// Collects evidence; the first source to decide wins.
struct Collector {
    depth: Depth,
    evidence: Vec<Evidence>,
    decided: Option<(Mode, Source, String)>,
}

impl Collector {
    fn add(&mut self, evidence: Evidence) {
        self.evidence.push(evidence);
    }

    fn decide(&mut self, mode: Mode, source: Source, reason: String) {
        if self.decided.is_none() {
            self.decided = Some((mode, source, reason));
        }
    }

    /// Whether reading can stop here.
    fn done(&self) -> bool {
        self.depth == Depth::Decide && self.decided.is_some()
    }
}

/// Decides the mode for `command`. Fails only on an invalid override.
pub fn decide(command: &WrappedCommand, depth: Depth) -> Result<Decision, InvalidOverride> {
    let started = Instant::now();
    let mut collector = Collector {
        depth,
        evidence: Vec::new(),
        decided: None,
    };
    let mut rule_counts = None;

    read_override(&mut collector)?;
    if !collector.done() {
        read_host_link(&mut collector, command);
    }
    if !collector.done() {
        rule_counts = read_kernel(&mut collector);
    }
    if !collector.done() {
        read_xtables_lock(&mut collector);
    }
    let (mode, decided_by, reason) = collector.decided.take().unwrap_or((
        Mode::Nft,
        Source::Default,
        "no evidence for either backend: nft is the default".to_string(),
    ));
    Ok(Decision {
        command: command.name,
        mode,
        decided_by,
        reason,
        evidence: collector.evidence,
        rule_counts,
        took: started.elapsed(),
    })
}

fn read_override(collector: &mut Collector) -> Result<(), InvalidOverride> {
    let value = match std::env::var(OVERRIDE_VAR) {
        Ok(value) => Some(value),
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(raw)) => return Err(InvalidOverride(raw.to_string_lossy().into_owned())),
    };
    if let Some(mode) = mode::parse_override(value.as_deref())? {
        collector.add(Evidence {
            source: Source::Override,
            location: OVERRIDE_VAR.to_string(),
            value: value.clone().unwrap_or_default(),
            method: "environment".into(),
            points_to: Some(mode),
        });
        collector.decide(
            mode,
            Source::Override,
            format!(
                "overridden by environment variable {OVERRIDE_VAR}={}",
                value.unwrap_or_default()
            ),
        );
    }
    Ok(())
}

fn read_host_link(collector: &mut Collector, command: &WrappedCommand) {
    let root = std::env::var_os(HOST_ROOT_VAR)
        .filter(|v| !v.is_empty())
        .map_or(PathBuf::from(DEFAULT_HOST_ROOT), PathBuf::from);
    let links = host_link::read(&root, command.family);
    for link in &links {
        collector.add(Evidence {
            source: Source::HostLink,
            location: link.path.display().to_string(),
            value: format!("-> {}", link.target.display()),
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
            if mode == Mode::Nft && collector.done() {
                read_legacy_table_list(collector);
            }
        }
        None if links.is_empty() => collector.add(Evidence {
            source: Source::HostLink,
            location: root
                .join(host_link::candidates(command.family)[0])
                .display()
                .to_string(),
            value: "no host link (host root not mounted?)".into(),
            method: "readlink".into(),
            points_to: None,
        }),
        None => {}
    }
}

/// With the host on nft, legacy tables still present here may hold stale
/// rules the kernel still applies (the upgrade-without-reboot case). Listing
/// them is a file read, not a kernel query, so the hot path can afford it;
/// `detect` counts their rules instead.
fn read_legacy_table_list(collector: &mut Collector) {
    for family in Family::BOTH {
        let Ok(tables) = legacy::listed_tables(family) else {
            continue;
        };
        if !tables.is_empty() {
            collector.add(Evidence {
                source: Source::RuleCounts,
                location: format!("legacy {} tables", family.label()),
                value: format!("{} exist (stale legacy rules may still apply)", tables.join(", ")),
                method: "/proc/net/ip*_tables_names".into(),
                points_to: Some(Mode::Legacy),
            });
        }
    }
}

fn hint_location(mode: Mode, hint: &HintChain) -> String {
    format!("{} {} mangle chain {}", mode, hint.family.label(), hint.chain)
}

/// Reads the kernel's state; returns the rule counts when they were read.
fn read_kernel(collector: &mut Collector) -> Option<RuleCounts> {
    let mut kernel = KernelReader::new();

    let nft_lookups = kernel.nft_lookups();
    let nft_hints = match &nft_lookups {
        Ok(reading) => reading.value.hint_chains.clone(),
        Err(_) => Vec::new(),
    };
    record_hints(
        collector,
        Mode::Nft,
        nft_lookups.as_ref().map(|r| (&r.value.hint_chains, &r.method)),
    );
    if let Some(hint) = nft_hints.first() {
        collector.decide(
            Mode::Nft,
            Source::HintChain,
            format!(
                "kubelet's hint chain {} found in nft ({})",
                hint.chain,
                hint.family.label()
            ),
        );
        if collector.done() {
            return None;
        }
    }

    let legacy_hints = kernel.legacy_hint_chains();
    record_hints(
        collector,
        Mode::Legacy,
        legacy_hints.as_ref().map(|r| (&r.value, &r.method)),
    );
    if let Some(hint) = legacy_hints.as_ref().ok().and_then(|r| r.value.first()) {
        collector.decide(
            Mode::Legacy,
            Source::HintChain,
            format!(
                "kubelet's hint chain {} found in legacy ({}), not in nft",
                hint.chain,
                hint.family.label()
            ),
        );
        if collector.done() {
            return None;
        }
    }

    if let Ok(reading) = &nft_lookups {
        match &reading.value.kube_proxy_tables {
            Some(families) => {
                for family in families {
                    collector.add(Evidence {
                        source: Source::KubeProxyTable,
                        location: format!("nft table {} kube-proxy", family.nft_name()),
                        value: "present".into(),
                        method: reading.method.clone(),
                        points_to: Some(Mode::Nft),
                    });
                }
                if let Some(family) = families.first() {
                    collector.decide(
                        Mode::Nft,
                        Source::KubeProxyTable,
                        format!("kube-proxy's nftables table found ({})", family.label()),
                    );
                    if collector.done() {
                        return None;
                    }
                }
            }
            None => collector.add(Evidence {
                source: Source::KubeProxyTable,
                location: "nft tables ip/ip6 kube-proxy".into(),
                value: "unknown (netlink refused; the save tool cannot show them)".into(),
                method: reading.method.clone(),
                points_to: None,
            }),
        }
    }

    match kernel.compare_rule_counts(collector.depth == Depth::Everything) {
        Ok(comparison) => {
            let counts = RuleCounts {
                legacy: comparison.legacy.value,
                legacy_method: comparison.legacy.method.clone(),
                nft: comparison.nft.value,
                nft_method: comparison.nft.method.clone(),
            };
            let points_to = comparison.verdict.mode();
            for (mode, reading) in [(Mode::Legacy, &comparison.legacy), (Mode::Nft, &comparison.nft)] {
                collector.add(Evidence {
                    source: Source::RuleCounts,
                    location: format!("{mode} rules (ipv4 + ipv6)"),
                    value: describe_bounds(reading.value),
                    method: reading.method.clone(),
                    points_to: if points_to == Some(mode) { Some(mode) } else { None },
                });
            }
            match comparison.verdict {
                CountVerdict::Tie => {}
                verdict => {
                    let mode = verdict.mode().expect("not a tie");
                    let (more, fewer) = match mode {
                        Mode::Legacy => (comparison.legacy.value, comparison.nft.value),
                        Mode::Nft => (comparison.nft.value, comparison.legacy.value),
                    };
                    collector.decide(
                        mode,
                        Source::RuleCounts,
                        format!(
                            "{mode} holds more rules ({}) than {} ({})",
                            describe_bounds(more),
                            mode.other(),
                            describe_bounds(fewer)
                        ),
                    );
                }
            }
            Some(counts)
        }
        Err(why) => {
            collector.add(Evidence {
                source: Source::RuleCounts,
                location: "rule counts".into(),
                value: format!("unknown: {why}"),
                method: "none".into(),
                points_to: None,
            });
            None
        }
    }
}

fn record_hints(collector: &mut Collector, mode: Mode, reading: Result<(&Vec<HintChain>, &String), &String>) {
    match reading {
        Ok((hints, method)) => {
            if hints.is_empty() {
                collector.add(Evidence {
                    source: Source::HintChain,
                    location: format!("{mode} mangle chains {}", crate::kernel::HINT_CHAINS.join(", ")),
                    value: "absent (ipv4, ipv6)".into(),
                    method: method.clone(),
                    points_to: None,
                });
            }
            for hint in hints {
                collector.add(Evidence {
                    source: Source::HintChain,
                    location: hint_location(mode, hint),
                    value: "present".into(),
                    method: method.clone(),
                    points_to: Some(mode),
                });
            }
        }
        Err(why) => collector.add(Evidence {
            source: Source::HintChain,
            location: format!("{mode} mangle hint chains"),
            value: format!("unknown: {why}"),
            method: "none".into(),
            points_to: None,
        }),
    }
}

fn describe_bounds(bounds: RuleBounds) -> String {
    if bounds.is_exact() {
        format!("{}", bounds.low)
    } else if bounds.high == u64::MAX {
        format!("at least {}", bounds.low)
    } else {
        format!("between {} and {}", bounds.low, bounds.high)
    }
}

fn read_xtables_lock(collector: &mut Collector) {
    let lock = xtables_lock::inspect();
    let hints_legacy = lock.hints_legacy();
    collector.add(Evidence {
        source: Source::XtablesLock,
        location: lock.path.display().to_string(),
        value: lock.describe(),
        method: "stat and /proc/locks".into(),
        points_to: hints_legacy.then_some(Mode::Legacy),
    });
    if hints_legacy {
        collector.decide(
            Mode::Legacy,
            Source::XtablesLock,
            format!("{} is {} (a weak hint)", lock.path.display(), lock.describe()),
        );
    }
}
