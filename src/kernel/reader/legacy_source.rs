//! How [`KernelReader`] reads legacy x_tables, per family: through
//! getsockopt on the tables the kernel lists (never any other: looking one
//! up creates it), from `ip{,6}tables-legacy-save` when the kernel refuses
//! the query, and unknown when the list cannot be read.
//!
//! Counts start from GET_INFO's bounds and become exact table by table as
//! their entries are walked; a walk that fails falls back to the save tool
//! for that family for the rest of this reader's life.

use super::{by_family, family_index, KernelReader};
use crate::family::Family;
use crate::kernel::legacy::{self, LegacyFamily};
use crate::kernel::save_tools::{self, SavedRules};
use crate::kernel::{HintChain, Reading, RuleBounds, HINT_CHAINS};
use crate::mode::Mode;

pub(super) enum LegacySource {
    /// The tables the kernel lists, none of them asked yet: what a call
    /// that a legacy hint chain decides reads (see `mangle_alone`).
    Listed(Vec<String>),
    Sockopt {
        tables: LegacyFamily,
        exact: Vec<Option<u64>>,
    },
    Saved(SavedRules),
    Unreadable(String),
}

impl KernelReader {
    /// Whether both families' legacy table lists were read and are empty:
    /// legacy then holds no rule and leaves no trace (no table for the lock
    /// file to stand beside).
    pub fn legacy_has_no_tables(&mut self) -> bool {
        Family::BOTH.into_iter().all(|family| {
            matches!(self.legacy_source(family), LegacySource::Sockopt { tables, .. } if tables.tables.is_empty())
        })
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
            if first_family_found {
                if let Some((chains, method)) = self.mangle_alone(family) {
                    methods.push((family, method));
                    found.extend(chains.into_iter().map(|chain| HintChain { family, chain }));
                    continue;
                }
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
                LegacySource::Listed(_) => unreachable!("legacy_source asks the listed tables"),
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

    /// The hint chains in `family`'s legacy mangle table, read on their own
    /// (its GET_INFO and GET_ENTRIES, no other table's GET_INFO: two
    /// `getsockopt`s fewer for a call that such a chain decides), with the
    /// method. None where the whole source must answer: it is open already,
    /// or the list or the table cannot be read this way (the source then
    /// says why, or falls back to the save tool).
    fn mangle_alone(&mut self, family: Family) -> Option<(Vec<&'static str>, String)> {
        let index = family_index(family);
        let names = match &self.legacy[index] {
            None => {
                let names = legacy::listed_tables(family).ok()?.unwrap_or_default();
                self.legacy[index] = Some(LegacySource::Listed(names));
                match &self.legacy[index] {
                    Some(LegacySource::Listed(names)) => names,
                    _ => unreachable!("set above"),
                }
            }
            Some(LegacySource::Listed(names)) => names,
            Some(_) => return None,
        };
        // The methods read as the whole source's (see `legacy_method`).
        let method = "getsockopt GET_ENTRIES of mangle";
        if names.is_empty() {
            return Some((Vec::new(), "no legacy table".into()));
        }
        if !names.iter().any(|name| name == "mangle") {
            return Some((Vec::new(), method.into()));
        }
        let mangle = LegacyFamily::open_listed(family, vec!["mangle".to_string()]).ok()?;
        let entries = mangle.entries(mangle.table("mangle")?).ok()?;
        let chains = HINT_CHAINS
            .into_iter()
            .filter(|hint| entries.user_chains.iter().any(|chain| chain == hint))
            .collect();
        Some((chains, method.into()))
    }

    /// Whether legacy may hold rules, as the cheap GET_INFO entry counts
    /// tell (false only when no listed table can hold one); Err when legacy
    /// cannot be read.
    pub fn legacy_may_hold_rules(&mut self) -> Result<bool, String> {
        self.legacy_bounds("getsockopt GET_INFO entry counts")
            .map(|reading| reading.value.high > 0)
    }

    /// Legacy counts as far as they are known: exact for walked tables,
    /// `0..=upper bound` for the others.
    pub(super) fn legacy_bounds(&mut self, sockopt_method: &str) -> Result<Reading<RuleBounds>, String> {
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
                LegacySource::Listed(_) => unreachable!("legacy_source asks the listed tables"),
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

    pub(super) fn legacy_exact(&mut self) -> Result<Reading<RuleBounds>, String> {
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

    /// The family's source, its listed tables asked (GET_INFO each).
    pub(super) fn legacy_source(&mut self, family: Family) -> &mut LegacySource {
        let index = family_index(family);
        let listed = match self.legacy[index].take() {
            Some(LegacySource::Listed(names)) => Some(Ok(Some(names))),
            Some(source) => {
                self.legacy[index] = Some(source);
                None
            }
            None => Some(legacy::listed_tables(family)),
        };
        if let Some(listed) = listed {
            let source = match listed {
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
