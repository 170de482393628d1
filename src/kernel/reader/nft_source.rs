//! How [`KernelReader`] reads nf_tables: over netlink when nf_tables is in
//! the kernel, else nothing (asking could load it); from
//! `iptables-nft-save` when the kernel refuses the netlink query; and the
//! count cache for a generation already counted.
//!
//! A source is chosen once and kept: a netlink failure falls back to the
//! save tool for the rest of this reader's life, never back to netlink.

use super::KernelReader;
use crate::family::Family;
use crate::kernel::count_cache::{self, Namespace};
use crate::kernel::modules::Presence;
use crate::kernel::nft::{NftObject, NftSocket, RuleCount, RulesetKeptChanging};
use crate::kernel::save_tools::{self, SavedRules};
use crate::kernel::{HintChain, NftLookups, Reading, RuleBounds, HINT_CHAINS, KUBE_PROXY_TABLE};
use crate::mode::Mode;

pub(super) enum NftSource {
    /// nf_tables is not in the kernel, so it holds nothing (and asking could
    /// load it).
    NotLoaded,
    Netlink(NftSocket),
    Saved(Vec<(Family, SavedRules)>),
    Unreadable(String),
}

impl KernelReader {
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

    /// The nft rules' lower bound (rules in built-in chains); no upper bound.
    pub(super) fn nft_bounds(&mut self) -> Result<Reading<RuleBounds>, String> {
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
    pub(super) fn nft_cached(&mut self) -> Option<(u32, Reading<RuleBounds>)> {
        let NftSource::Netlink(socket) = self.nft_source() else {
            return None;
        };
        let generation = socket.generation().ok()?;
        let rules = count_cache::lookup(&namespace_of(socket).ok()?, generation)?;
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
    pub(super) fn nft_count(
        &mut self,
        stop_above: Option<u64>,
        bounds: RuleBounds,
    ) -> Result<(Reading<RuleBounds>, Option<u32>), String> {
        if let NftSource::Netlink(socket) = self.nft_source() {
            match socket.count_rules(&Family::BOTH, stop_above) {
                Ok(count) => {
                    let mut reading = counted(count, bounds);
                    // A count read while the generation moved belongs to none.
                    if let Some(generation) = count.generation {
                        match namespace_of(socket) {
                            Ok(ns) => count_cache::store(&ns, generation, reading.value),
                            Err(why) => reading.method = format!("{}; not cached: {why}", reading.method),
                        }
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

    pub(super) fn nft_source(&mut self) -> &mut NftSource {
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

/// The cache's key for the socket's namespace; where the kernel has no
/// namespace cookie (before Linux 5.14) or there is no boot id, why there is
/// none (`detect -v` shows it beside the count).
fn namespace_of(socket: &NftSocket) -> Result<Namespace, String> {
    let cookie = socket.netns_cookie().map_err(|e| {
        format!("the kernel gives no network namespace cookie (SO_NETNS_COOKIE, Linux 5.14 and later): {e}")
    })?;
    Namespace::with_cookie(cookie).ok_or_else(|| "no boot id (/proc/sys/kernel/random/boot_id unreadable)".to_string())
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
