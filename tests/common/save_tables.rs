//! A save tool's output as tables to compare: counters, comments and
//! headers aside, user chains in any order, and a table that holds nothing
//! (built-in chains with ACCEPT policies, no rule, no user chain) left out,
//! as legacy tables stay registered once emptied.

use iptables_wrapper::save_text;
use std::collections::BTreeMap;

/// Per table, per chain: its policy (`-` for a user chain) and its rules.
pub type Tables = BTreeMap<String, BTreeMap<String, (String, Vec<String>)>>;

pub fn tables(save: &str) -> Tables {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let mut all = Tables::new();
    for (name, table) in save_text::tables(save.as_bytes()) {
        let chains = all.entry(text(&name)).or_default();
        for (chain, policy) in &table.policies {
            chains.entry(text(chain)).or_default().0 = text(policy);
        }
        for (chain, rule) in &table.rules {
            // The rule's words after `-A CHAIN`.
            let words = rule[b"-A ".len() + chain.len()..].trim_ascii_start();
            chains.entry(text(chain)).or_default().1.push(text(words));
        }
    }
    all.retain(|_, chains| {
        chains
            .values()
            .any(|(policy, rules)| !rules.is_empty() || policy != "ACCEPT")
    });
    all
}

/// The tables as a save prints them, for messages.
pub fn text(tables: &Tables) -> String {
    let mut text = String::new();
    for (table, chains) in tables {
        text += &format!("*{table}\n");
        for (chain, (policy, _)) in chains {
            text += &format!(":{chain} {policy}\n");
        }
        for (chain, (_, rules)) in chains {
            for rule in rules {
                text += &format!("-A {chain} {rule}\n");
            }
        }
        text += "COMMIT\n";
    }
    text
}
