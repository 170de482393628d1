//! Where a held stale chain differs from its live namesake: first, to name
//! the rule that made a verdict (the chain and position, and the rule
//! each side holds there, followed into the user chains both jump to);
//! and whole, rule against rule, for an operator to review, starting at
//! the rule a witness packet met first.

use super::fates::Place;

use super::saved_rules::{item_chain, targets, SavedTable};
use super::saved_table::named;
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

/// Context rules shown around each difference.
const CONTEXT: usize = 2;
/// Above this many cells (rules times rules), a chain's middle is not
/// aligned rule by rule but shown as the stale rules, then the live ones.
const ALIGNED_AT_MOST: usize = 4_000_000;

/// One chain of a held table, stale against live: each side's policy
/// (None: not declared there) and the rules aligned.
#[derive(Debug)]
pub(super) struct Compared {
    chain: Vec<u8>,
    stale_policy: Option<Vec<u8>>,
    live_policy: Option<Vec<u8>>,
    rules: Vec<(Side, Vec<u8>)>,
}

/// The chains of the held `items` of `stale` and the user chains they
/// reach, each that differs from its live namesake.
pub(super) fn compared(stale: &SavedTable, live: &SavedTable, items: &[Vec<u8>]) -> Vec<Compared> {
    let mut chains: Vec<Vec<u8>> = Vec::new();
    for chain in items.iter().map(|item| item_chain(item)) {
        if !chains.iter().any(|seen| seen == chain) {
            chains.push(chain.to_vec());
        }
    }
    let mut at = 0;
    while at < chains.len() {
        for target in stale.chain(&chains[at]).iter().flat_map(|rule| targets(rule)) {
            if stale.is_user_chain(&target) && !chains.contains(&target) {
                chains.push(target);
            }
        }
        at += 1;
    }
    chains
        .into_iter()
        .filter_map(|chain| {
            let (stale_rules, live_rules) = (stale.chain(&chain), live.chain(&chain));
            let (stale_policy, live_policy) = (stale.policy(&chain), live.policy(&chain));
            if stale_rules == live_rules && stale_policy == live_policy {
                return None;
            }
            Some(Compared {
                stale_policy: stale_policy.map(<[u8]>::to_vec),
                live_policy: live_policy.map(<[u8]>::to_vec),
                rules: aligned(&stale_rules, &live_rules)
                    .into_iter()
                    .map(|(side, rule)| (side, rule.to_vec()))
                    .collect(),
                chain,
            })
        })
        .collect()
}

/// The tables of the stale and the live copy, and their backends' names.
pub(super) type Copies<'a> = (
    &'a [(Vec<u8>, SavedTable)],
    &'a [(Vec<u8>, SavedTable)],
    &'a str,
    &'a str,
);

/// The held chains side by side (`compared`), starting at `first`: the
/// stale rule a witness packet met first (or the model cannot tell past),
/// its place said as its second part says, then its chain
/// (and the user chains it reaches) where they differ from the live ones,
/// then the other held chains.
pub(super) fn witness_first(compared: &[Compared], first: Option<(&Place, &str)>, copies: Copies) -> Vec<String> {
    let (first, said) = (first.map(|(place, _)| place), first.map_or("", |(_, said)| said));
    let (stale_tables, live_tables, stale_name, live_name) = copies;
    let mut out = Vec::new();
    let mut shown: Vec<Vec<u8>> = Vec::new();
    let empty = SavedTable::default();
    let tables = first.and_then(|(table, _, _)| {
        let stale = named(stale_tables, table)?;
        Some((stale, named(live_tables, table).unwrap_or(&empty)))
    });
    if let (Some((table, chain, rule)), Some((stale, live))) = (first, tables) {
        let number = stale.chain(chain).iter().position(|r| r == rule).map_or(0, |at| at + 1);
        out.push(format!(
            "{said} {stale_name} {} {} rule {number}: {}",
            String::from_utf8_lossy(table),
            String::from_utf8_lossy(chain),
            String::from_utf8_lossy(rule)
        ));
        for c in self::compared(stale, live, std::slice::from_ref(rule)) {
            out.extend(c.shown(stale_name, live_name));
            shown.push(c.chain);
        }
    }
    for c in compared.iter().filter(|c| !shown.contains(&c.chain)) {
        out.extend(c.shown(stale_name, live_name));
    }
    out
}

impl Compared {
    /// "chain INPUT (policy: legacy DROP, nft ACCEPT)" (a user chain's
    /// name alone, a policy the same once), then per rule
    /// "  both    RULE", "  legacy  RULE" (stale only) or "  nft     RULE"
    /// (live only); rules the same far from a difference as "  ... N the
    /// same". For an operator to review before `--allow-opening`, or to
    /// edit.
    pub(super) fn shown(&self, stale_name: &str, live_name: &str) -> Vec<String> {
        let chain = String::from_utf8_lossy(&self.chain);
        let policy = |p: &Option<Vec<u8>>| String::from_utf8_lossy(p.as_deref().unwrap_or_default()).into_owned();
        let mut out = vec![match (&self.stale_policy, &self.live_policy) {
            (_, None) => format!("chain {chain} ({live_name} has no such chain)"),
            (stale, live) if stale == live && policy(live) == "-" => format!("chain {chain}"),
            (stale, live) if stale == live => format!("chain {chain} (policy {})", policy(live)),
            (stale, live) => format!(
                "chain {chain} (policy: {stale_name} {}, {live_name} {})",
                policy(stale),
                policy(live)
            ),
        }];
        let width = stale_name.len().max(live_name.len()).max("both".len());
        let rules = &self.rules;
        let near = |i: usize| {
            rules[i.saturating_sub(CONTEXT)..(i + CONTEXT + 1).min(rules.len())]
                .iter()
                .any(|(side, _)| *side != Side::Both)
        };
        let mut same_run = 0;
        for (i, (side, rule)) in rules.iter().enumerate() {
            if *side == Side::Both && !near(i) {
                same_run += 1;
                continue;
            }
            if same_run > 0 {
                out.push(format!("  ... {same_run} the same"));
                same_run = 0;
            }
            let name = match side {
                Side::Both => "both",
                Side::Stale => stale_name,
                Side::Live => live_name,
            };
            out.push(format!("  {name:width$}  {}", String::from_utf8_lossy(rule)));
        }
        if same_run > 0 {
            out.push(format!("  ... {same_run} the same"));
        }
        out
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Both,
    Stale,
    Live,
}

/// The two chains' rules aligned by a longest common subsequence, after
/// their common first and last rules; a middle too large to align is the
/// stale rules, then the live ones.
fn aligned<'a>(stale: &[&'a [u8]], live: &[&'a [u8]]) -> Vec<(Side, &'a [u8])> {
    let head = stale.iter().zip(live).take_while(|(s, l)| s == l).count();
    let tail = stale[head..]
        .iter()
        .rev()
        .zip(live[head..].iter().rev())
        .take_while(|(s, l)| s == l)
        .count();
    let (s, l) = (&stale[head..stale.len() - tail], &live[head..live.len() - tail]);
    let mut out: Vec<(Side, &[u8])> = stale[..head].iter().map(|r| (Side::Both, *r)).collect();
    if s.len().saturating_mul(l.len()) > ALIGNED_AT_MOST {
        out.extend(s.iter().map(|r| (Side::Stale, *r)));
        out.extend(l.iter().map(|r| (Side::Live, *r)));
    } else {
        // common[i][j]: the longest common subsequence of s[i..] and l[j..].
        let mut common = vec![vec![0u32; l.len() + 1]; s.len() + 1];
        for i in (0..s.len()).rev() {
            for j in (0..l.len()).rev() {
                common[i][j] = if s[i] == l[j] {
                    common[i + 1][j + 1] + 1
                } else {
                    common[i + 1][j].max(common[i][j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < s.len() || j < l.len() {
            if i < s.len() && j < l.len() && s[i] == l[j] {
                out.push((Side::Both, s[i]));
                (i, j) = (i + 1, j + 1);
            } else if j == l.len() || (i < s.len() && common[i + 1][j] >= common[i][j + 1]) {
                out.push((Side::Stale, s[i]));
                i += 1;
            } else {
                out.push((Side::Live, l[j]));
                j += 1;
            }
        }
    }
    out.extend(stale[stale.len() - tail..].iter().map(|r| (Side::Both, *r)));
    out
}
