//! Whether emptying a stale table would open the host: which of its
//! filtering items the backend the host uses does not also enforce.
//!
//! Filtering items are the rules whose verdict is `DROP` or `REJECT`, also
//! through a user chain that leads to one (a jump or goto to a chain in
//! which some rule drops, rejects or leads on to such a chain), and the
//! built-in chains' policies other than `ACCEPT`. One is also enforced when
//! the live backend's table of the same name holds the same rule in the same
//! chain, compared as the save tools print them (a `-c` counter prefix
//! aside), or the same policy on the same built-in chain. Removing anything
//! else (accepts, jumps, marks, NAT) cannot open a host the live backend
//! still filters; removing an item only the stale backend enforces can.
//!
//! A rule is read as filtering when any `-j`/`-g` in it names such a
//! verdict, whether its words are split the way the save tool quotes them or
//! at every blank: a comment that hides or fakes a `-j DROP` can only make
//! a rule count as filtering, never hide one that is.

use super::find;
use super::proof::Verdicts;
use crate::family::Family;
use crate::kernel::legacy;
use crate::kernel::modules::{self, Presence};
use crate::mode::Mode;
use std::collections::HashSet;

/// The chains the kernel's hooks reach by name in iptables' tables.
const BUILTIN_CHAINS: [&[u8]; 5] = [b"PREROUTING", b"INPUT", b"FORWARD", b"OUTPUT", b"POSTROUTING"];

/// The verdicts that do not filter: a rule with one of these (or no `-j`
/// at all) is not a filtering item; any other verdict, one not known here
/// included (`NFQUEUE`, `QUEUE`, `TARPIT`, `SYNPROXY`), is.
const NON_FILTERING_TARGETS: [&[u8]; 25] = [
    b"ACCEPT",
    b"RETURN",
    b"DNAT",
    b"SNAT",
    b"MASQUERADE",
    b"REDIRECT",
    b"NETMAP",
    b"LOG",
    b"NFLOG",
    b"MARK",
    b"CONNMARK",
    b"CT",
    b"NOTRACK",
    b"TRACE",
    b"CLASSIFY",
    b"DSCP",
    b"TOS",
    b"TCPMSS",
    b"TTL",
    b"HL",
    b"SECMARK",
    b"CONNSECMARK",
    b"CHECKSUM",
    b"AUDIT",
    b"SET",
];

/// The verdicts after which the chain's evaluation goes on.
const CONTINUING_TARGETS: [&[u8]; 18] = [
    b"LOG",
    b"NFLOG",
    b"MARK",
    b"CONNMARK",
    b"CT",
    b"NOTRACK",
    b"TRACE",
    b"CLASSIFY",
    b"DSCP",
    b"TOS",
    b"TCPMSS",
    b"TTL",
    b"HL",
    b"SECMARK",
    b"CONNSECMARK",
    b"CHECKSUM",
    b"AUDIT",
    b"SET",
];

/// The verdicts that end evaluation but can only block.
const BLOCKING_TARGETS: [&[u8]; 2] = [b"DROP", b"REJECT"];

/// One table of a save: its chains' policies and its rules, as printed.
#[derive(Default)]
struct SavedTable {
    /// `(chain, policy)` of each declared chain; `-` for a user chain.
    policies: Vec<(Vec<u8>, Vec<u8>)>,
    /// `(chain, whole line from "-A")`.
    rules: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The tables of a save, by name, in order.
fn parse(save: &[u8]) -> Vec<(Vec<u8>, SavedTable)> {
    let mut tables: Vec<(Vec<u8>, SavedTable)> = Vec::new();
    for line in save.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(name) = line.strip_prefix(b"*") {
            tables.push((name.to_vec(), SavedTable::default()));
            continue;
        }
        let Some((_, table)) = tables.last_mut() else {
            continue;
        };
        if let Some(declaration) = line.strip_prefix(b":") {
            let mut fields = declaration.split(u8::is_ascii_whitespace).filter(|f| !f.is_empty());
            let chain = fields.next().unwrap_or_default().to_vec();
            let policy = fields.next().unwrap_or(b"-").to_vec();
            table.policies.push((chain, policy));
            continue;
        }
        // `-c` saves print "[packets:bytes] -A ...".
        let rule = match line.strip_prefix(b"[") {
            Some(rest) => match rest.iter().position(|&b| b == b']') {
                Some(end) => rest[end + 1..].trim_ascii_start(),
                None => line,
            },
            None => line,
        };
        if let Some(body) = rule.strip_prefix(b"-A ") {
            let chain = body.split(u8::is_ascii_whitespace).next().unwrap_or_default().to_vec();
            table.rules.push((chain, rule.trim_ascii_end().to_vec()));
        }
    }
    tables
}

/// The words of a rule as the save tool quotes them (`"..."` with `\"` and
/// `\\` inside), and split at every blank: both, see the module's note.
fn word_splits(rule: &[u8]) -> [Vec<Vec<u8>>; 2] {
    let blank = rule
        .split(u8::is_ascii_whitespace)
        .filter(|w| !w.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    let mut quoted = Vec::new();
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
                quoted.push(std::mem::take(&mut word));
                started = false;
            }
        } else {
            word.push(b);
            started = true;
        }
    }
    if started {
        quoted.push(word);
    }
    [blank, quoted]
}

/// Every target a rule's `-j`/`-g` (or `--jump`/`--goto`) may name.
fn targets(rule: &[u8]) -> Vec<Vec<u8>> {
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
    /// Whether `name` is a user chain declared in this table.
    fn is_user_chain(&self, name: &[u8]) -> bool {
        self.policies
            .iter()
            .any(|(c, p)| c.as_slice() == name && p.as_slice() == b"-")
    }

    /// The rules of `chain`, in order, as printed.
    fn chain(&self, chain: &[u8]) -> Vec<&[u8]> {
        self.rules
            .iter()
            .filter(|(c, _)| c.as_slice() == chain)
            .map(|(_, line)| line.as_slice())
            .collect()
    }

    /// The policy of `chain`, if declared.
    fn policy(&self, chain: &[u8]) -> Option<&[u8]> {
        self.policies
            .iter()
            .find(|(c, _)| c.as_slice() == chain)
            .map(|(_, p)| p.as_slice())
    }

    /// The user chains from which a filtering verdict is reached.
    fn leading(&self) -> HashSet<Vec<u8>> {
        let mut leading: HashSet<Vec<u8>> = HashSet::new();
        loop {
            let before = leading.len();
            for (chain, line) in &self.rules {
                if self.filters(line, &leading) {
                    leading.insert(chain.clone());
                }
            }
            if leading.len() == before {
                return leading;
            }
        }
    }

    /// Whether `rule` filters: a verdict not known not to filter, or a jump
    /// to a user chain in `leading`.
    fn filters(&self, rule: &[u8], leading: &HashSet<Vec<u8>>) -> bool {
        targets(rule).iter().any(|t| {
            if self.is_user_chain(t) {
                leading.contains(t)
            } else {
                !NON_FILTERING_TARGETS.contains(&t.as_slice())
            }
        })
    }

    /// The user chains whose rules can only go on, block or return to the
    /// caller (never accept, queue or rewrite), to a fixed point.
    fn harmless_chains(&self) -> HashSet<Vec<u8>> {
        let mut harmless: HashSet<Vec<u8>> = self
            .policies
            .iter()
            .filter(|(_, p)| p.as_slice() == b"-")
            .map(|(c, _)| c.clone())
            .collect();
        loop {
            let before = harmless.len();
            let unsure: Vec<Vec<u8>> = harmless
                .iter()
                .filter(|c| self.chain(c).iter().any(|r| !self.harmless(r, &harmless)))
                .cloned()
                .collect();
            for c in unsure {
                harmless.remove(&c);
            }
            if harmless.len() == before {
                return harmless;
            }
        }
    }

    /// Whether `rule` cannot end its chain's evaluation other than by
    /// blocking: every verdict in it goes on or blocks, or jumps to a user
    /// chain in `harmless` (no `-j` at all goes on).
    fn harmless(&self, rule: &[u8], harmless: &HashSet<Vec<u8>>) -> bool {
        targets(rule).iter().all(|t| {
            CONTINUING_TARGETS.contains(&t.as_slice())
                || BLOCKING_TARGETS.contains(&t.as_slice())
                || (self.is_user_chain(t) && harmless.contains(t))
        })
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

/// Whether the live rules `before` (of one chain) let through to what
/// follows every packet the stale chain's rules `stale_before` do: each
/// that could end the evaluation other than by blocking is also among
/// `stale_before`, and jumps to user chains that are the same in both.
fn same_way_in(
    before: &[&[u8]],
    stale_before: &[&[u8]],
    stale: &SavedTable,
    live: &SavedTable,
    harmless: &HashSet<Vec<u8>>,
) -> bool {
    before.iter().all(|rule| {
        live.harmless(rule, harmless)
            || (stale_before.contains(rule) && same_chains(rule, stale, live, &mut HashSet::new()))
    })
}

/// The filtering items of the stale `table` that `live` (the same table of
/// the host's backend, if any) does not also enforce, as lines: each rule
/// as printed and each non-ACCEPT policy as `:CHAIN POLICY`.
///
/// A rule is enforced when the live chain of the same name holds it, every
/// live rule before it that could end the evaluation other than by
/// blocking also comes before it in the stale chain, and every user chain
/// it or those jump to is the same in both. A policy is enforced when the
/// live chain has the same one and every live rule of that chain that
/// could end the evaluation other than by blocking is also in the stale
/// chain, with the same user chains behind it.
fn unenforced_items(table: &SavedTable, live: Option<&SavedTable>) -> Vec<Vec<u8>> {
    let leading = table.leading();
    let empty = SavedTable::default();
    let live = live.unwrap_or(&empty);
    let harmless = live.harmless_chains();
    let mut items = Vec::new();
    for (chain, policy) in &table.policies {
        if policy.as_slice() == b"-" || policy.as_slice() == b"ACCEPT" {
            continue;
        }
        let stale_rules = table.chain(chain);
        let enforced = live.policy(chain) == Some(policy.as_slice())
            && same_way_in(&live.chain(chain), &stale_rules, table, live, &harmless);
        if !enforced {
            items.push([b":".as_slice(), chain, b" ", policy].concat());
        }
    }
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
        if !table.filters(line, &leading) {
            continue;
        }
        let stale_rules = table.chain(chain);
        let live_rules = live.chain(chain);
        let enforced = live_rules.iter().position(|r| *r == line.as_slice()).is_some_and(|i| {
            same_chains(line, table, live, &mut HashSet::new())
                && same_way_in(&live_rules[..i], &stale_rules[..at], table, live, &harmless)
        });
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
            unenforced_items(table, live_table)
        })
        .collect()
}

/// The live backend's save for `family`, read without creating anything:
/// empty when legacy lists no table, or nf_tables is not in the kernel.
pub fn live_save(live: Mode, family: Family) -> Result<Vec<u8>, String> {
    let present = match live {
        Mode::Legacy => legacy::listed_tables(family)?.is_some_and(|names| !names.is_empty()),
        Mode::Nft => match modules::nf_tables() {
            Presence::Present(_) | Presence::Askable(_) => true,
            Presence::NotLoaded(_) | Presence::Missing(_) => false,
            Presence::Unknown(why) => {
                return Err(format!(
                    "whether nf_tables is in the kernel is unknown, and asking could load it: {why}"
                ))
            }
        },
    };
    if !present {
        return Ok(Vec::new());
    }
    find::save(live, family).map(|save| save.stdout)
}

/// Per name in `tables` (of `stale`'s save in `family`): why emptying it
/// would open the host, or None when the host's backend `live` enforces
/// every filtering item it holds.
pub fn openings(stale_save: &[u8], live: Mode, family: Family, tables: &[&str]) -> Result<Vec<Option<String>>, String> {
    let live_save = live_save(live, family).map_err(|why| format!("{live} {}: {why}", family.label()))?;
    let own = match live {
        Mode::Nft if !live_save.is_empty() => {
            Some(find::nft_own_base_chains(family).map_err(|why| format!("{live} {}: {why}", family.label()))?)
        }
        _ => None,
    };
    Ok(unenforced(stale_save, &live_save, own.as_deref(), tables)
        .into_iter()
        .map(|items| describe(&items, live))
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
) -> Result<Vec<Option<String>>, String> {
    if allow_opening {
        return Ok(vec![None; names.len()]);
    }
    openings(save, live, family, names)
        .map_err(|why| format!("whether removing it would open the host is unknown: {why}; nothing removed"))
}

/// A proof's verdicts, with each table that would open the host left as
/// it was ("... (--allow-opening removes it anyway)").
pub fn held_open((save, mut verdicts): Verdicts, opens: Vec<Option<String>>) -> Verdicts {
    for (verdict, open) in verdicts.iter_mut().zip(opens) {
        if let (Ok(()), Some(why)) = (&verdict, open) {
            *verdict = Err(format!("{why} (--allow-opening removes it anyway)"));
        }
    }
    (save, verdicts)
}

/// Items shown at most in one line.
const ITEMS_SHOWN: usize = 20;

/// "removing it would open the host: 2 filtering items that nft does not
/// enforce: ...".
fn describe(items: &[Vec<u8>], live: Mode) -> Option<String> {
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
        "removing it would open the host: {} filtering item{} that {live} does not enforce: {}{}",
        items.len(),
        if items.len() == 1 { "" } else { "s" },
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
    fn a_jump_is_enforced_only_when_its_chain_is_the_same_in_both() {
        let stale = b"*filter\n:INPUT ACCEPT [0:0]\n:x - [0:0]\n-A INPUT -j x\n-A x -j DROP\nCOMMIT\n";
        let returning =
            b"*filter\n:INPUT ACCEPT [0:0]\n:x - [0:0]\n-A INPUT -j x\n-A x -j RETURN\n-A x -j DROP\nCOMMIT\n";
        assert_eq!(
            shown(unenforced(stale, returning, None, &["filter"]))[0],
            ["-A INPUT -j x", "-A x -j DROP"]
        );
        assert_eq!(shown(unenforced(stale, stale, None, &["filter"]))[0].len(), 0);
    }
}
