//! What of a stale table may go without a twin in the host's backend, and
//! whether the host's backend holds the twin of everything else.
//!
//! Nothing here asks what the live backend reads: a stale rule goes
//! without a twin only where it changes nothing any reader can see, by a
//! short allowlist ([`Needs`]; docs/mixed-state.md has it as a table).
//! Every other rule, and every non-`ACCEPT` policy, must be in the live
//! backend too, and in its whole chain's twin: the live chain of the same
//! name in the table of the same name holds the same rules, as printed
//! (counters aside), in the same order, and so do the user chains they
//! jump or go to ([`same_chain`]). No `ACCEPT` before it, nor a rule after
//! it that undoes what it changed, can then make the twin another rule.
//! The `security` table's twins never count: the two backends hook it at
//! different priorities. The live side is what [`super::live_save`]
//! proves it holds; for nft only iptables-nft's own tables and base chains
//! count. Rules of a user chain that no built-in chain reaches filter
//! nothing.

use super::live_save::proven_live_save;
use super::saved_rules::{
    goes_to, keeps_no_shared_state, parse, targets, SavedTable, BUILTIN_CHAINS, NAT_TARGETS, SEEN_BY_NONE_TARGETS,
};
use crate::family::Family;
use crate::mode::Mode;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Which user chains of one table need a twin, computed once.
struct Needs<'a> {
    table: &'a SavedTable,
    nat: bool,
    chains: HashMap<Vec<u8>, bool>,
}

impl<'a> Needs<'a> {
    fn new(table: &'a SavedTable, name: &[u8]) -> Needs<'a> {
        Needs {
            table,
            nat: name == b"nat",
            chains: HashMap::new(),
        }
    }

    /// Whether `rule` needs a twin: not when its verdicts are allowlisted
    /// (`ACCEPT`, `RETURN`, logging; in nat the NAT verdicts too), or a
    /// jump (`-j`) to a user chain none of whose rules needs one, or
    /// absent, and its matches keep no shared state; always for a `-g`.
    fn of_rule(&mut self, rule: &[u8]) -> bool {
        if goes_to(rule) || !keeps_no_shared_state(rule) {
            return true;
        }
        targets(rule).iter().any(|target| {
            if self.table.is_user_chain(target) {
                self.of_chain(target)
            } else {
                !(SEEN_BY_NONE_TARGETS.contains(&target.as_slice())
                    || (self.nat && NAT_TARGETS.contains(&target.as_slice())))
            }
        })
    }

    /// Whether any rule of a user chain needs a twin (a chain reached
    /// again while being judged, which iptables refuses, counts as
    /// needing one).
    fn of_chain(&mut self, chain: &[u8]) -> bool {
        if let Some(&need) = self.chains.get(chain) {
            return need;
        }
        self.chains.insert(chain.to_vec(), true);
        let rules = self.table.chain(chain);
        let need = rules.iter().any(|r| self.of_rule(r));
        self.chains.insert(chain.to_vec(), need);
        need
    }
}

/// Whether the live table holds the stale chain `chain` as its twin: the
/// chain declared there too, the same rules, as printed, in the same
/// order, and every user chain they jump or go to the same, and so on.
/// Only then does every packet meet, at the twin, what it met in the stale
/// chain: an `ACCEPT` or a `RETURN` before it, a rule after it that
/// undoes it, or another rule's share of a `limit` would each make the
/// twin another rule.
fn same_chain(chain: &[u8], stale: &SavedTable, live: &SavedTable, seen: &mut HashSet<Vec<u8>>) -> bool {
    if !seen.insert(chain.to_vec()) {
        return true;
    }
    let rules = stale.chain(chain);
    live.policy(chain).is_some() == stale.policy(chain).is_some()
        && live.is_user_chain(chain) == stale.is_user_chain(chain)
        && live.chain(chain) == rules
        && rules.iter().all(|rule| {
            targets(rule)
                .iter()
                .filter(|t| stale.is_user_chain(t) || live.is_user_chain(t))
                .all(|t| same_chain(t, stale, live, seen))
        })
}

/// The tables whose twins in the other backend do not count: iptables-nft
/// hooks `security` at priority 150, legacy at 50, so a nat `INPUT` chain
/// (100) or a native one between them meets packets between the two.
const NO_TWIN_ACROSS_BACKENDS: [&[u8]; 1] = [b"security"];

/// The items of the stale table `name` that `live` (the same table of the
/// host's backend, if any) does not hold a twin of, as lines: each rule
/// that needs one and each non-ACCEPT policy (as `:CHAIN POLICY`), in a
/// chain a packet can reach. A rule's twin is its whole chain's twin
/// ([`same_chain`]); a policy's, the same policy on the chain's twin.
fn unenforced_items(name: &[u8], table: &SavedTable, live: Option<&SavedTable>) -> Vec<Vec<u8>> {
    let empty = SavedTable::default();
    let live = match live {
        Some(live) if !NO_TWIN_ACROSS_BACKENDS.contains(&name) => live,
        _ => &empty,
    };
    let mut twins: HashMap<Vec<u8>, bool> = HashMap::new();
    let mut has_twin = |chain: &[u8]| {
        *twins
            .entry(chain.to_vec())
            .or_insert_with(|| same_chain(chain, table, live, &mut HashSet::new()))
    };
    let mut items = Vec::new();
    for (chain, policy) in &table.policies {
        if policy.as_slice() == b"-" || policy.as_slice() == b"ACCEPT" {
            continue;
        }
        if !(live.policy(chain) == Some(policy.as_slice()) && has_twin(chain)) {
            items.push([b":".as_slice(), chain, b" ", policy].concat());
        }
    }
    let reachable = table.reachable_chains();
    let mut needs = Needs::new(table, name);
    for (chain, line) in &table.rules {
        if reachable.contains(chain) && needs.of_rule(line) && !has_twin(chain) {
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
        let live = b"# Generated by iptables-nft-save\n*filter\n:INPUT DROP [5:300]\n:blocked - [0:0]\n-A INPUT -i lo -j ACCEPT\n[3:120] -A INPUT -s 192.0.2.0/24 -j blocked\n-A INPUT -p tcp -m tcp --dport 22 -j REJECT --reject-with icmp-port-unreachable\n-A blocked -j DROP\nCOMMIT\n";
        assert_eq!(shown(unenforced(FERM, live, None, &["filter"])), [Vec::<String>::new()]);
        // In another table, or another chain, it is not the same item.
        let elsewhere = b"*mangle\n:INPUT DROP [0:0]\n-A INPUT -s 192.0.2.0/24 -j blocked\nCOMMIT\n";
        assert_eq!(shown(unenforced(FERM, elsewhere, None, &["filter"]))[0].len(), 4);
        // Without the stale chain's first rule, the live chain is another
        // chain: no twin of anything in it.
        let lacking = String::from_utf8_lossy(live).replace("-A INPUT -i lo -j ACCEPT\n", "");
        assert_eq!(
            shown(unenforced(FERM, lacking.as_bytes(), None, &["filter"]))[0].len(),
            3
        );
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
        // Behind a LOG, a DROP or a chain that only drops, neither: the
        // live chain is another chain (a limit before it would count
        // other packets).
        let harmless = b"*filter\n:INPUT ACCEPT [0:0]\n:x - [0:0]\n-A INPUT -j LOG\n-A INPUT -s 192.0.2.1/32 -j DROP\n-A INPUT -j x\n-A INPUT -p tcp -m tcp --dport 8080 -j DROP\n-A x -s 192.0.2.2/32 -j DROP\nCOMMIT\n";
        assert_eq!(shown(unenforced(stale, harmless, None, &["filter"]))[0].len(), 1);
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
            ["-A INPUT -j x", "-A x -j DROP"]
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
        // A changing rule's twin stands where it stands in the stale
        // chain: reordered, a mark set later can undo an earlier one.
        let marks = b"*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -s 192.0.2.1/32 -j MARK --set-xmark 0x1/0xffffffff\n-A PREROUTING -s 192.0.2.2/32 -j MARK --set-xmark 0x2/0xffffffff\nCOMMIT\n";
        let reordered = b"*mangle\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -s 192.0.2.2/32 -j MARK --set-xmark 0x2/0xffffffff\n-A PREROUTING -s 192.0.2.1/32 -j MARK --set-xmark 0x1/0xffffffff\nCOMMIT\n";
        assert_eq!(shown(unenforced(marks, reordered, None, &["mangle"]))[0].len(), 2);
        assert_eq!(shown(unenforced(marks, marks, None, &["mangle"]))[0].len(), 0);
    }

    #[test]
    fn the_security_tables_twin_never_counts_nor_a_match_that_writes() {
        let security = b"*security\n:INPUT ACCEPT [0:0]\n-A INPUT -p tcp -m tcp --dport 22 -j DROP\nCOMMIT\n";
        assert_eq!(shown(unenforced(security, security, None, &["security"]))[0].len(), 1);
        let writing = b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m set --match-set s src -j ACCEPT\n-A INPUT -m connlabel --label 5 --set -j ACCEPT\n-A INPUT -m socket --restore-skmark -j ACCEPT\nCOMMIT\n";
        assert_eq!(shown(unenforced(writing, b"", None, &["filter"]))[0].len(), 3);
        assert_eq!(shown(unenforced(writing, writing, None, &["filter"]))[0].len(), 0);
    }
}
