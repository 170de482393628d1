//! The kernel's order: the hooks a packet meets on its way, each hook's
//! tables in order, and which backend's copy runs first at each hook.
//! Both backends register a table's chain at the same hook and priority,
//! and the kernel runs the one registered last first; which that is, it
//! does not say, and it can differ from hook to hook (a table created,
//! then the other backend's, then a chain of the first at another hook).
//! So a packet is tried in every order of the hooks where the order can
//! matter: both copies hold rules in a chain of the same table there,
//! and that table is `nat` (the first binding wins) or one of the two
//! changes packets (a mark, a rewrite, a list written) that the other may
//! read. Verdicts alone commute: where both only accept or stop, either
//! order gives one fate.

use super::packet::Way;
use super::target::Action;
use super::walk::{Copy, ModelTable};

/// A hook and its tables in order.
pub type Hook = (&'static [u8], &'static [&'static [u8]]);

/// What a packet the host sends to itself meets after POSTROUTING, in by
/// `lo` (its nat binding made in OUTPUT).
pub const LOOPED: [Hook; 2] = [
    (b"PREROUTING", &[b"raw", b"mangle"]),
    (b"INPUT", &[b"mangle", b"filter", b"security"]),
];

/// The hooks a packet meets on `way`, each with its tables in order.
pub fn hooks(way: Way) -> &'static [Hook] {
    const PRE: (&[u8], &[&[u8]]) = (b"PREROUTING", &[b"raw", b"mangle", b"nat"]);
    const POST: (&[u8], &[&[u8]]) = (b"POSTROUTING", &[b"mangle", b"nat"]);
    match way {
        Way::Input => &[PRE, (b"INPUT", &[b"mangle", b"filter", b"security", b"nat"])],
        Way::Forward => &[PRE, (b"FORWARD", &[b"mangle", b"filter", b"security"]), POST],
        Way::Output => &[(b"OUTPUT", &[b"raw", b"mangle", b"nat", b"filter", b"security"]), POST],
    }
}

/// The built-in hooks, each one bit of an order's mask.
const HOOKS: [&[u8]; 5] = [b"PREROUTING", b"INPUT", b"FORWARD", b"OUTPUT", b"POSTROUTING"];

/// `hook`'s bit in an order's mask: set, the second copy runs first there.
pub fn bit(hook: &[u8]) -> u8 {
    HOOKS.iter().position(|h| *h == hook).map_or(0, |at| 1 << at)
}

/// Whether a table changes packets: a rule marks, rewrites, stops
/// tracking or writes a list.
fn changes(table: &ModelTable) -> bool {
    table.chains.values().flatten().any(|rule| {
        rule.writes_a_list()
            || matches!(
                rule.action,
                Action::Marks(_)
                    | Action::Untrack
                    | Action::Dnat(..)
                    | Action::Redirect(_)
                    | Action::Netmap
                    | Action::Snat(..)
            )
    })
}

/// The hooks (a mask) where the order of `one` and `other` can matter.
pub fn contested(one: &Copy, other: &Copy) -> u8 {
    let mut mask = 0;
    for (name, table) in &one.tables {
        let Some(theirs) = other.table(name) else { continue };
        if name != b"nat" && !changes(table) && !changes(theirs) {
            continue;
        }
        for hook in HOOKS {
            let holds = |t: &ModelTable| t.chains.get(hook).is_some_and(|rules| !rules.is_empty());
            if holds(table) && holds(theirs) {
                mask |= bit(hook);
            }
        }
    }
    mask
}

/// The orders a packet on `way` is tried in: every choice at the
/// `contested` hooks it can meet, the first copy first everywhere, then
/// the second first everywhere, then the mixed ones.
pub fn orders(contested: u8, way: Way) -> Vec<u8> {
    let met = match way {
        Way::Input | Way::Forward => bit(b"PREROUTING") | bit(b"INPUT") | bit(b"FORWARD") | bit(b"POSTROUTING"),
        Way::Output => u8::MAX,
    };
    let all = contested & met;
    let mut orders = vec![0, all];
    let mut mixed = all;
    while mixed != 0 {
        mixed = (mixed - 1) & all;
        if mixed != 0 {
            orders.push(mixed);
        }
    }
    orders.dedup();
    orders
}

/// An order said: "legacy first at each hook", or per contested hook met.
pub fn said(order: u8, all: u8, first: &str, second: &str) -> String {
    match order {
        0 => format!("{first} first at each hook"),
        o if o == all => format!("{second} first at each hook"),
        _ => {
            let at = |hook: &&[u8]| {
                let who = if order & bit(hook) != 0 { second } else { first };
                format!("{who} first at {}", String::from_utf8_lossy(hook))
            };
            let named: Vec<String> = HOOKS.iter().filter(|h| all & bit(h) != 0).map(at).collect();
            named.join(", ")
        }
    }
}
