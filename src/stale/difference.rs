//! Where a held stale chain first differs from its live namesake, to name
//! the rule that made a verdict: the chain and position, and the rule
//! each side holds there, followed into the user chains both jump to.

use super::saved_rules::{targets, SavedTable};
use std::collections::HashSet;

/// The first position where a stale chain and the live one differ.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Difference {
    pub(super) chain: Vec<u8>,
    /// 1 for the chain's first rule.
    pub(super) rule: usize,
    /// The rule each side holds there; None past its end (or where the
    /// live side does not declare the chain).
    pub(super) stale: Option<Vec<u8>>,
    pub(super) live: Option<Vec<u8>>,
}

/// Where `chain` of `stale` first differs from `chain` of `live`, rule by
/// rule as printed, and then in each user chain a rule of both jumps or
/// goes to; None where they are the same all the way down.
pub(super) fn first(stale: &SavedTable, live: &SavedTable, chain: &[u8]) -> Option<Difference> {
    first_in(stale, live, chain, &mut HashSet::new())
}

fn first_in(stale: &SavedTable, live: &SavedTable, chain: &[u8], seen: &mut HashSet<Vec<u8>>) -> Option<Difference> {
    if !seen.insert(chain.to_vec()) {
        return None;
    }
    let stale_rules = stale.chain(chain);
    let live_rules = if live.policy(chain).is_some() {
        live.chain(chain)
    } else {
        Vec::new()
    };
    for at in 0..stale_rules.len().max(live_rules.len()) {
        let (s, l) = (stale_rules.get(at), live_rules.get(at));
        if s != l || live.policy(chain).is_none() {
            return Some(Difference {
                chain: chain.to_vec(),
                rule: at + 1,
                stale: s.map(|r| r.to_vec()),
                live: l.map(|r| r.to_vec()),
            });
        }
    }
    stale_rules
        .iter()
        .flat_map(|rule| targets(rule))
        .filter(|t| stale.is_user_chain(t))
        .find_map(|t| first_in(stale, live, &t, seen))
}

impl Difference {
    /// "chain INPUT, rule 2: legacy `-A INPUT ...`, nft none".
    pub(super) fn shown(&self, stale_name: &str, live_name: &str) -> String {
        let side = |rule: &Option<Vec<u8>>| match rule {
            Some(rule) => format!("`{}`", String::from_utf8_lossy(rule)),
            None => "none".to_string(),
        };
        format!(
            "chain {}, rule {}: {stale_name} {}, {live_name} {}",
            String::from_utf8_lossy(&self.chain),
            self.rule,
            side(&self.stale),
            side(&self.live)
        )
    }
}
