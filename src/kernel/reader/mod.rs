//! [`KernelReader`]: both backends' state in this network namespace, each
//! source opened once and only when a question needs it, and the rule
//! counts compared only as far as the verdict needs.
//!
//! This module holds the reader, what it knows of each backend being
//! unusable from this process, and the comparison of the counts; how each
//! backend is read, and where it falls back to its save tool, is in
//! `nft_source` and `legacy_source`. It reads and compares; which backend
//! to run is not decided here.

mod legacy_source;
mod nft_source;

use crate::family::Family;
use crate::kernel::modules::{self, Presence};
use crate::kernel::{verdict_from_bounds, CountComparison, Reading, RuleBounds};
use crate::mode::Mode;
use legacy_source::LegacySource;
use nft_source::NftSource;

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
    /// The exact counts once read: both families together, so a second
    /// decision on this reader (ip6tables' after iptables') reads none again.
    exact_counts: Option<CountComparison>,
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
            exact_counts: None,
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

    /// Compares the backends' rule counts, IPv4 and IPv6 together. With
    /// `exact` (detect) both counts are read in full, and the nft count
    /// remembered for this generation is only compared with the fresh one;
    /// otherwise only as far as the verdict needs: cheap bounds first, then
    /// the nft count remembered for this generation (unless the bounds
    /// contradict it), then the exact legacy count, then the nft rules until
    /// they pass it (remembered for the next call).
    pub fn compare_rule_counts(&mut self, exact: bool) -> Result<CountComparison, String> {
        if let Some(counts) = self.exact_counts.as_ref().filter(|_| exact) {
            return Ok(counts.clone());
        }
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
        let comparison = CountComparison { legacy, nft, verdict };
        if exact {
            self.exact_counts = Some(comparison.clone());
        }
        Ok(comparison)
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
