//! One piece of evidence: which source read it, where, how, the mode it
//! points to, and what it knows: something found ([`Finding::Known`]),
//! nothing there ([`Finding::Absent`]), or nothing learned because it could
//! not be read ([`Finding::Unknown`]).
//!
//! Whether a piece of evidence is unknown is asked of its [`Finding`], never
//! of its text: the texts come partly from outside (a link's target, an
//! error's message) and say nothing reliable about the state. Every text
//! shown, in the `detect` report, its JSON and the warnings, is rendered from
//! the finding by its `Display`. What it cannot see: how sure a known
//! finding is (a count's bounds are in [`RuleCounts`](super::RuleCounts)),
//! and a finding known in part (legacy tables listed whose rules could not
//! be read) is known: what was found is what makes it evidence.

use super::source::Source;
use crate::kernel::modules::Presence;
use crate::mode::Mode;
use std::fmt;

/// One piece of evidence: where it was read, what it found, how it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    pub source: Source,
    pub location: String,
    pub finding: Finding,
    pub method: String,
    /// The mode it points to, if it points anywhere.
    pub points_to: Option<Mode>,
}

/// What a piece of evidence knows. Shown by `Display`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// Read, and something found: a mode, a link's target, counts,
    /// "present", the lock file's state. Shown as it is.
    Known(String),
    /// Read, and nothing there: "absent (ipv4, ipv6)", "no host link (...)",
    /// a backend not in the kernel. Shown as it is.
    Absent(String),
    /// Could not be read (refused, unreadable, not asked): never zero or
    /// empty. Shown as "unknown" and the reason, as `shown` says.
    Unknown { reason: String, shown: ReasonShown },
}

/// How an unknown's reason follows the word "unknown".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasonShown {
    /// `unknown: {reason}`: the reason is an error's own words.
    AfterColon,
    /// `unknown ({reason})`: the reason is an aside, as in
    /// [`Presence::describe`].
    InParentheses,
}

impl Finding {
    /// Unknown because of an error: shown `unknown: {reason}`.
    pub fn unknown(reason: impl Into<String>) -> Finding {
        Finding::Unknown {
            reason: reason.into(),
            shown: ReasonShown::AfterColon,
        }
    }

    /// Unknown, with the reason as an aside: shown `unknown ({reason})`.
    pub fn unknown_aside(reason: impl Into<String>) -> Finding {
        Finding::Unknown {
            reason: reason.into(),
            shown: ReasonShown::InParentheses,
        }
    }

    /// A backend's presence in the running kernel: present or askable is
    /// known, not loaded or missing is absent, and unknown is unknown. Shown
    /// as [`Presence::describe`] shows it.
    pub fn of_presence(presence: &Presence) -> Finding {
        match presence {
            Presence::Present(_) | Presence::Askable(_) => Finding::Known(presence.describe()),
            Presence::NotLoaded(_) | Presence::Missing(_) => Finding::Absent(presence.describe()),
            Presence::Unknown(why) => Finding::unknown_aside(why.as_str()),
        }
    }

    /// Whether it could not be read.
    pub fn is_unknown(&self) -> bool {
        matches!(self, Finding::Unknown { .. })
    }

    /// A stable key for machine-readable output: "known", "absent" or
    /// "unknown".
    pub fn state(&self) -> &'static str {
        match self {
            Finding::Known(_) => "known",
            Finding::Absent(_) => "absent",
            Finding::Unknown { .. } => "unknown",
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Known(text) | Finding::Absent(text) => f.write_str(text),
            Finding::Unknown {
                reason,
                shown: ReasonShown::AfterColon,
            } => write!(f, "unknown: {reason}"),
            Finding::Unknown {
                reason,
                shown: ReasonShown::InParentheses,
            } => write!(f, "unknown ({reason})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Finding, Presence};

    #[test]
    fn findings_render_as_before() {
        assert_eq!(
            Finding::Known("-> /usr/sbin/iptables-nft".into()).to_string(),
            "-> /usr/sbin/iptables-nft"
        );
        assert_eq!(
            Finding::Absent("absent (ipv4, ipv6)".into()).to_string(),
            "absent (ipv4, ipv6)"
        );
        assert_eq!(
            Finding::unknown("GET_INFO refused: EPERM").to_string(),
            "unknown: GET_INFO refused: EPERM"
        );
        assert_eq!(
            Finding::unknown_aside("netlink refused; the save tool cannot show them").to_string(),
            "unknown (netlink refused; the save tool cannot show them)"
        );
    }

    #[test]
    fn the_state_is_the_variant_not_the_text() {
        let known = Finding::Known("unknown-looking text".into());
        assert!(!known.is_unknown());
        assert_eq!(known.state(), "known");
        let absent = Finding::Absent("unknown".into());
        assert!(!absent.is_unknown());
        assert_eq!(absent.state(), "absent");
        let unknown = Finding::unknown("");
        assert!(unknown.is_unknown());
        assert_eq!(unknown.state(), "unknown");
    }

    #[test]
    fn presence_renders_as_it_describes_itself() {
        let all = [
            (Presence::Present("loaded".into()), "known"),
            (Presence::Askable("no module loading".into()), "known"),
            (Presence::NotLoaded("not in /sys/module".into()), "absent"),
            (Presence::Missing("no module".into()), "absent"),
            (Presence::Unknown("modules.builtin unreadable".into()), "unknown"),
        ];
        for (presence, state) in all {
            let finding = Finding::of_presence(&presence);
            assert_eq!(finding.to_string(), presence.describe());
            assert_eq!(finding.state(), state, "{presence:?}");
        }
    }
}
