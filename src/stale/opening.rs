//! What of a stale table may go without a twin in the host's backend, and
//! whether the host's backend holds the twin of everything else.
//!
//! Nothing here asks what the live backend reads: a stale rule goes
//! without a twin only where it changes nothing any reader can see, by a
//! short allowlist (`Need`; docs/mixed-state.md has it as a table). Every
//! other rule, and every non-`ACCEPT` policy, must be in the live backend
//! too, in the same table and chain
//! (compared as printed, counters aside). A rule that can end or leave the
//! chain (`DROP`, `REJECT`, `NFQUEUE`, `-g`, an unknown verdict, a jump to
//! a chain holding one) must be reached the same way there: the rules
//! before it that could end the chain other than by blocking, or change a
//! packet, are the same rules in both, in order, with the same user chains
//! behind them (the stale chain may have more that only take packets
//! out). A policy likewise, over its whole chain. A rule that only changes
//! packets (`MARK`, `CT`, `TTL`, ...) must be there in any order
//! (kube-proxy reorders), with the same user chains behind it. The live
//! side is what [`super::live_save`] proves it holds; for nft only
//! iptables-nft's own tables and base chains count. Rules of a user chain
//! that no built-in chain reaches filter nothing.

use super::live_save::proven_live_save;
use super::saved_rules::{
    goes_to, keeps_no_shared_state, parse, targets, SavedTable, BUILTIN_CHAINS, CHANGING_TARGETS, NAT_TARGETS,
    SEEN_BY_NONE_TARGETS,
};
use crate::family::Family;
use crate::mode::Mode;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// What the live backend must hold for a stale rule to go, least first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Need {
    /// Nothing: the rule changes nothing any reader can see.
    Nothing,
    /// The same rule in the same chain, in any order: it changes packets.
    Twin,
    /// The same rule in the same chain, reached the same way: it can end
    /// or leave the chain (filters, queues, goes to a chain).
    TwinInOrder,
}

/// What each user chain of one table needs (see [`Need`]), computed once.
struct Needs<'a> {
    table: &'a SavedTable,
    nat: bool,
    chains: HashMap<Vec<u8>, Need>,
}

impl<'a> Needs<'a> {
    fn new(table: &'a SavedTable, name: &[u8]) -> Needs<'a> {
        Needs {
            table,
            nat: name == b"nat",
            chains: HashMap::new(),
        }
    }

    /// What `rule` needs: `Nothing` for an allowlisted verdict (`ACCEPT`,
    /// `RETURN`, logging; in nat the NAT verdicts too) or no verdict, with
    /// matches that keep no shared state; a jump (`-j`) to a user chain
    /// needs what its rules need. A match that may keep shared state makes
    /// a `Twin`; a verdict that changes packets (`MARK`, ...) a `Twin`; any
    /// other verdict and a `-g` a `TwinInOrder`.
    fn of_rule(&mut self, rule: &[u8]) -> Need {
        let mut need = if keeps_no_shared_state(rule) {
            Need::Nothing
        } else {
            Need::Twin
        };
        if goes_to(rule) {
            return Need::TwinInOrder;
        }
        for target in targets(rule) {
            let of_target = if self.table.is_user_chain(&target) {
                self.of_chain(&target)
            } else if SEEN_BY_NONE_TARGETS.contains(&target.as_slice())
                || (self.nat && NAT_TARGETS.contains(&target.as_slice()))
            {
                Need::Nothing
            } else if CHANGING_TARGETS.contains(&target.as_slice()) {
                Need::Twin
            } else {
                Need::TwinInOrder
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
        self.chains.insert(chain.to_vec(), Need::TwinInOrder);
        let rules = self.table.chain(chain);
        let need = rules.iter().map(|r| self.of_rule(r)).max().unwrap_or(Need::Nothing);
        self.chains.insert(chain.to_vec(), need);
        need
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

/// The rules of `rules` that could end the evaluation other than by
/// blocking, or change what a later rule matches (see
/// [`SavedTable::harmless`]).
fn significant<'a>(rules: &[&'a [u8]], table: &SavedTable, harmless: &HashSet<Vec<u8>>) -> Vec<&'a [u8]> {
    rules.iter().copied().filter(|r| !table.harmless(r, harmless)).collect()
}

/// Whether the live rules `before` (of one chain) bring to what follows
/// every packet the stale chain's rules `stale_before` do, in the same
/// state: the rules of each that could end the evaluation other than by
/// blocking or change a packet are the same rules, in the same order (not
/// only as many: a live `-s 10.0.0.0/8 -j ACCEPT` is not the stale
/// `-s 192.168.0.1/32 -j ACCEPT`), and the user chains they jump to are
/// the same in both. Rules that only log or block may differ, and the
/// stale chain may have more rules that only take packets out of it
/// ([`SavedTable::exits`]): those packets never reach what follows there.
/// `to_policy`: what follows is the policy.
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

/// The items of the stale table `name` that `live` (the same table of the
/// host's backend, if any) does not hold a twin of, as lines: each rule as
/// printed and each non-ACCEPT policy as `:CHAIN POLICY`. A policy's twin
/// is the same policy on the live chain, which its whole chain brings
/// packets to as the stale one does (a stale `RETURN` or `-g` in a
/// built-in chain, which sends packets to its policy at once, is then in
/// the live chain too).
fn unenforced_items(name: &[u8], table: &SavedTable, live: Option<&SavedTable>) -> Vec<Vec<u8>> {
    let empty = SavedTable::default();
    let live = live.unwrap_or(&empty);
    let harmless = Harmless {
        stale: table.harmless_chains(),
        live: live.harmless_chains(),
        stale_exiting: table.exiting_chains(),
    };
    let mut needs = Needs::new(table, name);
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
    let mut index: HashMap<&[u8], usize> = HashMap::new();
    for (chain, line) in &table.rules {
        let at = index.entry(chain.as_slice()).or_insert(0);
        *at += 1;
        let at = *at - 1;
        if !reachable.contains(chain) {
            continue;
        }
        let need = needs.of_rule(line);
        let live_rules = live.chain(chain);
        let at_live = live_rules.iter().position(|r| *r == line.as_slice());
        let enforced = match need {
            Need::Nothing => true,
            Need::Twin => at_live.is_some() && same_chains(line, table, live, &mut HashSet::new()),
            Need::TwinInOrder => at_live.is_some_and(|i| {
                same_way_in(
                    &live_rules[..i],
                    &table.chain(chain)[..at],
                    table,
                    live,
                    &harmless,
                    false,
                )
            }),
        };
        if !enforced {
            items.push(line.clone());
        }
    }
    items
}

/// Per name in `tables`: the items of that table in `stale_save` that
/// `live_save` does not hold a twin of (empty: it may go). With `own`
/// (nft's tables that are iptables-nft's, each with its base chains), only
/// those tables of `live_save` count, and in them a built-in chain's name
/// only where it is such a base chain.
pub fn unenforced(
    stale_save: &[u8],
    live_save: &[u8],
    own: Option<&[(&str, Vec<String>)]>,
    tables: &[&str],
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
            unenforced_items(name.as_bytes(), table, live_table)
        })
        .collect()
}

/// Per name in `tables` (of `stale`'s save in `family`): why emptying it
/// would open the host, or None when the host's backend `live` holds a
/// twin of every item it holds.
pub fn openings(
    stale_save: &[u8],
    live: Mode,
    family: Family,
    tables: &[&str],
    private_lock: &Path,
) -> Result<Vec<Option<String>>, String> {
    let live_save =
        proven_live_save(live, family, private_lock).map_err(|why| format!("{live} {}: {why}", family.label()))?;
    Ok(
        unenforced(stale_save, &live_save.exact, live_save.own.as_deref(), tables)
            .into_iter()
            .zip(tables)
            .map(|(items, table)| {
                let inexact = live_save.inexact.iter().find(|(name, _)| name == table);
                describe(&items, live, inexact.map(|(_, why)| why.as_str()))
            })
            .collect(),
    )
}

/// Items shown at most in one line.
const ITEMS_SHOWN: usize = 20;

/// "removing it would open the host: 2 items that nft holds no twin of:
/// ...", naming why the live table was not counted (`inexact`).
fn describe(items: &[Vec<u8>], live: Mode, inexact: Option<&str>) -> Option<String> {
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
        "removing it would open the host: {} item{} that {live} holds no twin of{}: {}{}",
        items.len(),
        if items.len() == 1 { "" } else { "s" },
        inexact
            .map(|why| format!(" (its own table of that name was not counted: {why})"))
            .unwrap_or_default(),
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
            shown(unenforced(FERM, b"", None, &["filter", "nat", "raw"])),
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
        assert_eq!(shown(unenforced(FERM, live, None, &["filter"])), [Vec::<String>::new()]);
        // In another table, or another chain, it is not the same item.
        let elsewhere = b"*mangle\n:INPUT DROP [0:0]\n-A INPUT -s 192.0.2.0/24 -j blocked\nCOMMIT\n";
        assert_eq!(shown(unenforced(FERM, elsewhere, None, &["filter"]))[0].len(), 4);
    }

    #[test]
    fn a_comment_cannot_hide_a_verdict() {
        let save = b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m comment --comment \"x\\\" -j ACCEPT\" -j DROP\n-A INPUT -m comment --comment \"-j DROP\" -j ACCEPT\nCOMMIT\n";
        assert_eq!(
            shown(unenforced(save, b"", None, &["filter"]))[0],
            ["-A INPUT -m comment --comment \"x\\\" -j ACCEPT\" -j DROP"]
        );
    }

    #[test]
    fn verdicts_not_known_not_to_filter_are_filtering() {
        let save = b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j NFQUEUE --queue-num 3\n-A INPUT -j QUEUE\n-A INPUT -j SOMETHING\n-A INPUT -j LOG\n-A INPUT -p tcp\n-A INPUT -j ACCEPT\nCOMMIT\n";
        assert_eq!(
            shown(unenforced(save, b"", None, &["filter"]))[0],
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
        assert_eq!(shown(unenforced(stale, behind, None, &["filter"]))[0].len(), 1);
        // Behind a LOG, a DROP or a chain that only drops, it is.
        let harmless = b"*filter\n:INPUT ACCEPT [0:0]\n:x - [0:0]\n-A INPUT -j LOG\n-A INPUT -s 192.0.2.1/32 -j DROP\n-A INPUT -j x\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\n-A x -s 192.0.2.2/32 -j DROP\nCOMMIT\n";
        assert_eq!(shown(unenforced(stale, harmless, None, &["filter"]))[0].len(), 0);
        // A jump to a chain that may accept, not in the stale chain: not.
        let jump = b"*filter\n:INPUT ACCEPT [0:0]\n:x - [0:0]\n-A INPUT -j x\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\n-A x -j RETURN\nCOMMIT\n";
        assert_eq!(shown(unenforced(stale, jump, None, &["filter"]))[0].len(), 1);
        // A policy behind a live ACCEPT the stale chain lacks: not.
        let policy = b"*filter\n:FORWARD DROP [0:0]\nCOMMIT\n";
        let accepting = b"*filter\n:FORWARD DROP [0:0]\n-A FORWARD -j ACCEPT\nCOMMIT\n";
        assert_eq!(
            shown(unenforced(policy, accepting, None, &["filter"]))[0],
            [":FORWARD DROP"]
        );
        assert_eq!(shown(unenforced(policy, policy, None, &["filter"]))[0].len(), 0);
    }

    #[test]
    fn a_user_chain_nothing_reaches_filters_nothing() {
        let stale = b"*filter\n:INPUT ACCEPT [0:0]\n:OLD - [0:0]\n-A OLD -s 192.0.2.1/32 -j DROP\nCOMMIT\n";
        assert_eq!(shown(unenforced(stale, b"", None, &["filter"]))[0].len(), 0);
    }

    #[test]
    fn a_jump_is_judged_by_the_chain_it_reaches() {
        let stale = b"*filter\n:INPUT ACCEPT [0:0]\n:x - [0:0]\n-A INPUT -j x\n-A x -j DROP\nCOMMIT\n";
        let returning =
            b"*filter\n:INPUT ACCEPT [0:0]\n:x - [0:0]\n-A INPUT -j x\n-A x -j RETURN\n-A x -j DROP\nCOMMIT\n";
        assert_eq!(
            shown(unenforced(stale, returning, None, &["filter"]))[0],
            ["-A x -j DROP"]
        );
        assert_eq!(shown(unenforced(stale, stale, None, &["filter"]))[0].len(), 0);
    }

    #[test]
    fn only_the_allowlist_goes_without_a_twin() {
        let save = b"*mangle\n:PREROUTING ACCEPT [0:0]\n:quiet - [0:0]\n-A PREROUTING -p tcp -m tcp --dport 22 -m comment --comment x -j ACCEPT\n-A PREROUTING -j LOG\n-A PREROUTING -m conntrack --ctstate NEW -j quiet\n-A PREROUTING -m mark --mark 0x1\n-A PREROUTING -j MARK --set-xmark 0x1/0xffffffff\n-A PREROUTING -j DSCP --set-dscp 0x2e\n-A PREROUTING -m recent --set --name BAD\n-A PREROUTING -m recent --rcheck --name BAD -j RETURN\n-A PREROUTING -g quiet\n-A quiet -j RETURN\nCOMMIT\n";
        assert_eq!(
            shown(unenforced(save, b"", None, &["mangle"]))[0],
            [
                "-A PREROUTING -j MARK --set-xmark 0x1/0xffffffff",
                "-A PREROUTING -j DSCP --set-dscp 0x2e",
                "-A PREROUTING -m recent --set --name BAD",
                "-A PREROUTING -m recent --rcheck --name BAD -j RETURN",
                "-A PREROUTING -g quiet",
            ]
        );
    }

    #[test]
    fn nat_rules_go_without_a_twin_but_a_mark_set_there_does_not() {
        let save = b"*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SEP-X - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m tcp --dport 443 -j KUBE-SEP-X\n-A KUBE-SEP-X -s 10.244.0.9/32 -j KUBE-MARK-MASQ\n-A KUBE-SEP-X -p tcp -m tcp -j DNAT --to-destination 10.244.0.9:6443\n-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\nCOMMIT\n";
        let items = shown(unenforced(save, b"", None, &["nat"]))[0].clone();
        assert_eq!(items.len(), 4, "{items:?}");
        assert!(items.iter().all(|i| !i.contains("DNAT")), "{items:?}");
        // Without the mark, every rule goes: kube-proxy's stale DNATs.
        let without: Vec<u8> = String::from_utf8_lossy(save)
            .lines()
            .filter(|l| !l.contains("MARK"))
            .flat_map(|l| format!("{l}\n").into_bytes())
            .collect();
        assert_eq!(shown(unenforced(&without, b"", None, &["nat"]))[0].len(), 0);
        // In filter, a DNAT is no allowlisted verdict.
        let filter = b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j DNAT --to-destination 10.0.0.1\nCOMMIT\n";
        assert_eq!(shown(unenforced(filter, b"", None, &["filter"]))[0].len(), 1);
    }

    #[test]
    fn the_rules_before_a_drop_are_compared_by_which_not_how_many() {
        let stale = b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -s 192.168.0.1/32 -j ACCEPT\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n";
        let wider = b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -s 10.0.0.0/8 -j ACCEPT\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\nCOMMIT\n";
        assert_eq!(
            shown(unenforced(stale, wider, None, &["filter"]))[0],
            ["-A INPUT -p tcp -m tcp --dport 8080 -j DROP"]
        );
        assert_eq!(shown(unenforced(stale, stale, None, &["filter"]))[0].len(), 0);
        // A changing rule's twin may stand anywhere in its chain.
        let marks = b"*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -s 192.0.2.1/32 -j MARK --set-xmark 0x1/0xffffffff\n-A PREROUTING -s 192.0.2.2/32 -j MARK --set-xmark 0x2/0xffffffff\nCOMMIT\n";
        let reordered = b"*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -s 192.0.2.2/32 -j MARK --set-xmark 0x2/0xffffffff\n-A PREROUTING -s 192.0.2.1/32 -j MARK --set-xmark 0x1/0xffffffff\nCOMMIT\n";
        assert_eq!(shown(unenforced(marks, reordered, None, &["mangle"]))[0].len(), 0);
    }
}
