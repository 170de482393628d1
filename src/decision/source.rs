//! The sources of evidence and what is known of each, in one table
//! ([`Source::facts`]): its key, what it reads, whether its word is stated
//! by the operator or the host (obeyed whatever the kernel has, certain
//! enough for `stale --remove`), whether its decision stands when another
//! read failed, whether it rests on the counts, how evidence from it weighs
//! against a stated decision, and how its reason is kept. Every caller that
//! classifies a source asks these; none matches on the variants itself.
//!
//! The order the sources are consulted in is `decide_on`'s, top to
//! bottom; the variants are listed in that order. Adding a source: a
//! variant, its row here, its module (with a `FileReading` of its own when
//! it reads files), and its call in `decide_on`.

/// The sources of evidence, in the order `decide_on` (the decision's
/// module) consults them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Override,
    HostLink,
    HintChain,
    KubeProxyTable,
    RuleCounts,
    XtablesLock,
    /// Whether the running kernel has each backend: never decides alone.
    BackendPresence,
    /// What decides when nothing before it did.
    Default,
}

/// What a source reads to find its evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// The settings (the environment, the settings directory).
    Settings,
    /// Files under the host root, or this filesystem's (the lock file).
    Files,
    /// The kernel's state in this network namespace (its tables, or the
    /// files that say which backends it has).
    Kernel,
    /// Nothing of its own: what the others left.
    Nothing,
}

/// How a piece of evidence from a source weighs against a decision by a
/// stated source (see [`Source::is_stated`]) when it points to the other
/// backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgainstStated {
    /// It contradicts it: `stale --remove` refuses the decision.
    Contradicts,
    /// It contradicts it unless a hint chain points to the chosen backend
    /// too (then each backend has one, and it only disagrees).
    ContradictsUnlessAHintAgrees,
    /// It only disagrees.
    Disagrees,
}

/// How a source's decision is shown: `detect`, a debug log and a warning
/// show its reason; a wrapped call shows none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReasonKept {
    /// What it found, as it is: formatted only when shown (the sources a
    /// wrapped call ends at most often).
    AsFound,
    /// In words, when it decides.
    InWords,
}

/// Everything known of one source, as [`Source::facts`] gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// A stable key for machine-readable output.
    pub key: &'static str,
    pub reads: Reads,
    /// Its word is the operator's or the host's: obeyed even where the
    /// kernel lacks the backend it names (with a warning), certain enough
    /// for `stale --remove`, and weighed against contradicting evidence.
    pub stated: bool,
    /// Why a decision by it is not certain enough for `stale --remove`,
    /// beyond its reason, when there is more to say.
    pub doubt: Option<&'static str>,
    /// A decision by it stands though another read failed (for want of a
    /// descriptor, say): it rests on something it found, never on something
    /// missing or unreadable.
    pub stands_on_what_it_found: bool,
    /// A decision by it rests on the rule counts (or on nothing better):
    /// both backends holding many rules is then a risk worth a warning.
    pub rests_on_counts: bool,
    pub against_stated: AgainstStated,
    pub reason: ReasonKept,
}

impl Source {
    /// What is known of this source: one row each.
    pub const fn facts(self) -> Facts {
        match self {
            Source::Override => Facts {
                key: "override",
                reads: Reads::Settings,
                stated: true,
                doubt: None,
                stands_on_what_it_found: true,
                rests_on_counts: false,
                against_stated: AgainstStated::Disagrees,
                reason: ReasonKept::AsFound,
            },
            Source::HostLink => Facts {
                key: "host-link",
                reads: Reads::Files,
                stated: true,
                doubt: None,
                stands_on_what_it_found: true,
                rests_on_counts: false,
                against_stated: AgainstStated::Contradicts,
                reason: ReasonKept::AsFound,
            },
            Source::HintChain => Facts {
                key: "hint-chain",
                reads: Reads::Kernel,
                stated: false,
                doubt: Some(
                    "a hint chain says where kubelet and kube-proxy write, not where the host's other writers do",
                ),
                stands_on_what_it_found: true,
                rests_on_counts: false,
                against_stated: AgainstStated::ContradictsUnlessAHintAgrees,
                reason: ReasonKept::AsFound,
            },
            Source::KubeProxyTable => Facts {
                key: "kube-proxy-table",
                reads: Reads::Kernel,
                stated: false,
                doubt: None,
                // It decides where legacy cannot be read, too.
                stands_on_what_it_found: false,
                rests_on_counts: false,
                against_stated: AgainstStated::ContradictsUnlessAHintAgrees,
                reason: ReasonKept::InWords,
            },
            Source::RuleCounts => Facts {
                key: "rule-counts",
                reads: Reads::Kernel,
                stated: false,
                doubt: None,
                stands_on_what_it_found: false,
                rests_on_counts: true,
                against_stated: AgainstStated::Disagrees,
                reason: ReasonKept::InWords,
            },
            Source::XtablesLock => Facts {
                key: "xtables-lock",
                reads: Reads::Files,
                stated: false,
                doubt: None,
                stands_on_what_it_found: false,
                rests_on_counts: true,
                against_stated: AgainstStated::Disagrees,
                reason: ReasonKept::InWords,
            },
            Source::BackendPresence => Facts {
                key: "backend-presence",
                reads: Reads::Kernel,
                stated: false,
                doubt: None,
                stands_on_what_it_found: false,
                rests_on_counts: false,
                against_stated: AgainstStated::Disagrees,
                reason: ReasonKept::InWords,
            },
            Source::Default => Facts {
                key: "default",
                reads: Reads::Nothing,
                stated: false,
                doubt: None,
                stands_on_what_it_found: false,
                rests_on_counts: true,
                against_stated: AgainstStated::Disagrees,
                reason: ReasonKept::InWords,
            },
        }
    }

    /// A stable key for machine-readable output.
    pub fn key(self) -> &'static str {
        self.facts().key
    }

    /// Whether its word is the operator's or the host's (see
    /// [`Facts::stated`]).
    pub fn is_stated(self) -> bool {
        self.facts().stated
    }

    /// Whether a decision by it is certain enough to call the other
    /// backend's rules stale: a stated source only.
    pub fn certain_enough_to_remove(self) -> bool {
        self.facts().stated
    }
}

#[cfg(test)]
mod tests {
    use super::{ReasonKept, Source};

    const ALL: [Source; 8] = [
        Source::Override,
        Source::HostLink,
        Source::HintChain,
        Source::KubeProxyTable,
        Source::RuleCounts,
        Source::XtablesLock,
        Source::BackendPresence,
        Source::Default,
    ];

    #[test]
    fn keys_are_as_before_and_distinct() {
        let keys: Vec<&str> = ALL.iter().map(|s| s.key()).collect();
        assert_eq!(
            keys,
            [
                "override",
                "host-link",
                "hint-chain",
                "kube-proxy-table",
                "rule-counts",
                "xtables-lock",
                "backend-presence",
                "default"
            ]
        );
    }

    #[test]
    fn only_the_override_and_the_host_link_are_stated() {
        let stated: Vec<Source> = ALL.into_iter().filter(|s| s.is_stated()).collect();
        assert_eq!(stated, [Source::Override, Source::HostLink]);
        let certain: Vec<Source> = ALL.into_iter().filter(|s| s.certain_enough_to_remove()).collect();
        assert_eq!(certain, stated);
    }

    #[test]
    fn a_reason_kept_as_found_has_a_variant_of_its_own() {
        // `Collector::decide` checks each decision's reason against it.
        let as_found: Vec<Source> = ALL
            .into_iter()
            .filter(|s| s.facts().reason == ReasonKept::AsFound)
            .collect();
        assert_eq!(as_found, [Source::Override, Source::HostLink, Source::HintChain]);
    }
}
