//! The rule counts of both backends, the last reading of the kernel's
//! state: strictly more legacy rules means legacy, strictly fewer means nft,
//! a tie decides nothing (the lock file may break it, see `lock`).
//!
//! A count that cannot be read is unknown, never zero, and an unknown side
//! never loses a comparison: the counts decide only when both are known.
//! What it cannot see: which rules matter (a count is a count), and, on a
//! wrapped call, more than bounds where exact counts would cost a walk
//! (`detect` counts exactly; see [`RuleBounds`]).

use super::collector::{Collector, Depth};
use super::evidence::{Evidence, Finding};
use super::host::Host;
use super::source::Source;
use crate::kernel::{CountVerdict, RuleBounds};
use crate::mode::Mode;

/// Both backends holding at least this many rules is a mixed state.
pub const MIXED_STATE_RULES: u64 = 10;

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

/// Compares both backends' rule counts, records them and decides by them
/// unless they tie; returns them when both were read.
pub(super) fn read_rule_counts(collector: &mut Collector, host: &mut impl Host) -> Option<RuleCounts> {
    match host.compare_rule_counts(collector.depth == Depth::Everything) {
        Ok(comparison) => {
            let counts = RuleCounts {
                legacy: comparison.legacy.value,
                legacy_method: comparison.legacy.method.clone(),
                nft: comparison.nft.value,
                nft_method: comparison.nft.method.clone(),
            };
            let points_to = comparison.verdict.mode();
            for (mode, reading) in [(Mode::Legacy, &comparison.legacy), (Mode::Nft, &comparison.nft)] {
                collector.add(|| Evidence {
                    source: Source::RuleCounts,
                    location: format!("{mode} rules (ipv4 + ipv6)"),
                    finding: Finding::Known(describe_bounds(reading.value)),
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
            collector.add(|| Evidence {
                source: Source::RuleCounts,
                location: "rule counts".into(),
                finding: Finding::unknown(why),
                method: "none".into(),
                points_to: None,
            });
            None
        }
    }
}

/// "3", "at least 3", "between 3 and 7".
pub(super) fn describe_bounds(bounds: RuleBounds) -> String {
    if bounds.is_exact() {
        format!("{}", bounds.low)
    } else if bounds.high == u64::MAX {
        format!("at least {}", bounds.low)
    } else {
        format!("between {} and {}", bounds.low, bounds.high)
    }
}
