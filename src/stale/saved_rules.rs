//! The rules of an iptables save, as the save tools print them: its
//! tables, each chain's policy and rules in order, and what a rule's
//! verdict does (filters, goes on, blocks, or may let a packet through).
//!
//! A rule's verdicts are read from any `-j`/`-g` in it, whether its words
//! are split the way the save tool quotes them or at every blank: a comment
//! that hides or fakes a `-j DROP` can only make a rule count as filtering
//! (or as one that may end its chain), never hide one that does.

use super::effects::{self, Does, Kept, Kind};
use std::collections::HashSet;

/// The chains the kernel's hooks reach by name in iptables' tables.
pub(super) const BUILTIN_CHAINS: [&[u8]; 5] = [b"PREROUTING", b"INPUT", b"FORWARD", b"OUTPUT", b"POSTROUTING"];

/// Whether every match module `rule` loads keeps no state another rule
/// can read ([`effects::Effect::shares_nothing`]).
pub(super) fn keeps_no_shared_state(rule: &[u8]) -> bool {
    match_modules(rule)
        .iter()
        .all(|m| effects::of(m, Kind::Match).shares_nothing())
}

/// Whether each match of the nat rule `rule` shares no state by name, or
/// goes in `nat` by its row (a set only read, `recent`'s lists, which the
/// fates follow); a `hashlimit` bucket a live rule may read by name does
/// not.
pub(super) fn nat_keeps_no_unmodelled_state(rule: &[u8]) -> bool {
    match_modules(rule).iter().all(|m| {
        let effect = effects::of(m, Kind::Match);
        effect.shares_nothing() || effect.goes_in_nat
    })
}

/// What `rule` may keep on, read both ways (see the module's note): for
/// the stale side, where reading too much only asks for a twin.
pub(super) fn keeps(rule: &[u8]) -> Kept {
    match_modules(rule)
        .iter()
        .chain(&targets(rule))
        .map(|name| effects::keeps_on(name))
        .max()
        .unwrap_or(Kept::Nothing)
}

/// What the live rule `rule` (of `table`) surely keeps on: read only as
/// the save tool quotes it, a `-m` module or a `-j` verdict that is no
/// user chain of `table`, a comment's text skipped, and not `CT
/// --notrack` (which tracks nothing). [`keeps`] errs the other way.
pub(super) fn surely_keeps(rule: &[u8], table: &SavedTable) -> Kept {
    let mut words = quoted_words(rule).into_iter();
    let mut names = Vec::new();
    let mut notrack = false;
    while let Some(word) = words.next() {
        match word.as_slice() {
            b"--comment" => {
                words.next();
            }
            b"--notrack" => notrack = true,
            b"-m" | b"--match" => names.extend(words.next()),
            b"-j" | b"--jump" => names.extend(words.next().filter(|t| !table.is_user_chain(t))),
            _ => {}
        }
    }
    names
        .iter()
        .filter(|name| !(notrack && name.as_slice() == b"CT"))
        .map(|name| effects::keeps_on(name))
        .max()
        .unwrap_or(Kept::Nothing)
}

/// The match modules a rule loads (`-m NAME`, `--match NAME`).
pub(super) fn match_modules(rule: &[u8]) -> Vec<Vec<u8>> {
    let mut found = Vec::new();
    for words in word_splits(rule) {
        for pair in words.windows(2) {
            if matches!(pair[0].as_slice(), b"-m" | b"--match") {
                found.push(pair[1].clone());
            }
        }
    }
    found
}

pub(super) use super::saved_table::{parse, SavedTable};

/// A rule's words as the save tools quote them (`"..."`, with `\"` and
/// `\\` inside).
pub(super) fn quoted_words(rule: &[u8]) -> Vec<Vec<u8>> {
    let mut words = Vec::new();
    let mut word = Vec::new();
    let (mut in_quotes, mut escaped, mut started) = (false, false, false);
    for &b in rule {
        if escaped {
            word.push(b);
            escaped = false;
        } else if b == b'\\' && in_quotes {
            escaped = true;
        } else if b == b'"' {
            in_quotes = !in_quotes;
            started = true;
        } else if b.is_ascii_whitespace() && !in_quotes {
            if started {
                words.push(std::mem::take(&mut word));
                started = false;
            }
        } else {
            word.push(b);
            started = true;
        }
    }
    if started {
        words.push(word);
    }
    words
}

/// The words of a rule as the save tool quotes them (`"..."` with `\"` and
/// `\\` inside), and split at every blank: both, see the module's note.
fn word_splits(rule: &[u8]) -> [Vec<Vec<u8>>; 2] {
    let blank = rule
        .split(u8::is_ascii_whitespace)
        .filter(|w| !w.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    [blank, quoted_words(rule)]
}

/// Whether a rule may go to a chain (`-g`, `--goto`): that ends its own
/// chain's evaluation when the chain gone to falls through (in a built-in
/// chain, at its policy).
pub(super) fn goes_to(rule: &[u8]) -> bool {
    word_splits(rule)
        .iter()
        .any(|words| words.iter().any(|w| matches!(w.as_slice(), b"-g" | b"--goto")))
}

/// The chain of a held item: `:CHAIN POLICY` or `-A CHAIN ...`.
pub(super) fn item_chain(item: &[u8]) -> &[u8] {
    let mut words = item.strip_prefix(b":").unwrap_or(item).split(|&b| b == b' ');
    if !item.starts_with(b":") {
        words.next();
    }
    words.next().unwrap_or_default()
}

/// Every target a rule's `-j`/`-g` (or `--jump`/`--goto`) may name.
pub(super) fn targets(rule: &[u8]) -> Vec<Vec<u8>> {
    let mut found = Vec::new();
    for words in word_splits(rule) {
        for pair in words.windows(2) {
            if matches!(pair[0].as_slice(), b"-j" | b"-g" | b"--jump" | b"--goto") {
                found.push(pair[1].clone());
            }
        }
    }
    found
}

impl SavedTable {
    /// The user chains whose rules can only log, block or return to the
    /// caller at their end (never accept, return early, go to a chain,
    /// queue or change a packet), to a fixed point.
    pub(super) fn harmless_chains(&self) -> HashSet<Vec<u8>> {
        self.user_chains_where(|rule, harmless| self.harmless(rule, harmless))
    }

    /// Whether `rule` only takes some packets out of its chain's
    /// evaluation and lets the rest go on unchanged: `ACCEPT`, a NAT
    /// verdict, a jump to a user chain in `exiting`, and, except where what
    /// is judged is the chain's policy (`to_policy`), `RETURN` and `-g`
    /// (which in a built-in chain take a packet to the policy).
    pub(super) fn exits(&self, rule: &[u8], to_policy: bool, exiting: &HashSet<Vec<u8>>) -> bool {
        if goes_to(rule) {
            return !to_policy;
        }
        let targets = targets(rule);
        !targets.is_empty()
            && targets.iter().all(|t| {
                if self.is_user_chain(t) {
                    exiting.contains(t)
                } else {
                    match effects::of(t, Kind::Target).does {
                        Does::Accepts | Does::Translates => true,
                        Does::Returns => !to_policy,
                        _ => false,
                    }
                }
            })
    }

    /// The user chains that, jumped to, take some packets out (accept or
    /// NAT them), block or log, and return the rest to the caller
    /// unchanged: no verdict in them changes a packet before it returns,
    /// goes to a chain or is unknown, to a fixed point.
    pub(super) fn exiting_chains(&self) -> HashSet<Vec<u8>> {
        self.user_chains_where(|rule, exiting| {
            !goes_to(rule)
                && targets(rule).iter().all(|t| {
                    if self.is_user_chain(t) {
                        exiting.contains(t)
                    } else {
                        matches!(
                            effects::of(t, Kind::Target).does,
                            Does::Observes | Does::Blocks | Does::Translates | Does::Accepts | Does::Returns
                        )
                    }
                })
        })
    }

    /// Whether `rule` can neither end its chain's evaluation other than by
    /// blocking nor change what a later rule matches: every verdict in it
    /// logs or blocks, or jumps (not goes) to a user chain in `harmless`;
    /// no `-j` at all goes on. A user chain named like a target (`LOG`,
    /// which the restore tools accept) is judged as the chain.
    pub(super) fn harmless(&self, rule: &[u8], harmless: &HashSet<Vec<u8>>) -> bool {
        !goes_to(rule)
            && keeps_no_shared_state(rule)
            && targets(rule).iter().all(|t| {
                if self.is_user_chain(t) {
                    harmless.contains(t)
                } else {
                    matches!(effects::of(t, Kind::Target).does, Does::Observes | Does::Blocks)
                }
            })
    }
}
