//! Whether the running kernel has each backend, and whether this process
//! can use it: never a source that decides alone, but it bounds the
//! decision. A backend the running kernel lacks (a kernel built without
//! legacy x_tables, or without nf_tables), or that this process is known to
//! be unable to use (a seccomp filter refusing its socket, see
//! [`KernelReader::unusable`](crate::kernel::KernelReader::unusable)), is
//! never picked by counts, the lock or the default; the override and the
//! host link (the stated sources) are obeyed anyway, with a warning. The
//! default is nft, unless nft is lacking and legacy is not.
//!
//! Presence is read from sysfs, /proc and the module lists: nothing is
//! asked, since asking a backend not in the kernel could load it. What it
//! cannot see: whether a backend whose module is not loaded would load when
//! the backend asks (not loaded is not lacking), and whether a backend that
//! refuses this process without proof of a filter (EACCES from an LSM,
//! qemu-user's missing protocol) would serve the backend itself: neither is
//! counted as lacking.

use super::collector::{Collector, Depth};
use super::counts::{describe_bounds, RuleCounts};
use super::evidence::{Evidence, Finding};
use super::host::Host;
use super::reason::Reason;
use super::source::Source;
use crate::family::Family;
use crate::kernel::modules::{self, Presence};
use crate::mode::Mode;

/// Which backends the running kernel has, and which this process is known
/// to be unable to use
/// ([`KernelReader::unusable`](crate::kernel::KernelReader::unusable)): all
/// of them for `detect`; on a call only what can change the outcome or a warning: with
/// nothing decided yet, nft (the default must not be a backend the kernel
/// lacks or this process cannot use), and legacy only if nft is lacking;
/// when the override or the host link decided and warnings are wanted, the
/// backend it picked (to warn). Hint chains, counts and the lock need state
/// read from the backend they pick, which a missing backend has none of and
/// an unusable one cannot give (its count is unknown, and so counts and the
/// lock decide nothing), so they cannot pick either. Returns the backends
/// lacking.
pub(super) fn read_backend_presence(
    collector: &mut Collector,
    host: &mut impl Host,
    family: Family,
) -> Vec<(Mode, String)> {
    let wanted: Vec<Mode> = match (collector.depth, &collector.decided) {
        (Depth::Everything, _) | (_, None) => vec![Mode::Nft, Mode::Legacy],
        (depth, Some((mode, source, _))) if depth.warns() && source.is_stated() => vec![*mode],
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
            let module = match mode {
                Mode::Nft => modules::NF_TABLES,
                Mode::Legacy => modules::x_tables_module(each),
            };
            let presence = host.backend_presence(mode, each);
            let backend = match mode {
                Mode::Nft => "nft".to_string(),
                Mode::Legacy => format!("legacy {}", each.label()),
            };
            if let Presence::Missing(how) = &presence {
                if each == family {
                    lacking.push((mode, format!("the running kernel lacks it ({module}: {how})")));
                }
            }
            collector.add(|| Evidence {
                source: Source::BackendPresence,
                location: format!("{module} ({backend}) in the running kernel"),
                finding: Finding::of_presence(&presence),
                method: "sysfs, /proc and module lists; nothing asked".into(),
                points_to: None,
            });
            // Only a backend in the kernel is asked (asking could load it).
            if !matches!(presence, Presence::Present(_) | Presence::Askable(_)) {
                continue;
            }
            if let Some(why) = host.unusable(mode, each) {
                if each == family {
                    lacking.push((mode, format!("this process cannot use it ({why})")));
                }
                collector.add(|| Evidence {
                    source: Source::BackendPresence,
                    location: format!("{backend} from this process"),
                    finding: Finding::Known(format!("cannot be used: {why}")),
                    method: "the wrapper's own socket, then the save tool".into(),
                    points_to: None,
                });
            }
        }
    }
    lacking
}

/// nft, unless nft is lacking (the kernel lacks nf_tables, or this process
/// cannot use it) and legacy is not. The reason says whether the counts were
/// read and tied (`counts`), or nothing was found that decides.
pub(super) fn default_mode(lacking: &[(Mode, String)], counts: Option<&RuleCounts>) -> (Mode, Source, Reason) {
    let found = match counts {
        Some(counts) => format!(
            "the rule counts tie (legacy {}, nft {}) and nothing else decides",
            describe_bounds(counts.legacy),
            describe_bounds(counts.nft)
        ),
        None => "no evidence for either backend".to_string(),
    };
    let lacks = |mode| lacking.iter().find(|(m, _)| *m == mode).map(|(_, how)| how);
    match (lacks(Mode::Nft), lacks(Mode::Legacy)) {
        (Some(how), None) => (
            Mode::Legacy,
            Source::Default,
            format!("{found}, and nft cannot serve: {how}; legacy is the only backend left").into(),
        ),
        _ => (
            Mode::Nft,
            Source::Default,
            format!("{found}: nft is the default").into(),
        ),
    }
}
