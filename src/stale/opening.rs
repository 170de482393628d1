//! What of a stale table may go without a twin in the host's backend, and
//! whether the host's backend holds the twin of everything else.
//!
//! Nothing here asks what the live backend reads: a stale rule goes
//! without a twin only where it changes nothing any reader can see, by a
//! short allowlist (`Need`; docs/mixed-state.md has it as a table). Every
//! other rule, and every non-`ACCEPT` policy, must be in the live backend
//! too, in the same table and chain (compared as printed, counters aside):
//! - a rule that can only block or queue what it matches (`DROP`,
//!   `REJECT`, `NFQUEUE`, `QUEUE`, a `-g`, a jump to a chain of only such
//!   rules) reached the same way there: the rules before it that could
//!   end the chain other than by blocking, or change a packet, are the
//!   same rules in both, in order, with the same user chains behind them
//!   (the stale chain may have more that only take packets out); where a
//!   rule before it keeps state of its own (`limit`, `statistic`,
//!   `connlimit`), every rule before it is the same, since other packets
//!   would feed that state;
//! - a policy likewise, over its whole chain;
//! - any other rule (one that changes packets, `MARK`, `CT`, `TTL`, a
//!   verdict not known here such as `HMARK`, or one that loads a match
//!   that may write what others read), and a jump to a chain holding one,
//!   in its whole chain's twin: the live chain holds the same rules in the
//!   same order, and the user chains behind them likewise, so no `ACCEPT`
//!   before it and no rule after it that undoes it (a `MARK 0`) makes the
//!   twin another rule.
//!
//! The `security` table's twins never count: the two backends hook it at
//! different priorities (legacy at 50, iptables-nft at 150, a nat `INPUT`
//! chain at 100 between them). The live side is what [`super::live_save`]
//! proves it holds; for nft only iptables-nft's own tables and base chains
//! count. Rules of a user chain that no built-in chain reaches filter
//! nothing, but are loaded all the same. Wherever a rule goes without a
//! twin, what it keeps on (connection tracking, defragmentation) must stay
//! on by the live rules (`kept_live`), and a rule no chain reaches must
//! keep alive nothing shared by name (a `recent` list).
//!
//! Beside the twins, the fates of packets (`super::fates`) send concrete
//! packets through both copies and the live one alone: a packet whose
//! removal lets it through holds its table even where every item has its
//! twin, and a held table names it ("removing it opens: ..."), or the rule
//! the model could not evaluate.

use super::difference::{self, Compared, Difference};
use super::effects::{self, Kept, Kind};
use super::fates;
use super::hooks;
use super::live_save::proven_live_save;
use super::same_way::Twins;
use super::saved_rules::{
    goes_to, item_chain, keeps, keeps_no_shared_state, nat_keeps_no_unmodelled_state, parse, surely_keeps, targets,
    SavedTable, BUILTIN_CHAINS,
};
use crate::family::Family;
use crate::mode::Mode;
use std::collections::HashMap;
use std::path::Path;

/// What the live backend must hold for a stale rule to go, least first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Need {
    /// Nothing: the rule changes nothing any reader can see.
    Nothing,
    /// The same rule in the same chain, reached the same way: it can only
    /// block or queue the packets it matches (`DROP`, `REJECT`, `NFQUEUE`,
    /// `QUEUE`), or goes to a chain needing no more.
    TwinInOrder,
    /// The whole chain's twin ([`Twins::whole_chain`]): it changes packets, loads a
    /// match that may write what others read, or does what is not known
    /// here (a verdict not listed), so the rules after it count too (a
    /// live `MARK` after a twin may undo what it does).
    Twin,
}

/// The principle of docs/mixed-state.md a held item fails, named in its
/// table's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Principle {
    Policy,
    KeepsOn,
    Block,
    Change,
    Loaded,
    Security,
}

impl Principle {
    fn said(self) -> &'static str {
        match self {
            Principle::Policy => "a policy other than ACCEPT needs the same policy, its chain reaching it the same way",
            Principle::KeepsOn => {
                "a rule that keeps on what no live rule keeps on (conntrack, defragmentation) needs its twin"
            }
            Principle::Block => "a block needs its twin, reached the same way",
            Principle::Change => "a change, a shared state or a name not known needs its whole chain's twin",
            Principle::Loaded => {
                "a rule nothing reaches that keeps something on or alive needs its twin in the live chain"
            }
            Principle::Security => {
                "the security table's twins never count: the backends hook it at different priorities"
            }
        }
    }
}

/// What each user chain of one table needs (see [`Need`]), computed once.
struct Needs<'a> {
    table: &'a SavedTable,
    nat: bool,
    /// What stays on in the family without the stale backend's rules (see
    /// [`kept_live`]).
    kept_live: Kept,
    chains: HashMap<Vec<u8>, Need>,
}

impl<'a> Needs<'a> {
    fn new(table: &'a SavedTable, name: &[u8], kept_live: Kept) -> Needs<'a> {
        Needs {
            table,
            nat: name == b"nat",
            kept_live,
            chains: HashMap::new(),
        }
    }

    /// What `rule` needs: `Nothing` for an allowlisted verdict (`ACCEPT`,
    /// `RETURN`, logging) or no verdict, with matches that keep no shared
    /// state, and in nat for the NAT verdicts and `MARK` whatever their
    /// matches (kube-proxy's stale DNATs, with the session affinity's
    /// `recent` and the `KUBE-MARK-MASQ` and `KUBE-MARK-DROP` marks); a
    /// jump or a go to a user chain needs what its rules need (a go at
    /// least `TwinInOrder`). A verdict that only blocks or queues makes a
    /// `TwinInOrder`; a match that may keep shared state, a verdict that
    /// changes packets (`MARK`, ...) and any verdict not known here a
    /// `Twin`. A rule that keeps on what the live rules do not (connection
    /// tracking, defragmentation) needs a twin too (one would keep it on).
    fn of_rule(&mut self, rule: &[u8]) -> Need {
        let mut need = if keeps_no_shared_state(rule) || (self.nat && nat_keeps_no_unmodelled_state(rule)) {
            Need::Nothing
        } else {
            Need::Twin
        };
        if keeps(rule) > self.kept_live {
            need = need.max(Need::TwinInOrder);
        }
        if goes_to(rule) {
            need = need.max(Need::TwinInOrder);
        }
        for target in targets(rule) {
            let effect = effects::of(&target, Kind::Target);
            let of_target = if self.table.is_user_chain(&target) {
                self.of_chain(&target)
            } else if effect.seen_by_none() || (self.nat && effect.goes_in_nat) {
                Need::Nothing
            } else if effect.only_ends() {
                Need::TwinInOrder
            } else {
                Need::Twin
            };
            need = need.max(of_target);
        }
        need
    }

    /// What a user chain needs: the most any of its rules needs (a chain
    /// reached again while being judged, which iptables refuses, counts as
    /// needing the most).
    fn of_chain(&mut self, chain: &[u8]) -> Need {
        if let Some(&need) = self.chains.get(chain) {
            return need;
        }
        self.chains.insert(chain.to_vec(), Need::Twin);
        let rules = self.table.chain(chain);
        let need = rules.iter().map(|r| self.of_rule(r)).max().unwrap_or(Need::Nothing);
        self.chains.insert(chain.to_vec(), need);
        need
    }
}

/// Whether loading `rule` (of `table`) keeps alive no state shared by
/// name: neither its matches nor its verdicts (a user chain aside) keep
/// state another rule reads (a queue's number is no state; `IDLETIMER`,
/// `RATEEST` and `CT --timeout` name theirs).
fn names_nothing_shared(rule: &[u8], table: &SavedTable) -> bool {
    keeps_no_shared_state(rule)
        && targets(rule)
            .iter()
            .all(|t| table.is_user_chain(t) || effects::of(t, Kind::Target).shares_nothing())
}

/// The tables whose twins in the other backend do not count: iptables-nft
/// hooks `security` at priority 150, legacy at 50, so a nat `INPUT` chain
/// (100) or a native one between them meets packets between the two.
const NO_TWIN_ACROSS_BACKENDS: [&[u8]; 1] = [b"security"];

/// The items of the stale table `name` that `live` (the same table of the
/// host's backend, if any) does not hold a twin of, as lines: each rule as
/// printed and each non-ACCEPT policy as `:CHAIN POLICY`. A policy's twin
/// is the same policy on the live chain, which its whole chain brings
/// packets to as the stale one does (a stale `RETURN` or `-g` in a
/// built-in chain, which sends packets to its policy at once, is then in
/// the live chain too).
fn unenforced_items(name: &[u8], table: &SavedTable, live: Option<&SavedTable>, kept_live: Kept) -> Held {
    let empty = SavedTable::default();
    // What the live backend holds, shown as it is; its twins count
    // only where the table's do.
    let shown_live = live.unwrap_or(&empty);
    let counted = !NO_TWIN_ACROSS_BACKENDS.contains(&name);
    let live = if counted { shown_live } else { &empty };
    let mut twins = Twins::new(table, live);
    let mut needs = Needs::new(table, name, kept_live);
    let mut items = Vec::new();
    let mut principle = None;
    let mut held = |item: Vec<u8>, why: Principle| {
        principle.get_or_insert(if counted { why } else { Principle::Security });
        items.push(item);
    };
    for (chain, policy) in &table.policies {
        if policy.as_slice() == b"-" || policy.as_slice() == b"ACCEPT" {
            continue;
        }
        let enforced = live.policy(chain) == Some(policy.as_slice()) && twins.policy_reached_same_way(chain);
        if !enforced {
            held([b":".as_slice(), chain, b" ", policy].concat(), Principle::Policy);
        }
    }
    let reachable = table.reachable_chains();
    let mut index: HashMap<&[u8], usize> = HashMap::new();
    for (chain, line) in &table.rules {
        let at = index.entry(chain.as_slice()).or_insert(0);
        *at += 1;
        let at = *at - 1;
        if !reachable.contains(chain) {
            // It filters nothing, but the kernel loads it all the same:
            // it keeps on what it needs, and alive what it names (a
            // `recent` list, a `hashlimit` table the live rules share),
            // unless the live chain loads the same rule.
            let only_loaded = keeps(line) <= kept_live && names_nothing_shared(line, table);
            if !only_loaded && !live.chain(chain).contains(&line.as_slice()) {
                held(line.clone(), Principle::Loaded);
            }
            continue;
        }
        let need = needs.of_rule(line);
        let enforced = match need {
            Need::Nothing => true,
            Need::Twin => twins.whole_chain(chain),
            Need::TwinInOrder => twins.in_order(chain, at),
        };
        if !enforced {
            let why = match need {
                Need::Twin => Principle::Change,
                _ if keeps(line) > kept_live => Principle::KeepsOn,
                _ => Principle::Block,
            };
            held(line.clone(), why);
        }
    }
    let blocks_alone = items
        .iter()
        .find(|item| counted && blocks_alone(item, table, live))
        .cloned();
    let difference = items
        .first()
        .and_then(|item| difference::first(table, shown_live, item_chain(item)));
    Held {
        compared: difference::compared(table, shown_live, &items),
        principle,
        items,
        blocks_alone,
        difference,
    }
}

/// Whether the held `item` of `stale` blocks (or queues) packets with no
/// such item in `live`: a policy other than the live chain's, or a rule
/// whose verdict only blocks or queues that the live chain does not hold.
/// Removing it may open the host; other held items are only not proven
/// safe (the live copy holds them, elsewhere or reached otherwise).
fn blocks_alone(item: &[u8], stale: &SavedTable, live: &SavedTable) -> bool {
    let chain = item_chain(item);
    if item.starts_with(b":") {
        let policy = item.split(|&b| b == b' ').nth(1).unwrap_or_default();
        return live.policy(chain) != Some(policy);
    }
    targets(item)
        .iter()
        .any(|t| !stale.is_user_chain(t) && effects::of(t, Kind::Target).only_ends())
        && !live.chain(chain).contains(&item)
}

/// What holds one stale table: the items the live table holds no twin of
/// (none: it may go), the first of them that blocks with no such item
/// live, and where the chain of the first of them
/// first differs from the live one.
pub struct Held {
    pub items: Vec<Vec<u8>>,
    blocks_alone: Option<Vec<u8>>,
    /// The principle the first item fails.
    principle: Option<Principle>,
    difference: Option<Difference>,
    /// The held chains that differ from the live ones, rule against rule.
    compared: Vec<Compared>,
}

/// Per name in `tables`: the items of that table in `stale_save` that
/// `live_save` does not hold a twin of (empty: it may go); for a table in
/// `no_twin`, every item that needs a twin. With `own`
/// (nft's tables that are iptables-nft's, each with its base chains), only
/// those tables of `live_save` count, and in them a built-in chain's name
/// only where it is such a base chain.
pub fn unenforced(
    stale_save: &[u8],
    live_save: &[u8],
    own: Option<&[(&str, Vec<String>)]>,
    no_twin: &[&str],
    tables: &[&str],
) -> Vec<Held> {
    unenforced_in(&parse(stale_save), &live_tables(live_save, own), no_twin, tables)
}

/// [`unenforced`] over saves already read (the live one cut by
/// [`live_tables`]).
fn unenforced_in(
    stale: &[(Vec<u8>, SavedTable)],
    live: &[(Vec<u8>, SavedTable)],
    no_twin: &[&str],
    tables: &[&str],
) -> Vec<Held> {
    let kept = kept_live(live);
    tables
        .iter()
        .map(|name| {
            let Some((_, table)) = stale.iter().find(|(n, _)| n.as_slice() == name.as_bytes()) else {
                return Held {
                    items: Vec::new(),
                    blocks_alone: None,
                    principle: None,
                    difference: None,
                    compared: Vec::new(),
                };
            };
            let live_table = live
                .iter()
                .find(|(n, _)| n.as_slice() == name.as_bytes() && !no_twin.contains(name))
                .map(|(_, t)| t);
            unenforced_items(name.as_bytes(), table, live_table, kept)
        })
        .collect()
}

/// The tables of `live_save`; with `own` (nft's tables that are
/// iptables-nft's, each with its base chains), only those, and in them a
/// built-in chain's name only where it is such a base chain.
fn live_tables(live_save: &[u8], own: Option<&[(&str, Vec<String>)]>) -> Vec<(Vec<u8>, SavedTable)> {
    let mut live = parse(live_save);
    if let Some(own) = own {
        live.retain_mut(|(name, table)| {
            let Some((_, base)) = own.iter().find(|(n, _)| n.as_bytes() == name.as_slice()) else {
                return false;
            };
            table.retain_chains(|chain| !BUILTIN_CHAINS.contains(&chain) || base.iter().any(|b| b.as_bytes() == chain));
            true
        });
    }
    live
}

/// What stays on in the family once the stale backend is emptied: the
/// most any live rule surely keeps on, in any chain (a nat table alone
/// keeps nothing on: its NAT verdicts do; a chain named like a verdict, a
/// comment's words and `CT --notrack` keep nothing on; `socket` and
/// `TPROXY` defragmentation alone). Users outside iptables (a native
/// nftables `ct` rule, IPVS) are not read, so they do not count.
fn kept_live(live: &[(Vec<u8>, SavedTable)]) -> Kept {
    live.iter()
        .flat_map(|(_, table)| table.rules.iter().map(move |(_, rule)| surely_keeps(rule, table)))
        .max()
        .unwrap_or(Kept::Nothing)
}

/// Why emptying a stale table is not proven safe, its held chains stale
/// against live, rule against rule (from the witness's first stale rule),
/// and the witness packet where one opens.
pub struct Opening {
    pub why: String,
    pub side_by_side: Vec<String>,
    pub witness: Option<fates::Witness>,
}

/// Per name in `tables` (of `stale`'s save in `family`): why emptying it
/// is not proven safe (None: `live` holds a twin of every item it holds);
/// a change that holds nothing (see `fates::judged`); packets tried.
pub fn openings(
    stale_save: &[u8],
    live: Mode,
    family: Family,
    tables: &[&str],
    private_lock: &Path,
) -> Result<Judgement, String> {
    let live_save =
        proven_live_save(live, family, private_lock).map_err(|why| format!("{live} {}: {why}", family.label()))?;
    let native = hooks::others(family, live_save.own.as_deref())?;
    let shared = hooks::shared(&native);
    let no_twin: Vec<&str> = shared.iter().map(|(table, _)| *table).collect();
    let stale = parse(stale_save);
    let live_copy = live_tables(&live_save.exact, live_save.own.as_deref());
    let host = fates::Host::read(family, &native);
    let (found, changes, tried) = fates::judged(&stale, live.other().name(), &live_copy, live.name(), tables, &host);
    Ok((
        unenforced_in(&stale, &live_copy, &no_twin, tables)
            .into_iter()
            .zip(tables)
            .zip(&found)
            .map(|((held, table), found)| {
                let inexact = live_save.inexact.iter().find(|(name, _)| name == table);
                let between = shared.iter().find(|(name, _)| name == table);
                let uncounted = match (inexact, between) {
                    (_, Some((_, chain))) => Some(format!(
                        "the base chain {chain} hooks where it does, at its priority, so it can run between the two backends' copies"
                    )),
                    (Some((_, why)), None) => Some(why.clone()),
                    (None, None) => None,
                };
                let why = fates::said(found, describe(&held, live, uncounted.as_deref()));
                let copies = (&stale[..], &live_copy[..], live.other().name(), live.name());
                why.map(|why| Opening {
                    why,
                    side_by_side: difference::witness_first(&held.compared, found.first_place(), copies),
                    witness: found.witness().cloned(),
                })
            })
            .collect(),
        changes,
        tried,
    ))
}

/// What [`openings`] says.
type Judgement = (Vec<Option<Opening>>, Vec<Option<fates::Witness>>, usize);

/// Items shown at most in one line.
const ITEMS_SHOWN: usize = 20;

/// "removing it may open the host (nft holds no `-A INPUT ... -j DROP`,
/// which blocks): 2 items that nft holds no twin of: ...; where the first
/// of them differs: chain INPUT, rule 2: ...", or "removing it is not
/// proven safe: ..." where each held item is held in the live copy too,
/// elsewhere or reached otherwise; naming why the live table was not
/// counted (`uncounted`).
fn describe(held: &Held, live: Mode, uncounted: Option<&str>) -> Option<String> {
    let items = &held.items;
    if items.is_empty() {
        return None;
    }
    let shown: Vec<String> = items
        .iter()
        .take(ITEMS_SHOWN)
        .map(|item| String::from_utf8_lossy(item).into_owned())
        .collect();
    let more = items.len().saturating_sub(ITEMS_SHOWN);
    let verdict = match &held.blocks_alone {
        Some(item) => format!(
            "removing it may open the host ({live} holds no `{}`, which blocks)",
            String::from_utf8_lossy(item)
        ),
        None => "removing it is not proven safe".to_string(),
    };
    Some(format!(
        "{verdict}: {} item{} that {live} holds no twin of{}{}: {}{}{}",
        items.len(),
        if items.len() == 1 { "" } else { "s" },
        held.principle
            .map(|p| format!(" (principle of the first: {})", p.said()))
            .unwrap_or_default(),
        uncounted
            .map(|why| format!(" (its own table of that name was not counted: {why})"))
            .unwrap_or_default(),
        shown.join("; "),
        if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        },
        held.difference
            .as_ref()
            .map(|d| format!(
                "; where the first of them differs: {}",
                d.shown(live.other().name(), live.name())
            ))
            .unwrap_or_default()
    ))
}

#[cfg(test)]
#[path = "opening_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "opening_said_tests.rs"]
mod said_tests;
