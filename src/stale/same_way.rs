//! Whether the host's backend holds a stale rule's twin where the twin
//! counts: reached the same way (the rules before a rule that only
//! blocks, or before a policy), or in its whole chain's twin. What each
//! rule is (harmless, exiting, keeping state of its own) is read once per
//! chain, so a chain of thousands of blocking rules is judged in passes
//! over booleans: the removal holds the xtables lock meanwhile, and a
//! writer such as kube-proxy waits only seconds for it (`-w 5`).

use super::effects::{self, Kind, State};
use super::saved_rules::{match_modules, targets, SavedTable};
use std::collections::{HashMap, HashSet};

/// The two sides of one table, and what was read of their chains.
pub(super) struct Twins<'a> {
    stale: &'a SavedTable,
    live: &'a SavedTable,
    /// What each side's user chains are, read with the first chain (most
    /// tables need none).
    sets: Option<ChainSets>,
    chains: HashMap<Vec<u8>, (StaleChain<'a>, LiveChain<'a>)>,
    whole_chains: HashMap<Vec<u8>, bool>,
    /// Per user chain: whether it, and each chain behind it, that keeps
    /// state of its own is fed the same packets in both sides
    /// ([`Twins::fed_alike`], [`Twins::fed_alike_below`]).
    fed_chains: HashMap<Vec<u8>, bool>,
    fed_below: HashMap<Vec<u8>, bool>,
    /// Per user chain: whether the live one returns every packet the stale
    /// one returns, in the same state ([`Twins::returns_same_way`]).
    returning_chains: HashMap<Vec<u8>, bool>,
}

/// What each side's user chains are, read once for all its chains.
struct ChainSets {
    /// Each side's harmless user chains ([`SavedTable::harmless_chains`]).
    stale_harmless: HashSet<Vec<u8>>,
    live_harmless: HashSet<Vec<u8>>,
    /// The stale side's exiting user chains ([`SavedTable::exiting_chains`]).
    stale_exiting: HashSet<Vec<u8>>,
    /// Each side's user chains that reach no rule keeping state of its own
    /// ([`stateless_chains`]).
    stale_stateless: HashSet<Vec<u8>>,
    live_stateless: HashSet<Vec<u8>>,
    /// Each side's rules that jump or go to each user chain: (the
    /// caller's chain, the rule's place in it).
    stale_callers: HashMap<Vec<u8>, Vec<(Vec<u8>, usize)>>,
    live_callers: HashMap<Vec<u8>, Vec<(Vec<u8>, usize)>>,
}

/// The rules of one chain of one side, and what each is.
struct ChainRules<'a> {
    rules: Vec<&'a [u8]>,
    /// Loads a match that keeps state of its own, which every packet
    /// reaching the rule feeds, or jumps to a chain that reaches one.
    own_state: Vec<bool>,
    /// Can neither end the chain other than by blocking nor change what a
    /// later rule matches ([`SavedTable::harmless`]).
    harmless: Vec<bool>,
}

struct StaleChain<'a> {
    read: ChainRules<'a>,
    /// [`SavedTable::exits`] where what follows is the next rule, then
    /// where it is the policy.
    exits: [Vec<bool>; 2],
}

struct LiveChain<'a> {
    read: ChainRules<'a>,
    /// The user chains the rule jumps or goes to return, in the live side,
    /// every packet they return in the stale side, in the same state
    /// ([`Twins::returns_same_way`]).
    same_chains: Vec<bool>,
    /// The user chains the rule jumps or goes to are the same in both
    /// sides, rule for rule ([`same_chains`]).
    twin_chains: Vec<bool>,
}

impl<'a> ChainRules<'a> {
    fn read(
        side: &'a SavedTable,
        chain: &[u8],
        harmless: &HashSet<Vec<u8>>,
        stateless: &HashSet<Vec<u8>>,
    ) -> ChainRules<'a> {
        let rules = side.chain(chain);
        ChainRules {
            own_state: rules
                .iter()
                .map(|r| {
                    keeps_own_state(r)
                        || targets(r)
                            .iter()
                            .any(|t| side.is_user_chain(t) && !stateless.contains(t))
                })
                .collect(),
            harmless: rules.iter().map(|r| side.harmless(r, harmless)).collect(),
            rules,
        }
    }
}

impl<'a> Twins<'a> {
    pub(super) fn new(stale: &'a SavedTable, live: &'a SavedTable) -> Twins<'a> {
        Twins {
            stale,
            live,
            sets: None,
            chains: HashMap::new(),
            whole_chains: HashMap::new(),
            fed_chains: HashMap::new(),
            fed_below: HashMap::new(),
            returning_chains: HashMap::new(),
        }
    }

    fn chain(&mut self, chain: &[u8]) -> &(StaleChain<'a>, LiveChain<'a>) {
        if !self.chains.contains_key(chain) {
            let (stale_side, live_side) = (self.stale, self.live);
            let sets = self.sets();
            let stale = ChainRules::read(stale_side, chain, &sets.stale_harmless, &sets.stale_stateless);
            let exits = [false, true].map(|to_policy| {
                stale
                    .rules
                    .iter()
                    .map(|r| stale_side.exits(r, to_policy, &sets.stale_exiting))
                    .collect()
            });
            let live = ChainRules::read(live_side, chain, &sets.live_harmless, &sets.live_stateless);
            let returning = live.rules.iter().map(|r| self.returns_same_way(r)).collect();
            let twin_chains = live
                .rules
                .iter()
                .map(|r| same_chains(r, self.stale, self.live, &mut HashSet::new()) && self.fed_alike_below(r))
                .collect();
            let read = (
                StaleChain { read: stale, exits },
                LiveChain {
                    read: live,
                    same_chains: returning,
                    twin_chains,
                },
            );
            self.chains.insert(chain.to_vec(), read);
        }
        &self.chains[chain]
    }

    /// What each side's user chains are, read once.
    fn sets(&mut self) -> &ChainSets {
        let (stale, live) = (self.stale, self.live);
        self.sets.get_or_insert_with(|| ChainSets {
            stale_harmless: stale.harmless_chains(),
            live_harmless: live.harmless_chains(),
            stale_exiting: stale.exiting_chains(),
            stale_stateless: stateless_chains(stale),
            live_stateless: stateless_chains(live),
            stale_callers: callers(stale),
            live_callers: callers(live),
        })
    }

    /// Whether user chain `chain` is fed the same packets in both sides,
    /// where that matters: where it reaches a rule keeping state of its
    /// own (`limit`, `statistic`, ...) in either side, that state counts
    /// every packet the chain is fed, so the rules that jump or go to it
    /// must be the same ones, at the same places, with the same rules
    /// before them and the chains behind those fed alike too, up to the
    /// built-in chains. A chain reached again while being judged counts
    /// as not.
    fn fed_alike(&mut self, chain: &[u8]) -> bool {
        let (stale, live) = (self.stale, self.live);
        if !stale.is_user_chain(chain) && !live.is_user_chain(chain) {
            return true;
        }
        if let Some(&alike) = self.fed_chains.get(chain) {
            return alike;
        }
        let sets = self.sets();
        if sets.stale_stateless.contains(chain) && sets.live_stateless.contains(chain) {
            return true;
        }
        let callers = sets.stale_callers.get(chain).cloned().unwrap_or_default();
        let alike = stale.is_user_chain(chain) == live.is_user_chain(chain)
            && sets
                .live_callers
                .get(chain)
                .map_or(callers.is_empty(), |live| *live == callers);
        self.fed_chains.insert(chain.to_vec(), false);
        let alike = alike
            && callers.iter().all(|(caller, at)| {
                let before = &stale.chain(caller)[..=*at];
                before == &live.chain(caller)[..=*at]
                    && before[..*at]
                        .iter()
                        .all(|r| same_chains(r, stale, live, &mut HashSet::new()) && self.fed_alike_below(r))
                    && self.fed_alike(caller)
            });
        self.fed_chains.insert(chain.to_vec(), alike);
        alike
    }

    /// Whether each user chain `rule` jumps or goes to, and each chain
    /// behind those, is fed alike ([`Twins::fed_alike`]).
    fn fed_alike_below(&mut self, rule: &[u8]) -> bool {
        self.each_target(
            rule,
            |twins| &mut twins.fed_below,
            |twins, t| {
                let stale = twins.stale;
                twins.fed_alike(t) && stale.chain(t).iter().all(|r| twins.fed_alike_below(r))
            },
        )
    }

    /// Whether `judge` holds for each user chain `rule` jumps or goes to,
    /// each chain judged once and remembered in the map `memo` picks (a
    /// chain reached again while being judged counts as not).
    fn each_target(
        &mut self,
        rule: &[u8],
        memo: fn(&mut Self) -> &mut HashMap<Vec<u8>, bool>,
        judge: fn(&mut Self, &[u8]) -> bool,
    ) -> bool {
        for t in targets(rule) {
            if !self.stale.is_user_chain(&t) && !self.live.is_user_chain(&t) {
                continue;
            }
            if let Some(&holds) = memo(self).get(&t) {
                if !holds {
                    return false;
                }
                continue;
            }
            memo(self).insert(t.clone(), false);
            let holds = judge(self, &t);
            memo(self).insert(t, holds);
            if !holds {
                return false;
            }
        }
        true
    }

    /// Whether each user chain `rule` jumps or goes to is one in both
    /// sides, and the live one returns to the caller every packet the
    /// stale one returns, in the same state ([`same_way_in`] over the
    /// whole chains, as up to a policy: a stale `RETURN` or `-g` the live
    /// chain lacks would return packets the live one may accept). So the
    /// stale chain may accept more, or block less, than the live one; a
    /// chain reached again while being judged counts as not.
    fn returns_same_way(&mut self, rule: &[u8]) -> bool {
        self.each_target(
            rule,
            |twins| &mut twins.returning_chains,
            |twins, t| {
                twins.stale.is_user_chain(t)
                    && twins.live.is_user_chain(t)
                    && {
                        let (stale, live) = twins.chain(t);
                        same_way_in(live, live.read.rules.len(), stale, stale.read.rules.len(), true)
                    }
                    && twins.fed_alike(t)
            },
        )
    }

    /// Whether the live chain brings to its policy every packet the stale
    /// chain brings to its own ([`same_way_in`] over whole chains).
    pub(super) fn policy_reached_same_way(&mut self, chain: &[u8]) -> bool {
        let (stale, live) = self.chain(chain);
        same_way_in(live, live.read.rules.len(), stale, stale.read.rules.len(), true)
    }

    /// Whether the live chain holds rule `at` of the stale chain, reached
    /// the same way ([`same_way_in`] over the rules before each).
    pub(super) fn in_order(&mut self, chain: &[u8], at: usize) -> bool {
        let (stale, live) = self.chain(chain);
        let line = stale.read.rules[at];
        let fed = stale.read.own_state[at];
        let held = live.read.rules.iter().enumerate().any(|(i, rule)| {
            *rule == line
                && if fed {
                    same_before(live, i, stale, at)
                } else {
                    same_way_in(live, i, stale, at, false)
                }
        });
        held && self.fed_alike(chain) && self.fed_alike_below(line)
    }

    /// Whether the live chain is the stale one's twin: declared there too,
    /// the same rules, as printed, in the same order, and the user chains
    /// they jump or go to the same, and so on.
    pub(super) fn whole_chain(&mut self, chain: &[u8]) -> bool {
        if let Some(&same) = self.whole_chains.get(chain) {
            return same;
        }
        let (stale, live) = (self.stale, self.live);
        let rules = stale.chain(chain);
        let same = live.policy(chain).is_some()
            && live.is_user_chain(chain) == stale.is_user_chain(chain)
            && live.chain(chain) == rules
            && rules
                .iter()
                .all(|rule| same_chains(rule, stale, live, &mut HashSet::new()) && self.fed_alike_below(rule))
            && self.fed_alike(chain);
        self.whole_chains.insert(chain.to_vec(), same);
        same
    }
}

/// Whether the user chains `rule` jumps to are the same in `stale` and
/// `live`, rule for rule, and so on for the chains they jump to.
fn same_chains(rule: &[u8], stale: &SavedTable, live: &SavedTable, seen: &mut HashSet<Vec<u8>>) -> bool {
    for t in targets(rule) {
        if !stale.is_user_chain(&t) && !live.is_user_chain(&t) {
            continue;
        }
        if !seen.insert(t.clone()) {
            continue;
        }
        let rules = stale.chain(&t);
        if !(stale.is_user_chain(&t) && live.is_user_chain(&t) && rules == live.chain(&t)) {
            return false;
        }
        if !rules.iter().all(|r| same_chains(r, stale, live, seen)) {
            return false;
        }
    }
    true
}

/// Whether the live chain's first `live_len` rules bring to what follows
/// every packet the stale chain's first `stale_len` do, in the same
/// state: the rules of each that could end the evaluation other than by
/// blocking or change a packet are the same rules, in the same order (not
/// only as many: a live `-s 10.0.0.0/8 -j ACCEPT` is not the stale
/// `-s 192.168.0.1/32 -j ACCEPT`), and the user chains they jump to are
/// the same in both. Rules that only log or block may differ, and the
/// stale chain may have more rules that only take packets out of it
/// ([`SavedTable::exits`]): those packets never reach what follows there.
/// Where a rule before keeps state of its own, every rule before is the
/// same, since other packets would feed that state. `to_policy`: what
/// follows is the policy.
fn same_way_in(live: &LiveChain, live_len: usize, stale: &StaleChain, stale_len: usize, to_policy: bool) -> bool {
    let (live_rules, stale_rules) = (&live.read.rules[..live_len], &stale.read.rules[..stale_len]);
    let own_state = live.read.own_state[..live_len]
        .iter()
        .chain(&stale.read.own_state[..stale_len]);
    if own_state.copied().any(|own| own) {
        return same_before(live, live_len, stale, stale_len);
    }
    let live_significant: Vec<usize> = (0..live_len).filter(|&i| !live.read.harmless[i]).collect();
    let in_live: HashSet<&[u8]> = live_significant.iter().map(|&i| live_rules[i]).collect();
    let exits = &stale.exits[usize::from(to_policy)];
    let mut stale_significant = (0..stale_len)
        .filter(|&j| !stale.read.harmless[j] && (in_live.contains(stale_rules[j]) || !exits[j]))
        .map(|j| stale_rules[j]);
    live_significant
        .iter()
        .all(|&i| stale_significant.next() == Some(live_rules[i]) && live.same_chains[i])
        && stale_significant.next().is_none()
}

/// Whether the first `live_len` rules of the live chain are the stale
/// chain's first `stale_len`, with the same user chains behind them: the
/// same packets reach what follows (a rule keeping state of its own there
/// is fed by the same packets).
fn same_before(live: &LiveChain, live_len: usize, stale: &StaleChain, stale_len: usize) -> bool {
    live.read.rules[..live_len] == stale.read.rules[..stale_len]
        && live.twin_chains[..live_len].iter().all(|&same| same)
}

/// Whether `rule` loads a match that keeps state of the rule's own, which
/// every packet reaching the rule feeds.
fn keeps_own_state(rule: &[u8]) -> bool {
    match_modules(rule)
        .iter()
        .any(|m| effects::of(m, Kind::Match).state == State::OwnRule)
}

/// The user chains of `side` from which no rule keeping state of its own
/// is reached (a `limit` in a chain jumped to is fed by every packet that
/// reaches the jump), to a fixed point.
fn stateless_chains(side: &SavedTable) -> HashSet<Vec<u8>> {
    side.user_chains_where(|rule, stateless| {
        !keeps_own_state(rule)
            && targets(rule)
                .iter()
                .all(|t| !side.is_user_chain(t) || stateless.contains(t))
    })
}

/// Per user chain of `side`, the rules that jump or go to it: (their
/// chain, their place in it), in the order saved.
fn callers(side: &SavedTable) -> HashMap<Vec<u8>, Vec<(Vec<u8>, usize)>> {
    let mut at: HashMap<&[u8], usize> = HashMap::new();
    let mut callers: HashMap<Vec<u8>, Vec<(Vec<u8>, usize)>> = HashMap::new();
    for (chain, rule) in &side.rules {
        let place = at.entry(chain.as_slice()).or_insert(0);
        for t in targets(rule).into_iter().filter(|t| side.is_user_chain(t)) {
            callers.entry(t).or_default().push((chain.clone(), *place));
        }
        *place += 1;
    }
    callers
}
