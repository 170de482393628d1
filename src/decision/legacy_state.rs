//! Legacy's state in words, for the evidence of stale tables under a host
//! link and of the lock file's legacy traces: what a table holds that
//! changes a packet's fate (rules, non-ACCEPT policies), and rule counts.
//!
//! It decides nothing and reads nothing: the callers read the tables. What
//! it leaves out: empty user chains (they change no packet's fate;
//! `iptables-wrapper stale` shows those).

use crate::kernel::legacy::TableContents;

/// "filter holds 3 rules, 1 user chain, policy FORWARD DROP", or None for a
/// table that changes no packet's fate (no rule, every policy ACCEPT; empty
/// user chains do not count: `iptables-wrapper stale` shows those).
pub(super) fn describe_state(table: &str, contents: &TableContents) -> Option<String> {
    if !contents.applies_to_packets() {
        return None;
    }
    let mut parts = vec![rules(contents.rules())];
    let user_chains = contents.user_chains().count();
    if user_chains > 0 {
        parts.push(if user_chains == 1 {
            "1 user chain".to_string()
        } else {
            format!("{user_chains} user chains")
        });
    }
    for chain in contents.non_accept_policies() {
        let policy = chain.policy.map_or("?", |policy| policy.name());
        parts.push(format!("policy {} {policy}", chain.name));
    }
    Some(format!("{table} holds {}", parts.join(", ")))
}

/// "1 rule", "3 rules".
pub(super) fn rules(count: u64) -> String {
    if count == 1 {
        "1 rule".to_string()
    } else {
        format!("{count} rules")
    }
}
