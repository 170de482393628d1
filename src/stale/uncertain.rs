//! Why one family's decision is not certain enough to call the other
//! backend's rules stale, by kind: the source that decided is not certain
//! by itself ([`super::certainty()`]), or evidence contradicts a decision
//! that would be ([`mod@super::certainty`]). It decides nothing; `stale`
//! branches on the kind (only a contradicted decision is one
//! `--despite-contradiction` or removing the evidence can settle) and shows
//! the text.

use std::fmt;

/// Why a family's decision is not certain enough for `stale --remove`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Uncertain {
    /// The source that decided is neither the override nor the host link:
    /// its reason, and what more there is to say of it ([`Facts::doubt`]).
    ///
    /// [`Facts::doubt`]: crate::decision::Facts::doubt
    BySource {
        reason: String,
        doubt: Option<&'static str>,
    },
    /// The override or the host link decided, and evidence contradicts it:
    /// one line per piece.
    Contradicted(Vec<String>),
}

impl fmt::Display for Uncertain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Uncertain::BySource { reason, doubt: None } => f.write_str(reason),
            Uncertain::BySource {
                reason,
                doubt: Some(doubt),
            } => write!(f, "{reason}; {doubt}"),
            Uncertain::Contradicted(lines) => write!(
                f,
                "contradicted by {} piece{} of evidence: {}",
                lines.len(),
                if lines.len() == 1 { "" } else { "s" },
                lines.join("; ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Uncertain;
    use crate::decision::{Decision, Source};
    use crate::mode::Mode;
    use crate::stale::certainty;

    #[test]
    fn a_source_not_certain_by_itself_says_its_reason_and_its_doubt() {
        let decision = Decision {
            command: "iptables",
            mode: Mode::Nft,
            decided_by: Source::HintChain,
            reason: "hint chain KUBE-IPTABLES-HINT found in nft (ipv4)".into(),
            evidence: Vec::new(),
            rule_counts: None,
            lacking: Vec::new(),
            took: None,
        };
        let uncertain = certainty(&decision).expect_err("a hint chain is not certain");
        assert_eq!(
            uncertain,
            Uncertain::BySource {
                reason: "hint chain KUBE-IPTABLES-HINT found in nft (ipv4)".into(),
                doubt: Source::HintChain.facts().doubt,
            }
        );
        assert_eq!(
            uncertain.to_string(),
            "hint chain KUBE-IPTABLES-HINT found in nft (ipv4); a hint chain says where kubelet and kube-proxy write, not where the host's other writers do"
        );
        let by_counts = Decision {
            decided_by: Source::RuleCounts,
            reason: "legacy holds 3 rules, nft none".into(),
            ..decision
        };
        assert_eq!(
            certainty(&by_counts).map_err(|u| u.to_string()),
            Err("legacy holds 3 rules, nft none".to_string())
        );
    }

    #[test]
    fn a_contradicted_decision_counts_its_pieces_of_evidence() {
        let one = Uncertain::Contradicted(vec!["host link /host/usr/sbin/iptables points to legacy".into()]);
        assert!(matches!(&one, Uncertain::Contradicted(lines) if lines.len() == 1));
        assert_eq!(
            one.to_string(),
            "contradicted by 1 piece of evidence: host link /host/usr/sbin/iptables points to legacy"
        );
        let two = Uncertain::Contradicted(vec!["a".into(), "b".into()]);
        assert_eq!(two.to_string(), "contradicted by 2 pieces of evidence: a; b");
    }
}
