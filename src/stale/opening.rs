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

/// The verdicts that filter.
const FILTERING_TARGETS: [&[u8]; 2] = [b"DROP", b"REJECT"];

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

/// The filtering items of `table`, as lines: each filtering rule as printed
/// and each non-ACCEPT policy as `:CHAIN POLICY`.
fn filtering_items(table: &SavedTable) -> Vec<Vec<u8>> {
    let rule_targets: Vec<Vec<Vec<u8>>> = table.rules.iter().map(|(_, line)| targets(line)).collect();
    // Chains from which a filtering verdict is reached, to a fixed point.
    let mut leading: HashSet<Vec<u8>> = HashSet::new();
    loop {
        let before = leading.len();
        for ((chain, _), targets) in table.rules.iter().zip(&rule_targets) {
            if targets
                .iter()
                .any(|t| FILTERING_TARGETS.contains(&t.as_slice()) || leading.contains(t))
            {
                leading.insert(chain.clone());
            }
        }
        if leading.len() == before {
            break;
        }
    }
    let mut items: Vec<Vec<u8>> = table
        .policies
        .iter()
        .filter(|(_, policy)| policy.as_slice() != b"-" && policy.as_slice() != b"ACCEPT")
        .map(|(chain, policy)| [b":".as_slice(), chain, b" ", policy].concat())
        .collect();
    for ((_, line), targets) in table.rules.iter().zip(&rule_targets) {
        if targets
            .iter()
            .any(|t| FILTERING_TARGETS.contains(&t.as_slice()) || leading.contains(t))
        {
            items.push(line.clone());
        }
    }
    items
}

/// Per name in `tables`: the filtering items of that table in `stale_save`
/// that `live_save` does not also enforce (empty: removing it opens
/// nothing).
pub fn unenforced(stale_save: &[u8], live_save: &[u8], tables: &[&str]) -> Vec<Vec<Vec<u8>>> {
    let stale = parse(stale_save);
    let live = parse(live_save);
    tables
        .iter()
        .map(|name| {
            let Some((_, table)) = stale.iter().find(|(n, _)| n.as_slice() == name.as_bytes()) else {
                return Vec::new();
            };
            let enforced: HashSet<Vec<u8>> = live
                .iter()
                .filter(|(n, _)| n.as_slice() == name.as_bytes())
                .flat_map(|(_, t)| {
                    filtering_items(t)
                        .into_iter()
                        .chain(t.rules.iter().map(|(_, l)| l.clone()))
                })
                .collect();
            filtering_items(table)
                .into_iter()
                .filter(|item| !enforced.contains(item))
                .collect()
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
    Ok(unenforced(stale_save, &live_save, tables)
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
            shown(unenforced(FERM, b"", &["filter", "nat", "raw"])),
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
        assert_eq!(shown(unenforced(FERM, live, &["filter"])), [Vec::<String>::new()]);
        // In another table, or another chain, it is not the same item.
        let elsewhere = b"*mangle\n:INPUT DROP [0:0]\n-A INPUT -s 192.0.2.0/24 -j blocked\nCOMMIT\n";
        assert_eq!(shown(unenforced(FERM, elsewhere, &["filter"]))[0].len(), 4);
    }

    #[test]
    fn a_comment_cannot_hide_a_verdict() {
        let save = b"*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m comment --comment \"x\\\" -j ACCEPT\" -j DROP\n-A INPUT -m comment --comment \"-j DROP\" -j ACCEPT\nCOMMIT\n";
        assert_eq!(
            shown(unenforced(save, b"", &["filter"]))[0],
            ["-A INPUT -m comment --comment \"x\\\" -j ACCEPT\" -j DROP"]
        );
    }
}
