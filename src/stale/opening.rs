//! Whether emptying a stale table would open the host: which of its items
//! the backend the host uses does not also enforce.
//!
//! Items are the rules whose verdict is not known not to filter (`DROP`,
//! `REJECT`, `NFQUEUE`, `QUEUE`, any target not listed in `saved_rules`),
//! jumps or gotos to a user chain that reaches one, the built-in chains'
//! policies other than `ACCEPT`, and the rules that set what a live rule
//! reads (a mark, a conntrack state, a recent list), in chains a packet
//! can reach. A filtering item is enforced when the live chain of the same
//! name holds it (compared as printed, counters aside) and the rules before
//! it bring every packet to it in the same state: the rules that could end
//! the chain other than by blocking, or change a packet, are the same in
//! both, in order, with the same user chains behind them (the stale chain
//! may have more that only take packets out). A policy likewise, over its
//! whole chain. A rule that only sets what is read is enforced where the
//! live chain holds it, in any order. The live side is what
//! [`super::live_save`] proves it holds; for nft only iptables-nft's own
//! tables and base chains count, and native tables beside them make every
//! read count as read. Removing anything else cannot open a host the live
//! backend still filters.

use super::find;
use super::live_save::{native_tables, proven_live_save};
use super::proof::Verdicts;
use super::saved_rules::{parse, sets_what_is_read, targets, SavedTable, BUILTIN_CHAINS, SET_AND_READ_ALL};
use crate::family::Family;
use crate::mode::Mode;
use std::collections::HashSet;
use std::path::Path;

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

/// The rules of `rules` that could end the evaluation other than by
/// blocking, or change what a later rule matches (see
/// [`SavedTable::harmless`]).
fn significant<'a>(rules: &[&'a [u8]], table: &SavedTable, harmless: &HashSet<Vec<u8>>) -> Vec<&'a [u8]> {
    rules.iter().copied().filter(|r| !table.harmless(r, harmless)).collect()
}

/// Whether the live rules `before` (of one chain) bring to what follows
/// every packet the stale chain's rules `stale_before` do, in the same
/// state: the rules of each that could end the evaluation other than by
/// blocking or change a packet are the same, in the same order, and the
/// user chains they jump to are the same in both. Rules that only log or
/// block may differ, and the stale chain may have more rules that only
/// take packets out of it ([`SavedTable::exits`]): those packets never
/// reach what follows there. `to_policy`: what follows is the policy.
fn same_way_in(
    before: &[&[u8]],
    stale_before: &[&[u8]],
    stale: &SavedTable,
    live: &SavedTable,
    harmless: &Harmless,
    to_policy: bool,
) -> bool {
    let live_significant = significant(before, live, &harmless.live);
    let mut stale_significant = significant(stale_before, stale, &harmless.stale);
    stale_significant.retain(|r| live_significant.contains(r) || !stale.exits(r, to_policy, &harmless.stale_exiting));
    live_significant == stale_significant
        && live_significant
            .iter()
            .all(|rule| same_chains(rule, stale, live, &mut HashSet::new()))
}

/// The harmless user chains of each side (see [`SavedTable::harmless_chains`]),
/// and the stale side's exiting ones ([`SavedTable::exiting_chains`]).
struct Harmless {
    stale: HashSet<Vec<u8>>,
    live: HashSet<Vec<u8>>,
    stale_exiting: HashSet<Vec<u8>>,
}

/// The filtering items of the stale `table` that `live` (the same table of
/// the host's backend, if any) does not also enforce, as lines: each rule
/// as printed and each non-ACCEPT policy as `:CHAIN POLICY`. A rule whose
/// own verdict or stateful match sets what one of `live_reads` reads (the
/// match modules the live backend's rules load outside `nat`: a mark, a
/// conntrack state, a recent list) is an item too: the live filters may
/// depend on it.
///
/// Rules of a user chain that no built-in chain reaches are no items.
/// A filtering rule is enforced when the live chain of the same name holds
/// it and the rules before it in both chains bring every packet to it in
/// the same state ([`same_way_in`]); a rule that only changes packets, when
/// the live chain holds it with the same user chains behind it. A jump to a user chain is judged by what it
/// reaches: the filtering rules of that chain are items of their own,
/// checked the same way. A policy is enforced when the live chain has the
/// same one and its whole chain brings packets to it as the stale one
/// does; a stale `RETURN` or `-g` in a built-in chain, which sends packets
/// to its policy at once, is then in the live chain too.
fn unenforced_items(table: &SavedTable, live: Option<&SavedTable>, live_reads: &HashSet<Vec<u8>>) -> Vec<Vec<u8>> {
    let filtering_chains = table.filtering_chains();
    let empty = SavedTable::default();
    let live = live.unwrap_or(&empty);
    let harmless = Harmless {
        stale: table.harmless_chains(),
        live: live.harmless_chains(),
        stale_exiting: table.exiting_chains(),
    };
    let mut items = Vec::new();
    for (chain, policy) in &table.policies {
        if policy.as_slice() == b"-" || policy.as_slice() == b"ACCEPT" {
            continue;
        }
        let enforced = live.policy(chain) == Some(policy.as_slice())
            && same_way_in(&live.chain(chain), &table.chain(chain), table, live, &harmless, true);
        if !enforced {
            items.push([b":".as_slice(), chain, b" ", policy].concat());
        }
    }
    let reachable = table.reachable_chains();
    let mut index: Vec<(Vec<u8>, usize)> = Vec::new();
    for (chain, line) in &table.rules {
        let at = match index.iter_mut().find(|(c, _)| c == chain) {
            Some((_, n)) => {
                *n += 1;
                *n - 1
            }
            None => {
                index.push((chain.clone(), 1));
                0
            }
        };
        if !reachable.contains(chain) {
            continue;
        }
        let filtering = table.filters(line, &filtering_chains);
        if !filtering && !sets_what_is_read(line, live_reads) {
            continue;
        }
        let stale_rules = table.chain(chain);
        let live_rules = live.chain(chain);
        let at_live = live_rules.iter().position(|r| *r == line.as_slice());
        let enforced = if filtering {
            at_live.is_some_and(|i| same_way_in(&live_rules[..i], &stale_rules[..at], table, live, &harmless, false))
        } else {
            // A rule that only changes packets: the live chain does the
            // same change, to the same chains; kube-proxy writes its nat
            // rules in another order on each start.
            at_live.is_some() && same_chains(line, table, live, &mut HashSet::new())
        };
        if !enforced {
            items.push(line.clone());
        }
    }
    items
}

/// Per name in `tables`: the filtering items of that table in `stale_save`
/// that `live_save` does not also enforce (empty: removing it opens
/// nothing). With `own` (nft's tables that are iptables-nft's, each with
/// its base chains), only those tables of `live_save` count, and in them a
/// built-in chain's name only where it is such a base chain.
pub fn unenforced(
    stale_save: &[u8],
    live_save: &[u8],
    own: Option<&[(&str, Vec<String>)]>,
    tables: &[&str],
    live_unread: bool,
) -> Vec<Vec<Vec<u8>>> {
    let stale = parse(stale_save);
    let mut live = parse(live_save);
    if let Some(own) = own {
        live.retain_mut(|(name, table)| {
            let Some((_, base)) = own.iter().find(|(n, _)| n.as_bytes() == name.as_slice()) else {
                return false;
            };
            let counts = |chain: &[u8]| !BUILTIN_CHAINS.contains(&chain) || base.iter().any(|b| b.as_bytes() == chain);
            table.policies.retain(|(chain, _)| counts(chain));
            table.rules.retain(|(chain, _)| counts(chain));
            true
        });
    }
    // What the live backend's rules read (marks, conntrack state, sets);
    // a live table not read exactly may read anything.
    let live_reads: HashSet<Vec<u8>> = if live_unread {
        SET_AND_READ_ALL.iter().map(|m| m.to_vec()).collect()
    } else {
        live.iter().flat_map(|(name, table)| table.modules_read(name)).collect()
    };
    tables
        .iter()
        .map(|name| {
            let Some((_, table)) = stale.iter().find(|(n, _)| n.as_slice() == name.as_bytes()) else {
                return Vec::new();
            };
            let live_table = live
                .iter()
                .find(|(n, _)| n.as_slice() == name.as_bytes())
                .map(|(_, t)| t);
            unenforced_items(table, live_table, &live_reads)
        })
        .collect()
}

/// Per name in `tables` (of `stale`'s save in `family`): why emptying it
/// would open the host, or None when the host's backend `live` enforces
/// every filtering item it holds.
pub fn openings(
    stale_save: &[u8],
    live: Mode,
    family: Family,
    tables: &[&str],
    private_lock: &Path,
) -> Result<Vec<Option<String>>, String> {
    let live_save =
        proven_live_save(live, family, private_lock).map_err(|why| format!("{live} {}: {why}", family.label()))?;
    // Native nftables tables filter too, and are not read here: what they
    // match is taken as unknown.
    let native = native_tables(family)?;
    Ok(unenforced(
        stale_save,
        &live_save.exact,
        live_save.own.as_deref(),
        tables,
        !live_save.inexact.is_empty() || !native.is_empty(),
    )
    .into_iter()
    .zip(tables)
    .map(|(items, table)| {
        let inexact = live_save.inexact.iter().find(|(name, _)| name == table);
        describe(&items, live, inexact.map(|(_, why)| why.as_str()), &native)
    })
    .collect())
}

/// Per table of `names` in the stale `save`: why emptying it would open
/// the host that `live` filters (None: it would not, or `allow_opening`).
pub fn held_back(
    save: &[u8],
    live: Mode,
    family: Family,
    names: &[&str],
    allow_opening: bool,
    private_lock: &Path,
) -> Result<Vec<Option<String>>, String> {
    if allow_opening {
        return Ok(vec![None; names.len()]);
    }
    openings(save, live, family, names, private_lock)
        .map_err(|why| format!("whether removing it would open the host is unknown: {why}; nothing removed"))
}

/// A proof's verdicts for the tables `names`, with each table that would
/// open the host left as it was ("... (--allow-opening removes it
/// anyway)"), and the backup cut to the tables still to be emptied: an undo
/// never replaces a table the removal left alone.
pub fn held_open((save, mut verdicts): Verdicts, opens: Vec<Option<String>>, names: &[&str]) -> Verdicts {
    for (verdict, open) in verdicts.iter_mut().zip(opens) {
        if let (Ok(()), Some(why)) = (&verdict, open) {
            *verdict = Err(format!("{why} (--allow-opening removes it anyway)"));
        }
    }
    let emptied: Vec<&str> = names
        .iter()
        .zip(&verdicts)
        .filter(|(_, verdict)| verdict.is_ok())
        .map(|(name, _)| *name)
        .collect();
    (find::sections(&save, &emptied), verdicts)
}

/// Items shown at most in one line.
const ITEMS_SHOWN: usize = 20;

/// "removing it would open the host: 2 filtering items that nft does not
/// enforce: ...", naming why the live table was not counted (`inexact`).
fn describe(items: &[Vec<u8>], live: Mode, inexact: Option<&str>, native: &[String]) -> Option<String> {
    if items.is_empty() {
        return None;
    }
    let shown: Vec<String> = items
        .iter()
        .take(ITEMS_SHOWN)
        .map(|item| String::from_utf8_lossy(item).into_owned())
        .collect();
    let more = items.len().saturating_sub(ITEMS_SHOWN);
    Some(format!(
        "removing it would open the host: {} filtering item{} that {live} does not enforce{}: {}{}",
        items.len(),
        if items.len() == 1 { "" } else { "s" },
        inexact
            .map(|why| format!(" (its own table of that name was not counted: {why})"))
            .into_iter()
            .chain((!native.is_empty()).then(|| {
                format!(
                    " (nftables tables this check does not read filter too, so what they match counts as read: {})",
                    native.join(", ")
                )
            }))
            .collect::<String>(),
        shown.join("; "),
        if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::unenforced;

    fn shown(items: Vec<Vec<Vec<u8>>>) -> Vec<Vec<String>> {
        items
            .into_iter()
            .map(|t| t.into_iter().map(|i| String::from_utf8(i).unwrap()).collect())
            .collect()
    }

    const FERM: &[u8] = b"*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:blocked - [0:0]\n-A INPUT -i lo -j ACCEPT\n-A INPUT -s 192.0.2.0/24 -j blocked\n-A INPUT -p tcp -m tcp --dport 22 -j REJECT --reject-with icmp-port-unreachable\n-A blocked -j DROP\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j MASQUERADE\nCOMMIT\n";

    #[test]
    fn drops_rejects_chains_leading_to_them_and_policies_are_filtering() {
        assert_eq!(
            shown(unenforced(FERM, b"", None, &["filter", "nat", "raw"], false)),
            [
                vec![
                    ":INPUT DROP",
                    "-A INPUT -s 192.0.2.0/24 -j blocked",
                    "-A INPUT -p tcp -m tcp --dport 22 -j REJECT --reject-with icmp-port-unreachable",
                    "-A blocked -j DROP",
                ],
                vec![],
                vec![]
            ]
        );
    }

    #[test]
    fn the_same_items_in_the_live_backend_enforce_them() {
        let live = b"# Generated by iptables-nft-save\n*filter\n:INPUT DROP [5:300]\n:blocked - [0:0]\n[3:120] -A INPUT -s 192.0.2.0/24 -j blocked\n-A INPUT -p tcp -m tcp --dport 22 -j REJECT --reject-with icmp-port-unreachable\n-A blocked -j DROP\nCOMMIT\n";
        assert_eq!(
            shown(unenforced(FERM, live, None, &["filter"], false)),
            [Vec::<String>::new()]
        );
        // In another table, or another chain, it is not the same item.
        let elsewhere = b"*mangle\n:INPUT DROP [0:0]\n-A INPUT -s 192.0.2.0/24 -j blocked\nCOMMIT\n";
        assert_eq!(shown(unenforced(FERM, elsewhere, None, &["filter"], false))[0].len(), 4);
    }

    #[test]
    fn a_comment_cannot_hide_a_verdict() {
        let save = b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m comment --comment \"x\\\" -j ACCEPT\" -j DROP\n-A INPUT -m comment --comment \"-j DROP\" -j ACCEPT\nCOMMIT\n";
        assert_eq!(
            shown(unenforced(save, b"", None, &["filter"], false))[0],
            ["-A INPUT -m comment --comment \"x\\\" -j ACCEPT\" -j DROP"]
        );
    }

    #[test]
    fn verdicts_not_known_not_to_filter_are_filtering() {
        let save = b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j NFQUEUE --queue-num 3\n-A INPUT -j QUEUE\n-A INPUT -j SOMETHING\n-A INPUT -j LOG\n-A INPUT -p tcp\n-A INPUT -j ACCEPT\nCOMMIT\n";
        assert_eq!(
            shown(unenforced(save, b"", None, &["filter"], false))[0],
            [
                "-A INPUT -j NFQUEUE --queue-num 3",
                "-A INPUT -j QUEUE",
                "-A INPUT -j SOMETHING"
            ]
        );
    }

    #[test]
    fn a_drop_the_live_chain_reaches_only_behind_an_accept_is_not_enforced() {
        let stale = b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n";
        let behind =
            b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j ACCEPT\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n";
        assert_eq!(shown(unenforced(stale, behind, None, &["filter"], false))[0].len(), 1);
        // Behind a LOG, a DROP or a chain that only drops, it is.
        let harmless = b"*filter\n:INPUT ACCEPT [0:0]\n:x - [0:0]\n-A INPUT -j LOG\n-A INPUT -s 192.0.2.1/32 -j DROP\n-A INPUT -j x\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\n-A x -s 192.0.2.2/32 -j DROP\nCOMMIT\n";
        assert_eq!(shown(unenforced(stale, harmless, None, &["filter"], false))[0].len(), 0);
        // A jump to a chain that may accept, not in the stale chain: not.
        let jump = b"*filter\n:INPUT ACCEPT [0:0]\n:x - [0:0]\n-A INPUT -j x\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\n-A x -j RETURN\nCOMMIT\n";
        assert_eq!(shown(unenforced(stale, jump, None, &["filter"], false))[0].len(), 1);
        // A policy behind a live ACCEPT the stale chain lacks: not.
        let policy = b"*filter\n:FORWARD DROP [0:0]\nCOMMIT\n";
        let accepting = b"*filter\n:FORWARD DROP [0:0]\n-A FORWARD -j ACCEPT\nCOMMIT\n";
        assert_eq!(
            shown(unenforced(policy, accepting, None, &["filter"], false))[0],
            [":FORWARD DROP"]
        );
        assert_eq!(shown(unenforced(policy, policy, None, &["filter"], false))[0].len(), 0);
    }

    #[test]
    fn a_user_chain_nothing_reaches_filters_nothing() {
        let stale = b"*filter\n:INPUT ACCEPT [0:0]\n:OLD - [0:0]\n-A OLD -s 192.0.2.1/32 -j DROP\nCOMMIT\n";
        assert_eq!(shown(unenforced(stale, b"", None, &["filter"], false))[0].len(), 0);
    }

    #[test]
    fn a_jump_is_judged_by_the_chain_it_reaches() {
        let stale = b"*filter\n:INPUT ACCEPT [0:0]\n:x - [0:0]\n-A INPUT -j x\n-A x -j DROP\nCOMMIT\n";
        let returning =
            b"*filter\n:INPUT ACCEPT [0:0]\n:x - [0:0]\n-A INPUT -j x\n-A x -j RETURN\n-A x -j DROP\nCOMMIT\n";
        assert_eq!(
            shown(unenforced(stale, returning, None, &["filter"], false))[0],
            ["-A x -j DROP"]
        );
        assert_eq!(shown(unenforced(stale, stale, None, &["filter"], false))[0].len(), 0);
    }
}
