//! Reads the kernel's firewall state without side effects, and only as much
//! of it as a question needs: legacy x_tables through getsockopt, nf_tables
//! through netlink, each falling back to its save tool when the kernel
//! refuses the direct query. A backend is only asked once [`modules`] shows
//! it is in the kernel (asking could load it); a backend whose state cannot
//! be read is unknown, never empty, and one whose refusal proves that its
//! own backend program would be refused too is also unusable from this
//! process ([`KernelReader::unusable`]).

pub mod count_cache;
pub mod legacy;
pub mod modules;
pub mod nft;
pub mod procfs;
pub mod save_tools;

use crate::family::Family;
use crate::mode::Mode;
use count_cache::Namespace;
use legacy::LegacyFamily;
use modules::Presence;
use nft::{NftObject, NftSocket, RuleCount, RulesetKeptChanging};
use save_tools::SavedRules;

/// The tables iptables-nft and iptables-legacy use; only these are counted.
pub const IPTABLES_TABLES: [&str; 5] = ["raw", "mangle", "filter", "security", "nat"];

/// The built-in chains of each iptables table, as iptables-nft creates them.
pub const BUILTIN_CHAINS: [(&str, &[&str]); 5] = [
    ("raw", &["PREROUTING", "OUTPUT"]),
    ("mangle", &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]),
    ("filter", &["INPUT", "FORWARD", "OUTPUT"]),
    ("security", &["INPUT", "FORWARD", "OUTPUT"]),
    ("nat", &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"]),
];

/// Hint chains, created in the mangle table (IPv4 and IPv6) with the host's
/// iptables: kubelet's two and kube-proxy's canary. All rank alike.
pub const HINT_CHAINS: [&str; 3] = ["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY", "KUBE-PROXY-CANARY"];

/// The nftables table kube-proxy keeps its rules in when in nftables mode.
pub const KUBE_PROXY_TABLE: &str = "kube-proxy";

/// A value and how it was obtained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading<T> {
    pub value: T,
    pub method: String,
}

/// A rule count known to lie within `low..=high`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleBounds {
    pub low: u64,
    pub high: u64,
}

impl RuleBounds {
    pub fn exact(rules: u64) -> RuleBounds {
        RuleBounds {
            low: rules,
            high: rules,
        }
    }

    pub fn is_exact(&self) -> bool {
        self.low == self.high
    }
}

/// A hint chain found in one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HintChain {
    pub family: Family,
    pub chain: &'static str,
}

/// What the nf_tables point lookups found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NftLookups {
    pub hint_chains: Vec<HintChain>,
    /// Families with a `kube-proxy` table; `None` when it could not be asked.
    pub kube_proxy_tables: Option<Vec<Family>>,
}

/// How the rule counts compare, once known well enough.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountVerdict {
    /// Legacy holds strictly more rules.
    Legacy,
    /// nft holds strictly more rules.
    Nft,
    /// Both hold the same number: no reason to pick either.
    Tie,
}

impl CountVerdict {
    pub fn mode(self) -> Option<Mode> {
        match self {
            CountVerdict::Legacy => Some(Mode::Legacy),
            CountVerdict::Nft => Some(Mode::Nft),
            CountVerdict::Tie => None,
        }
    }
}

/// Both backends' counts (IPv4 and IPv6 together) and their verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountComparison {
    pub legacy: Reading<RuleBounds>,
    pub nft: Reading<RuleBounds>,
    pub verdict: CountVerdict,
}

/// The verdict the bounds already settle, if any.
pub fn verdict_from_bounds(legacy: RuleBounds, nft: RuleBounds) -> Option<CountVerdict> {
    if legacy.low > nft.high {
        Some(CountVerdict::Legacy)
    } else if legacy.high < nft.low {
        Some(CountVerdict::Nft)
    } else if legacy.is_exact() && nft.is_exact() && legacy.low == nft.low {
        Some(CountVerdict::Tie)
    } else {
        None
    }
}

enum NftSource {
    /// nf_tables is not in the kernel, so it holds nothing (and asking could
    /// load it).
    NotLoaded,
    Netlink(NftSocket),
    Saved(Vec<(Family, SavedRules)>),
    Unreadable(String),
}

enum LegacySource {
    Sockopt {
        tables: LegacyFamily,
        exact: Vec<Option<u64>>,
    },
    Saved(SavedRules),
    Unreadable(String),
}

/// Lazily opened readers of both backends' state in this network namespace.
pub struct KernelReader {
    nf_tables: Option<Presence>,
    nft: Option<NftSource>,
    legacy: [Option<LegacySource>; 2],
    /// Why this process cannot use nft, when that is known (see
    /// [`KernelReader::unusable`]).
    nft_unusable: Option<String>,
    /// Likewise for legacy, per family.
    legacy_unusable: [Option<String>; 2],
}

impl Default for KernelReader {
    fn default() -> Self {
        KernelReader::new()
    }
}

impl KernelReader {
    pub fn new() -> KernelReader {
        KernelReader {
            nf_tables: None,
            nft: None,
            legacy: [None, None],
            nft_unusable: None,
            legacy_unusable: [None, None],
        }
    }

    /// Why this process is known to be unable to use `mode`'s backend for
    /// `family`, if it is: the kernel refused the wrapper's own socket for
    /// a reason that no capability explains, so a filter this process runs
    /// under (seccomp, which every program it execs inherits), and the
    /// backend's save tool, run as the backend would be, failed as well.
    /// A netlink socket needs no capability, so EPERM on opening one is such
    /// a refusal; a raw IP socket is refused (EPERM) without `CAP_NET_RAW`,
    /// which a backend with file capabilities has where the wrapper does not
    /// (see docs/nonroot.md, "Non-root images"), so there it counts only when
    /// this process holds `CAP_NET_RAW` and `CAP_NET_ADMIN`. EACCES (an LSM,
    /// whose policy may differ for the backend after exec) and a missing
    /// protocol (qemu-user refuses `NETLINK_NETFILTER`, yet runs native
    /// backends) are no such proof. Reads the backend's source if it was
    /// not read yet (opening its socket; for legacy, its table list and
    /// `GET_INFO`).
    pub fn unusable(&mut self, mode: Mode, family: Family) -> Option<String> {
        match mode {
            Mode::Nft => {
                self.nft_source();
                self.nft_unusable.clone()
            }
            Mode::Legacy => {
                self.legacy_source(family);
                self.legacy_unusable[family_index(family)].clone()
            }
        }
    }

    /// Whether nf_tables is in the kernel, as far as files tell (read once).
    pub fn nf_tables_presence(&mut self) -> &Presence {
        self.nf_tables.get_or_insert_with(modules::nf_tables)
    }

    /// Whether both families' legacy table lists were read and are empty:
    /// legacy then holds no rule and leaves no trace (no table for the lock
    /// file to stand beside).
    pub fn legacy_has_no_tables(&mut self) -> bool {
        Family::BOTH.into_iter().all(|family| {
            matches!(self.legacy_source(family), LegacySource::Sockopt { tables, .. } if tables.tables.is_empty())
        })
    }

    /// The hint chains and kube-proxy's tables in nf_tables, all in one
    /// round trip.
    pub fn nft_lookups(&mut self) -> Result<Reading<NftLookups>, String> {
        let mut objects = Vec::new();
        for family in Family::BOTH {
            for chain in HINT_CHAINS {
                objects.push(NftObject {
                    family,
                    table: "mangle",
                    chain: Some(chain),
                });
            }
            objects.push(NftObject {
                family,
                table: KUBE_PROXY_TABLE,
                chain: None,
            });
        }
        if let NftSource::Netlink(socket) = self.nft_source() {
            match socket.exists(&objects) {
                Ok(found) => {
                    let mut hint_chains = Vec::new();
                    let mut kube_proxy_tables = Vec::new();
                    for (object, _) in objects.iter().zip(found).filter(|(_, found)| *found) {
                        match object.chain {
                            Some(chain) => hint_chains.push(HintChain {
                                family: object.family,
                                chain,
                            }),
                            None => kube_proxy_tables.push(object.family),
                        }
                    }
                    let lookups = NftLookups {
                        hint_chains,
                        kube_proxy_tables: Some(kube_proxy_tables),
                    };
                    return Ok(Reading {
                        value: lookups,
                        method: "netlink GETCHAIN/GETTABLE point lookups".into(),
                    });
                }
                Err(e) => self.fall_back_nft(e),
            }
        }
        match self.nft_source() {
            NftSource::NotLoaded => Ok(Reading {
                value: NftLookups {
                    kube_proxy_tables: Some(Vec::new()),
                    ..Default::default()
                },
                method: "nf_tables not loaded".into(),
            }),
            NftSource::Saved(saved) => Ok(Reading {
                value: NftLookups {
                    hint_chains: hints_in(saved),
                    kube_proxy_tables: None,
                },
                method: "iptables-nft-save output".into(),
            }),
            NftSource::Unreadable(why) => Err(why.clone()),
            NftSource::Netlink(_) => unreachable!("netlink failures fall back"),
        }
    }

    /// The hint chains in legacy mangle tables that already exist; with
    /// `first_family_found`, the other family is not read once one has some.
    pub fn legacy_hint_chains(&mut self, first_family_found: bool) -> Result<Reading<Vec<HintChain>>, String> {
        let mut found = Vec::new();
        let mut methods = Vec::new();
        for family in Family::BOTH {
            if first_family_found && !found.is_empty() {
                break;
            }
            let source = self.legacy_source(family);
            let chains = match source {
                LegacySource::Sockopt { tables, exact } => match tables.table("mangle").cloned() {
                    None => Ok(Vec::new()),
                    Some(mangle) => match tables.entries(&mangle) {
                        Ok(entries) => {
                            let index = tables.tables.iter().position(|t| t.name == "mangle").expect("listed");
                            exact[index] = Some(entries.rules);
                            Ok(HINT_CHAINS
                                .into_iter()
                                .filter(|h| entries.user_chains.iter().any(|c| c == h))
                                .collect())
                        }
                        Err(e) => Err(e),
                    },
                },
                LegacySource::Saved(saved) => Ok(saved.hint_chains.clone()),
                LegacySource::Unreadable(why) => return Err(why.clone()),
            };
            let chains = match chains {
                Ok(chains) => chains,
                Err(e) => {
                    self.fall_back_legacy(family, e);
                    return self.legacy_hint_chains(first_family_found);
                }
            };
            methods.push((family, self.legacy_method(family, "getsockopt GET_ENTRIES of mangle")));
            found.extend(chains.into_iter().map(|chain| HintChain { family, chain }));
        }
        Ok(Reading {
            value: found,
            method: by_family(methods),
        })
    }

    /// Compares the backends' rule counts, IPv4 and IPv6 together. With
    /// `exact` (detect) both counts are read in full, and the nft count
    /// remembered for this generation is only compared with the fresh one;
    /// otherwise only as far as the verdict needs: cheap bounds first, then
    /// the nft count remembered for this generation (unless the bounds
    /// contradict it), then the exact legacy count, then the nft rules until
    /// they pass it (remembered for the next call).
    pub fn compare_rule_counts(&mut self, exact: bool) -> Result<CountComparison, String> {
        let mut legacy = self.legacy_bounds("getsockopt GET_INFO entry counts")?;
        let mut nft = self.nft_bounds()?;
        let settled = |legacy: &Reading<RuleBounds>, nft: &Reading<RuleBounds>| {
            if exact {
                None
            } else {
                verdict_from_bounds(legacy.value, nft.value)
            }
        };
        if let Some(verdict) = settled(&legacy, &nft) {
            return Ok(CountComparison { legacy, nft, verdict });
        }
        let cached = self.nft_cached();
        if let Some((_, cached)) = cached.as_ref().filter(|_| !exact) {
            if cached.value.high < nft.value.low {
                // Only a forged or damaged file can say so: counted again.
                log::debug!(
                    "count cache says {}..={} nft rules, below the {} the built-in chains hold: not used",
                    cached.value.low,
                    cached.value.high,
                    nft.value.low
                );
            } else {
                // Both belong to this generation; the lookups' figure may be
                // the sharper lower bound.
                let low = cached.value.low.max(nft.value.low);
                nft = cached.clone();
                nft.value.low = low;
                if let Some(verdict) = settled(&legacy, &nft) {
                    return Ok(CountComparison { legacy, nft, verdict });
                }
            }
        }
        if !legacy.value.is_exact() {
            legacy = self.legacy_exact()?;
            if let Some(verdict) = settled(&legacy, &nft) {
                return Ok(CountComparison { legacy, nft, verdict });
            }
        }
        if !nft.value.is_exact() {
            let stop_above = if exact { None } else { Some(legacy.value.low) };
            let generation;
            (nft, generation) = self.nft_count(stop_above, nft.value)?;
            if let Some((cached_generation, cached)) = cached.filter(|_| exact) {
                if generation == Some(cached_generation) {
                    nft.method = with_cache_check(nft.method, nft.value, &cached);
                }
            }
        }
        let verdict = verdict_from_bounds(legacy.value, nft.value)
            .expect("an exact legacy count and an nft count read past it always settle");
        Ok(CountComparison { legacy, nft, verdict })
    }

    /// Legacy counts as far as they are known: exact for walked tables,
    /// `0..=upper bound` for the others.
    fn legacy_bounds(&mut self, sockopt_method: &str) -> Result<Reading<RuleBounds>, String> {
        let mut total = RuleBounds::exact(0);
        let mut methods = Vec::new();
        for family in Family::BOTH {
            let bounds = match self.legacy_source(family) {
                LegacySource::Sockopt { tables, exact } => {
                    tables
                        .tables
                        .iter()
                        .zip(exact.iter())
                        .fold(RuleBounds::exact(0), |sum, (table, exact)| {
                            let table = exact.map_or(
                                RuleBounds {
                                    low: 0,
                                    high: table.rule_upper_bound(),
                                },
                                RuleBounds::exact,
                            );
                            RuleBounds {
                                low: sum.low + table.low,
                                high: sum.high + table.high,
                            }
                        })
                }
                LegacySource::Saved(saved) => RuleBounds::exact(saved.rules),
                LegacySource::Unreadable(why) => return Err(why.clone()),
            };
            methods.push((family, self.legacy_method(family, sockopt_method)));
            total = RuleBounds {
                low: total.low + bounds.low,
                high: total.high + bounds.high,
            };
        }
        Ok(Reading {
            value: total,
            method: by_family(methods),
        })
    }

    fn legacy_exact(&mut self) -> Result<Reading<RuleBounds>, String> {
        for family in Family::BOTH {
            if let LegacySource::Sockopt { tables, exact } = self.legacy_source(family) {
                let mut failure = None;
                for (table, exact) in tables.tables.iter().zip(exact.iter_mut()).filter(|(_, e)| e.is_none()) {
                    match tables.entries(table) {
                        Ok(entries) => *exact = Some(entries.rules),
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
                if let Some(e) = failure {
                    self.fall_back_legacy(family, e);
                }
            }
        }
        self.legacy_bounds("getsockopt GET_ENTRIES walk")
    }

    /// The nft rules' lower bound (rules in built-in chains); no upper bound.
    fn nft_bounds(&mut self) -> Result<Reading<RuleBounds>, String> {
        if let NftSource::Netlink(socket) = self.nft_source() {
            match socket.builtin_chain_rules(&Family::BOTH) {
                Ok(low) => {
                    return Ok(Reading {
                        value: RuleBounds { low, high: u64::MAX },
                        method: "netlink GETCHAIN lookups of the built-in chains".into(),
                    })
                }
                Err(e) => self.fall_back_nft(e),
            }
        }
        self.nft_settled_count()
    }

    /// The nft count remembered, and confirmed by a second count, for the
    /// current generation of this network namespace, if any (one GETGEN
    /// round trip and a small file read).
    fn nft_cached(&mut self) -> Option<(u32, Reading<RuleBounds>)> {
        let NftSource::Netlink(socket) = self.nft_source() else {
            return None;
        };
        let generation = socket.generation().ok()?;
        let rules = count_cache::lookup(&namespace_of(socket)?, generation)?;
        Some((
            generation,
            Reading {
                value: rules,
                method: format!("count cache, generation {generation}, counted by netlink GETRULE dumps"),
            },
        ))
    }

    /// Counts the nft rules (GETRULE dumps of one generation), stopping past
    /// `stop_above`, and remembers the count for that generation; with the
    /// generation it belongs to, when one does.
    fn nft_count(
        &mut self,
        stop_above: Option<u64>,
        bounds: RuleBounds,
    ) -> Result<(Reading<RuleBounds>, Option<u32>), String> {
        if let NftSource::Netlink(socket) = self.nft_source() {
            match socket.count_rules(&Family::BOTH, stop_above) {
                Ok(count) => {
                    let reading = counted(count, bounds);
                    // A count read while the generation moved belongs to none.
                    if let (Some(generation), Some(ns)) = (count.generation, namespace_of(socket)) {
                        count_cache::store(&ns, generation, reading.value);
                    }
                    return Ok((reading, count.generation));
                }
                Err(e) if RulesetKeptChanging::is(&e) => return Err(e.to_string()),
                Err(e) => self.fall_back_nft(e),
            }
        }
        self.nft_settled_count().map(|reading| (reading, None))
    }

    /// The nft count when it does not come from netlink: nothing, or a save.
    fn nft_settled_count(&mut self) -> Result<Reading<RuleBounds>, String> {
        match self.nft_source() {
            NftSource::NotLoaded => Ok(Reading {
                value: RuleBounds::exact(0),
                method: "nf_tables not loaded".into(),
            }),
            NftSource::Saved(saved) => Ok(Reading {
                value: RuleBounds::exact(saved.iter().map(|(_, s)| s.rules).sum()),
                method: "iptables-nft-save output".into(),
            }),
            NftSource::Unreadable(why) => Err(why.clone()),
            NftSource::Netlink(_) => unreachable!("netlink failures fall back"),
        }
    }

    fn nft_source(&mut self) -> &mut NftSource {
        if self.nft.is_none() {
            let source = match self.nf_tables_presence() {
                Presence::Present(_) | Presence::Askable(_) => match NftSocket::open() {
                    Ok(socket) => NftSource::Netlink(socket),
                    // Opening sends nothing and needs no capability.
                    Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                        let source = saved_nft(e);
                        if matches!(source, NftSource::Unreadable(_)) {
                            self.nft_unusable = Some(
                                "the kernel refused this process a NETLINK_NETFILTER socket (EPERM: a seccomp filter, which the backend runs under too), and iptables-nft-save failed as well".into(),
                            );
                        }
                        source
                    }
                    Err(e) => saved_nft(e),
                },
                Presence::NotLoaded(how) | Presence::Missing(how) => {
                    log::debug!("nf_tables is not in the kernel ({how}): it holds nothing, and is not asked");
                    NftSource::NotLoaded
                }
                Presence::Unknown(why) => NftSource::Unreadable(format!(
                    "whether nf_tables is in the kernel is unknown, and asking could load it: {why}"
                )),
            };
            self.nft = Some(source);
        }
        self.nft.as_mut().expect("set above")
    }

    fn fall_back_nft(&mut self, error: std::io::Error) {
        self.nft = Some(saved_nft(error));
    }

    fn legacy_source(&mut self, family: Family) -> &mut LegacySource {
        let index = family_index(family);
        if self.legacy[index].is_none() {
            let source = match legacy::listed_tables(family) {
                // The save tool reads the same list, and would print nothing.
                Err(why) => LegacySource::Unreadable(format!("legacy {}: {why}", family.label())),
                Ok(names) => match LegacyFamily::open_listed(family, names.unwrap_or_default()) {
                    Ok(tables) => {
                        let exact = vec![None; tables.tables.len()];
                        LegacySource::Sockopt { tables, exact }
                    }
                    // With both capabilities, EPERM is no capability check.
                    Err(e) if e.raw_os_error() == Some(libc::EPERM) && holds_net_raw_and_admin() => {
                        let source = saved_legacy(family, e);
                        if matches!(source, LegacySource::Unreadable(_)) {
                            self.legacy_unusable[index] = Some(format!(
                                "the kernel refused this process, which holds CAP_NET_RAW and CAP_NET_ADMIN, its raw socket or getsockopt (EPERM: a seccomp filter, which the backend runs under too), and {}-legacy-save failed as well",
                                family.program()
                            ));
                        }
                        source
                    }
                    Err(e) => saved_legacy(family, e),
                },
            };
            self.legacy[index] = Some(source);
        }
        self.legacy[index].as_mut().expect("set above")
    }

    fn fall_back_legacy(&mut self, family: Family, error: std::io::Error) {
        self.legacy[family_index(family)] = Some(saved_legacy(family, error));
    }

    fn legacy_method(&mut self, family: Family, sockopt_method: &str) -> String {
        match self.legacy_source(family) {
            LegacySource::Sockopt { tables, .. } if tables.tables.is_empty() => "no legacy table".to_string(),
            LegacySource::Sockopt { .. } => sockopt_method.to_string(),
            _ => format!("{}-legacy-save output", family.program()),
        }
    }
}

/// The reading of a dump's count; one that stopped early keeps `bounds`'
/// upper bound.
fn counted(count: RuleCount, bounds: RuleBounds) -> Reading<RuleBounds> {
    let of = match count.generation {
        Some(generation) => format!("generation {generation}"),
        None => "read twice alike while other commits moved the generation".to_string(),
    };
    if count.complete {
        Reading {
            value: RuleBounds::exact(count.rules),
            method: format!("netlink GETRULE dumps, {of}"),
        }
    } else {
        Reading {
            value: RuleBounds {
                low: count.rules,
                high: bounds.high.max(count.rules),
            },
            method: format!("netlink GETRULE dumps, {of}, stopped after {} rules", count.rules),
        }
    }
}

/// `method`, followed by whether the count cache's figure for the same
/// generation agrees with the fresh count `rules`.
fn with_cache_check(method: String, rules: RuleBounds, cached: &Reading<RuleBounds>) -> String {
    let agrees = cached.value.low <= rules.high && rules.low <= cached.value.high;
    let said = match cached.value {
        b if b.is_exact() => b.low.to_string(),
        RuleBounds { low, high: u64::MAX } => format!("at least {low}"),
        RuleBounds { low, high } => format!("{low} to {high}"),
    };
    if agrees {
        format!("{method}; the count cache agrees")
    } else {
        format!("{method}; the count cache said {said}: disagrees, replaced")
    }
}

/// The cache's key for the socket's namespace; None where the kernel has no
/// namespace cookie (before Linux 5.14) or there is no boot id.
fn namespace_of(socket: &NftSocket) -> Option<Namespace> {
    match socket.netns_cookie() {
        Ok(cookie) => Namespace::with_cookie(cookie),
        Err(e) => {
            log::debug!("no network namespace cookie ({e}): counts are not cached");
            None
        }
    }
}

/// Whether this process holds `CAP_NET_RAW` and `CAP_NET_ADMIN` in its
/// effective set (`capget`); false when that cannot be read.
fn holds_net_raw_and_admin() -> bool {
    /// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words of each set.
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_NET_RAW: u32 = 13;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget writes two `Data` for version 3 into `data`.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header as *mut Header, data.as_mut_ptr()) };
    let wanted = (1 << CAP_NET_ADMIN) | (1 << CAP_NET_RAW);
    rc == 0 && data[0].effective & wanted == wanted
}

/// One method for both families, or each family's own.
fn by_family(methods: Vec<(Family, String)>) -> String {
    if methods.windows(2).all(|pair| pair[0].1 == pair[1].1) {
        return methods.into_iter().next().map(|(_, method)| method).unwrap_or_default();
    }
    let labelled: Vec<String> = methods
        .iter()
        .map(|(family, method)| format!("{}: {method}", family.label()))
        .collect();
    labelled.join("; ")
}

fn family_index(family: Family) -> usize {
    match family {
        Family::Ipv4 => 0,
        Family::Ipv6 => 1,
    }
}

fn hints_in(saved: &[(Family, SavedRules)]) -> Vec<HintChain> {
    saved
        .iter()
        .flat_map(|(family, s)| s.hint_chains.iter().map(|chain| HintChain { family: *family, chain }))
        .collect()
}

fn saved_nft(error: std::io::Error) -> NftSource {
    log::debug!("nf_tables netlink query refused ({error}): falling back to iptables-nft-save");
    let saved: Result<Vec<_>, String> = Family::BOTH
        .iter()
        .map(|f| save_tools::read(Mode::Nft, *f).map(|s| (*f, s)))
        .collect();
    match saved {
        Ok(saved) => NftSource::Saved(saved),
        Err(why) => NftSource::Unreadable(format!("nf_tables unreadable: netlink: {error}; save tool: {why}")),
    }
}

fn saved_legacy(family: Family, error: std::io::Error) -> LegacySource {
    log::debug!(
        "legacy {} getsockopt refused ({error}): falling back to {}-legacy-save",
        family.label(),
        family.program()
    );
    match save_tools::read(Mode::Legacy, family) {
        Ok(saved) => LegacySource::Saved(saved),
        Err(why) => LegacySource::Unreadable(format!(
            "legacy {} unreadable: getsockopt: {error}; save tool: {why}",
            family.label()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(low: u64, high: u64) -> RuleBounds {
        RuleBounds { low, high }
    }

    #[test]
    fn bounds_settle_only_when_apart() {
        assert_eq!(verdict_from_bounds(b(10, 20), b(0, 9)), Some(CountVerdict::Legacy));
        assert_eq!(verdict_from_bounds(b(0, 9), b(10, 20)), Some(CountVerdict::Nft));
        assert_eq!(verdict_from_bounds(b(0, 0), b(0, 0)), Some(CountVerdict::Tie));
        assert_eq!(verdict_from_bounds(b(5, 5), b(5, 5)), Some(CountVerdict::Tie));
        assert_eq!(verdict_from_bounds(b(0, 10), b(5, 5)), None);
        assert_eq!(verdict_from_bounds(b(5, 5), b(5, 9)), None);
        assert_eq!(verdict_from_bounds(b(5, 5), b(6, 9)), Some(CountVerdict::Nft));
        // An nft dump that stopped one past the exact legacy count.
        assert_eq!(verdict_from_bounds(b(7, 7), b(8, 100)), Some(CountVerdict::Nft));
    }
}
