//! A save tool's output as tables to compare: counters, comments and
//! headers aside, user chains in any order, and a table that holds nothing
//! (built-in chains with ACCEPT policies, no rule, no user chain) left out,
//! as legacy tables stay registered once emptied.

use std::collections::BTreeMap;

/// Per table, per chain: its policy (`-` for a user chain) and its rules.
pub type Tables = BTreeMap<String, BTreeMap<String, (String, Vec<String>)>>;

pub fn tables(save: &str) -> Tables {
    let mut all = Tables::new();
    let mut table = String::new();
    for line in save.lines() {
        if let Some(name) = line.strip_prefix('*') {
            table = name.to_string();
            all.entry(table.clone()).or_default();
        } else if let Some(chain) = line.strip_prefix(':') {
            let mut words = chain.split(' ');
            let name = words.next().unwrap_or_default().to_string();
            let policy = words.next().unwrap_or_default().to_string();
            all.entry(table.clone()).or_default().entry(name).or_default().0 = policy;
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let (chain, words) = rule.split_once(' ').unwrap_or((rule, ""));
            all.entry(table.clone())
                .or_default()
                .entry(chain.to_string())
                .or_default()
                .1
                .push(words.to_string());
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
