//! The decision, made afresh on every call: which backend this call goes to,
//! which source decided, and every piece of evidence read on the way.
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

use crate::command::WrappedCommand;
use crate::family::Family;
use crate::host_link::{self, DEFAULT_HOST_ROOT};
use crate::kernel::legacy::{self, LegacyFamily, TableContents};
use crate::kernel::modules::{self, Presence};
use crate::kernel::{CountVerdict, HintChain, KernelReader, RuleBounds, HINT_CHAINS};
use crate::mode::{Mode, OVERRIDE_VAR};
use crate::settings::{self, InvalidSetting, Origin};
use crate::xtables_lock;
use std::time::{Duration, Instant};

/// Both backends holding at least this many rules is a mixed state.
pub const MIXED_STATE_RULES: u64 = 10;

/// Stale legacy tables up to this size are walked for their exact rule
/// count on every call; larger ones only get GET_INFO's upper bound there.
const WALK_STALE_TABLES_UP_TO_BYTES: u32 = 16 * 1024;

/// How much to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// Stop at the first source that decides, and skip the reads that could
    /// only add a warning (a wrapped call whose warnings nobody will see).
    Decide,
    /// Stop at the first source that decides, then read what could add a
    /// warning about that decision (a wrapped call whose warnings go to
    /// stderr or are due in the warnings record).
    DecideAndWarn,
    /// Read every source, with exact counts (the `detect` report).
    Everything,
}

impl Depth {
    /// Whether reading stops at the first source that decides.
    fn stops_early(self) -> bool {
        self != Depth::Everything
    }

    /// Whether the reads that could only add a warning are made.
    fn warns(self) -> bool {
        self != Depth::Decide
    }
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
    /// Whether the running kernel has each backend: never decides alone.
    BackendPresence,
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
            Source::BackendPresence => "backend-presence",
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
        if self.decided_by == Source::Default {
            let unknown: Vec<&str> = self
                .evidence
                .iter()
                .filter(|e| e.value.starts_with("unknown"))
                .map(|e| e.location.as_str())
                .collect();
            if !unknown.is_empty() {
                warnings.push(format!(
                    "{} uses {} only by default, and part of the kernel's state is unknown ({}); see iptables-wrapper detect",
                    self.command,
                    self.mode,
                    unknown.join("; ")
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
        self.depth.stops_early() && self.decided.is_some()
    }
}

/// Decides the mode for `command`. Fails only on invalid settings.
pub fn decide(command: &WrappedCommand, depth: Depth) -> Result<Decision, InvalidSetting> {
    if let Some(invalid) = &settings::current().invalid {
        return Err(invalid.clone());
    }
    let started = (depth == Depth::Everything || log::log_enabled!(log::Level::Debug)).then(Instant::now);
    let mut collector = Collector {
        depth,
        evidence: Vec::new(),
        decided: None,
    };
    let mut rule_counts = None;
    let mut kernel = KernelReader::new();

    read_override(&mut collector);
    if !collector.done() {
        read_host_link(&mut collector, command);
    }
    if !collector.done() {
        rule_counts = read_kernel(&mut collector, &mut kernel);
    }
    if !collector.done() {
        read_xtables_lock(&mut collector, rule_counts.as_ref());
    }
    let lacking = read_backend_presence(&mut collector, &mut kernel, command.family);
    let (mode, decided_by, reason) = collector.decided.take().unwrap_or_else(|| default_mode(&lacking));
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

/// nft, unless nft is lacking (the kernel lacks nf_tables, or this process
/// cannot use it) and legacy is not.
fn default_mode(lacking: &[(Mode, String)]) -> (Mode, Source, String) {
    let lacks = |mode| lacking.iter().find(|(m, _)| *m == mode).map(|(_, how)| how);
    match (lacks(Mode::Nft), lacks(Mode::Legacy)) {
        (Some(how), None) => (
            Mode::Legacy,
            Source::Default,
            format!("no evidence for either backend, and nft cannot serve: {how}; legacy is the only backend left"),
        ),
        _ => (
            Mode::Nft,
            Source::Default,
            "no evidence for either backend: nft is the default".to_string(),
        ),
    }
}

/// Which backends the running kernel has, and which this process is known
/// to be unable to use ([`KernelReader::unusable`]): all of them for
/// `detect`; on a call only what can change the outcome or a warning: with
/// nothing decided yet, nft (the default must not be a backend the kernel
/// lacks or this process cannot use), and legacy only if nft is lacking;
/// when the override or the host link decided and warnings are wanted, the
/// backend it picked (to warn). Hint chains, counts and the lock need state
/// read from the backend they pick, which a missing backend has none of and
/// an unusable one cannot give (its count is unknown, and so counts and the
/// lock decide nothing), so they cannot pick either. Returns the backends
/// lacking.
fn read_backend_presence(collector: &mut Collector, kernel: &mut KernelReader, family: Family) -> Vec<(Mode, String)> {
    let wanted: Vec<Mode> = match (collector.depth, &collector.decided) {
        (Depth::Everything, _) | (_, None) => vec![Mode::Nft, Mode::Legacy],
        (depth, Some((mode, Source::Override | Source::HostLink, _))) if depth.warns() => vec![*mode],
        (_, Some(_)) => Vec::new(),
    };
    let mut lacking = Vec::new();
    for mode in wanted {
        let default_needs_it = mode == Mode::Nft || !lacking.is_empty();
        if collector.depth.stops_early() && collector.decided.is_none() && !default_needs_it {
            continue;
        }
        let families: &[Family] = match (mode, collector.depth) {
            (Mode::Nft, _) => &[family],
            (Mode::Legacy, Depth::Everything) => &Family::BOTH,
            (Mode::Legacy, _) => &[family],
        };
        for &each in families {
            let (module, presence) = match mode {
                Mode::Nft => (modules::NF_TABLES, kernel.nf_tables_presence().clone()),
                Mode::Legacy => (modules::x_tables_module(each), modules::x_tables(each)),
            };
            let presence = presence.or_missing(module);
            let backend = match mode {
                Mode::Nft => "nft".to_string(),
                Mode::Legacy => format!("legacy {}", each.label()),
            };
            if let Presence::Missing(how) = &presence {
                if each == family {
                    lacking.push((mode, format!("the running kernel lacks it ({module}: {how})")));
                }
            }
            collector.add(Evidence {
                source: Source::BackendPresence,
                location: format!("{module} ({backend}) in the running kernel"),
                value: presence.describe(),
                method: "sysfs, /proc and module lists; nothing asked".into(),
                points_to: None,
            });
            // Only a backend in the kernel is asked (asking could load it).
            if !matches!(presence, Presence::Present(_) | Presence::Askable(_)) {
                continue;
            }
            if let Some(why) = kernel.unusable(mode, each) {
                if each == family {
                    lacking.push((mode, format!("this process cannot use it ({why})")));
                }
                collector.add(Evidence {
                    source: Source::BackendPresence,
                    location: format!("{backend} from this process"),
                    value: format!("cannot be used: {why}"),
                    method: "the wrapper's own socket, then the save tool".into(),
                    points_to: None,
                });
            }
        }
    }
    lacking
}

fn read_override(collector: &mut Collector) {
    let settings = settings::current();
    let Some(mode) = settings.mode else { return };
    let setting = settings.get(OVERRIDE_VAR);
    let value = setting.value.as_deref().unwrap_or_default().to_string_lossy();
    let (location, method, reason) = match &setting.origin {
        Origin::File { path, .. } => (
            path.display().to_string(),
            "settings file",
            format!("pinned by the settings file {}: {value}", setting.origin),
        ),
        _ => (
            OVERRIDE_VAR.to_string(),
            "environment",
            format!("overridden by environment variable {OVERRIDE_VAR}={value}"),
        ),
    };
    collector.add(Evidence {
        source: Source::Override,
        location,
        value: value.to_string(),
        method: method.into(),
        points_to: Some(mode),
    });
    collector.decide(mode, Source::Override, reason);
}

fn read_host_link(collector: &mut Collector, command: &WrappedCommand) {
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
            value,
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
            value: "no host link (host root not mounted?)".into(),
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
                    value: format!("unknown: {why}"),
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
            Err(e) => {
                collector.add(Evidence {
                    source: Source::RuleCounts,
                    location,
                    value: format!(
                        "{listed} exist; whether they hold rules is unknown ({e}): stale legacy rules may still apply; {STALE_COMMAND_HINT}"
                    ),
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
        let (value, points_to) = if holding.is_empty() {
            (
                format!("{listed} exist, without rules or DROP policies: nothing stale"),
                None,
            )
        } else {
            (
                format!(
                    "{} (stale legacy rules may still apply; {STALE_COMMAND_HINT})",
                    holding.join(", ")
                ),
                Some(Mode::Legacy),
            )
        };
        collector.add(Evidence {
            source: Source::RuleCounts,
            location,
            value,
            method,
            points_to,
        });
    }
}

/// Where the stale-rules warning sends the operator.
pub const STALE_COMMAND_HINT: &str =
    "`iptables-wrapper stale` shows them, `iptables-wrapper stale --remove` removes them";

/// "filter holds 3 rules, 1 user chain, policy FORWARD DROP", or None for a
/// table that changes no packet's fate (no rule, every policy ACCEPT; empty
/// user chains do not count: `iptables-wrapper stale` shows those).
fn describe_state(table: &str, contents: &TableContents) -> Option<String> {
    if !contents.applies_to_packets() {
        return None;
    }
    let mut parts = vec![rules(contents.rules())];
    let user_chains = contents.user_chains().count();
    if user_chains > 0 {
        parts.push(if user_chains == 1 {
            "1 user chain".to_string()
        } else {
            format!("{user_chains} user chains")
        });
    }
    for chain in contents.non_accept_policies() {
        let policy = chain.policy.map_or("?", |policy| policy.name());
        parts.push(format!("policy {} {policy}", chain.name));
    }
    Some(format!("{table} holds {}", parts.join(", ")))
}

/// "1 rule", "3 rules".
fn rules(count: u64) -> String {
    if count == 1 {
        "1 rule".to_string()
    } else {
        format!("{count} rules")
    }
}

fn hint_location(mode: Mode, hint: &HintChain) -> String {
    format!("{} {} mangle chain {}", mode, hint.family.label(), hint.chain)
}

/// Reads the kernel's state; returns the rule counts when they were read.
fn read_kernel(collector: &mut Collector, kernel: &mut KernelReader) -> Option<RuleCounts> {
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
            format!("hint chain {} found in nft ({})", hint.chain, hint.family.label()),
        );
        if collector.done() {
            return None;
        }
    }

    let legacy_hints = kernel.legacy_hint_chains(collector.depth.stops_early());
    record_hints(
        collector,
        Mode::Legacy,
        legacy_hints.as_ref().map(|r| (&r.value, &r.method)),
    );
    if let Some(hint) = legacy_hints.as_ref().ok().and_then(|r| r.value.first()) {
        let in_nft = if nft_lookups.is_ok() {
            "not in nft"
        } else {
            "nft's could not be read"
        };
        collector.decide(
            Mode::Legacy,
            Source::HintChain,
            format!(
                "hint chain {} found in legacy ({}), {in_nft}",
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

    // No legacy table at all: legacy holds no rule, so no count can favour
    // it, and the lock file has no legacy table to stand beside. Whatever nft
    // holds, the answer is nft, so a wrapped call skips counting nft's rules
    // (a netlink round trip of lookups). `detect` still counts both.
    // Only where nf_tables is known to be there (its lookups answered): where
    // it may be lacking, the default below decides with that in mind.
    if collector.depth.stops_early()
        && nft_lookups.is_ok()
        && matches!(kernel.nf_tables_presence(), Presence::Present(_) | Presence::Askable(_))
        && kernel.legacy_has_no_tables()
    {
        collector.decide(
            Mode::Nft,
            Source::RuleCounts,
            "no legacy table exists, so legacy holds no rules and nft holds at least as many".into(),
        );
        return None;
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
                    location: format!("{mode} mangle chains {}", HINT_CHAINS.join(", ")),
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

/// The lock file as a tie-breaker: evidence only as a regular file that is
/// 0600 or held, and deciding only when legacy holds state here too (a rule
/// or a DROP policy: go-iptables makes and locks the file on
/// nft hosts as well, and a read-only `iptables-legacy -L` leaves empty
/// tables) and the rule counts were known on both sides (a count left
/// unknown is no tie to break).
fn read_xtables_lock(collector: &mut Collector, counts: Option<&RuleCounts>) {
    let lock = xtables_lock::inspect();
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
            legacy_traces()
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
    collector.add(Evidence {
        source: Source::XtablesLock,
        location: lock.path.display().to_string(),
        value,
        method: "stat, /proc/locks, /proc/net/ip*_tables_names, getsockopt GET_INFO, GET_ENTRIES".into(),
        points_to: traces.is_some().then_some(Mode::Legacy),
    });
    if let Some(tables) = traces {
        collector.decide(
            Mode::Legacy,
            Source::XtablesLock,
            format!(
                "{} is {}, and legacy holds state ({}): a tie-breaker",
                lock.path.display(),
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
fn legacy_traces() -> Result<Vec<String>, String> {
    let mut traces = Vec::new();
    for family in Family::BOTH {
        let names = legacy::listed_tables(family)?.unwrap_or_default();
        let tables = LegacyFamily::open_listed(family, names).map_err(|e| e.to_string())?;
        for table in &tables.tables {
            let contents = tables.contents(table).map_err(|e| e.to_string())?;
            if let Some(state) = describe_state(&table.name, &contents) {
                traces.push(format!("{} {state}", family.label()));
            }
        }
    }
    Ok(traces)
}
