//! What the fates say of one stale table, and how a verdict says it: a
//! witness packet (its fate now and after, the stale rule it meets
//! first, and where it passes while its reply is stopped, that too), a
//! rule the model cannot tell past, or nothing.

use super::walk::{self, End, Fate, Step};
use super::Place;

/// A packet removing a table lets through, each part said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Witness {
    /// `tcp any → any:8080, arriving for the host by any interface, NEW`,
    /// and what it is sent after where it meets what another wrote.
    pub packet: String,
    /// The copy run first at each hook, where only that order stops it.
    pub order: Option<String>,
    /// Its fate through both copies, then the live one alone: how it
    /// ends, then the rules that changed or decided it.
    pub now: String,
    pub after: String,
    /// The first rule of the stale copy it meets that changed or decided it.
    pub stale_rule: Option<Place>,
}

impl std::fmt::Display for Witness {
    /// `PACKET (now: dropped ...; after: passes ...)`, the order after
    /// "now" where said.
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let order = self.order.as_ref().map(|o| format!(", {o}")).unwrap_or_default();
        write!(f, "{} (now{order}: {}; after: {})", self.packet, self.now, self.after)
    }
}

/// What the fates say of one stale table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// A packet removing it lets through.
    Opens(Witness),
    /// No witness for it, but a rule not modelled that only it holds
    /// decides a packet that passes after: the rule and the packet, said,
    /// and where the rule is.
    Undecided(String, Place),
    /// No witness for it, but a rule not modelled decides some packet:
    /// that rule, said.
    CannotTell(String),
    Nothing,
}

impl Found {
    /// The witness packet, where one opens.
    pub fn witness(&self) -> Option<&Witness> {
        match self {
            Found::Opens(witness) => Some(witness),
            _ => None,
        }
    }

    /// The stale rule the witness met first, or the stale rule the model
    /// cannot tell past; with how the side-by-side view says it.
    pub fn first_place(&self) -> Option<(&Place, &'static str)> {
        match self {
            Found::Opens(witness) => witness.stale_rule.as_ref().map(|p| (p, "the witness meets first")),
            Found::Undecided(_, place) => Some((place, "the model cannot tell past")),
            _ => None,
        }
    }
}

/// What a stale table's verdict says with the fates' `found`: `held`, why
/// the judgement by twins holds it (None: it goes). A witness holds it
/// ("removing it opens: ..."), as does a rule not modelled that only it
/// holds deciding a packet that passes after ("cannot tell: ..."); any
/// other unknown is named only where the twins hold it.
pub fn said(found: &Found, held: Option<String>) -> Option<String> {
    match (found, held) {
        (Found::Opens(witness), None) => Some(format!("removing it opens: {witness}")),
        (Found::Opens(witness), Some(why)) => Some(format!("removing it opens: {witness}; {why}")),
        (Found::Undecided(why, _), None) => Some(format!("cannot tell: {why}")),
        (Found::Undecided(why, _), Some(held)) => Some(format!("cannot tell: {why}; {held}")),
        (Found::CannotTell(rule), Some(why)) => Some(format!(
            "cannot tell: what {rule} does (a match not modelled, or a value not read); {why}"
        )),
        (_, held) => held,
    }
}

/// The steps of a fate worth saying: what changed the packet, then what
/// decided it (for a packet that passed, the last rule or policy of a
/// filter table that let it on, else the last one).
pub fn said_steps(fate: &Fate) -> String {
    let decided = |s: &&Step| s.rule.is_none() || verdict_of(s);
    let mut shown: Vec<&Step> = fate.steps.iter().filter(|s| !decided(s)).collect();
    let last = match fate.end {
        End::Passed => fate
            .steps
            .iter()
            .rev()
            .filter(decided)
            .find(|s| s.table == b"filter")
            .or_else(|| fate.steps.iter().rev().find(decided)),
        _ => fate.steps.last(),
    };
    shown.extend(last);
    let mut said: Vec<String> = shown.iter().map(|s| s.to_string()).collect();
    said.dedup();
    match (fate.end, said.is_empty()) {
        (End::Passed, true) => "(no rule meets it)".into(),
        _ => said.join(" then "),
    }
}

/// Whether a step is a rule's verdict (rather than a change it made).
fn verdict_of(step: &Step) -> bool {
    let text = String::from_utf8_lossy(&step.text);
    [" ACCEPT", " DROP", " REJECT", " QUEUE", " NFQUEUE"]
        .iter()
        .any(|v| text.split(" -j").nth(1).is_some_and(|t| t.starts_with(v)))
}

/// How `fate` ends, said: `dropped`, `queued`, `passes`.
pub fn end_said(end: End) -> &'static str {
    match end {
        End::Passed => "passes",
        End::Dropped => "dropped",
        End::Queued => "queued",
        End::Unknown => "unknown",
    }
}

/// A reply's fate after, where it does not pass: `dropped RULE`, or
/// what the model cannot tell past.
pub fn reply_said(reply: &Fate) -> String {
    match (reply.end, reply.steps.last()) {
        (End::Unknown, Some(last)) => format!("one the model cannot tell past {}", unknown_said(last)),
        (end, _) => format!("{} {}", end_said(end), said_steps(reply)),
    }
}

/// "`-A INPUT -m limit ... -j DROP` (legacy filter INPUT rule 7)".
pub fn unknown_said(step: &Step) -> String {
    if step.backend == walk::ROUTING {
        return format!(
            "`{}` (a routing rule, routes not modelled)",
            String::from_utf8_lossy(&step.text)
        );
    }
    if step.backend == walk::NATIVE {
        return format!(
            "the {} at {} (not read)",
            String::from_utf8_lossy(&step.text),
            String::from_utf8_lossy(&step.chain)
        );
    }
    format!(
        "`{}` ({} {} {} rule {})",
        String::from_utf8_lossy(&step.text),
        step.backend,
        String::from_utf8_lossy(&step.table),
        String::from_utf8_lossy(&step.chain),
        step.rule.unwrap_or_default()
    )
}
