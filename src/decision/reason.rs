//! Why a decision is what it is: what the deciding source found, put into
//! words only where they are shown (`Display`: `detect`, a debug log, a
//! warning, a backend that cannot run).
//!
//! A wrapped call shows none of it, yet formatting its reason (a host link's
//! path and targets, the override's value) cost it more instructions than the
//! rest of its decision, and touched `core::fmt`'s code, page by page. So the
//! sources a call ends at most often, the override, the host link and the
//! hint chains, keep what they found as it is; the others, on calls that
//! count rules or read files anyway, give their reason in words.

use crate::escape::Shown as _;
use crate::family::Family;
use crate::host_link;
use crate::mode::{Mode, OVERRIDE_VAR};
use crate::settings::Origin;
use std::fmt;
use std::path::PathBuf;

/// Why the decision's mode; shown by `Display`, in one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// `IPTABLES_MODE` names the mode: its value as given, and where from
    /// (the environment or a settings file's line).
    Override { value: String, origin: Origin },
    /// The host link at `path`, whose targets, as read, name the mode.
    HostLink { path: PathBuf, chain: Vec<PathBuf> },
    /// A hint chain in `found_in`'s mangle table of `family`; for legacy,
    /// whether nft's hint chains could be read (none was found there).
    HintChain {
        chain: &'static str,
        family: Family,
        found_in: Mode,
        nft_read: bool,
    },
    /// Any other source's reason, in words.
    Described(String),
}

impl From<String> for Reason {
    fn from(text: String) -> Reason {
        Reason::Described(text)
    }
}

impl From<&str> for Reason {
    fn from(text: &str) -> Reason {
        Reason::Described(text.to_string())
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Override {
                value,
                origin: origin @ Origin::File { .. },
            } => write!(f, "pinned by the settings file {origin}: {value}"),
            Reason::Override { value, .. } => write!(f, "overridden by environment variable {OVERRIDE_VAR}={value}"),
            Reason::HostLink { path, chain } => {
                write!(f, "host link {} {}", path.shown(), host_link::shown_chain(chain))
            }
            Reason::HintChain {
                chain,
                family,
                found_in: Mode::Nft,
                ..
            } => write!(f, "hint chain {chain} found in nft ({})", family.label()),
            Reason::HintChain {
                chain,
                family,
                found_in: Mode::Legacy,
                nft_read,
            } => write!(
                f,
                "hint chain {chain} found in legacy ({}), {}",
                family.label(),
                if *nft_read {
                    "not in nft"
                } else {
                    "nft's could not be read"
                }
            ),
            Reason::Described(text) => f.write_str(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn reasons_read_as_before() {
        let override_env = Reason::Override {
            value: "nft".into(),
            origin: Origin::Environment,
        };
        assert_eq!(
            override_env.to_string(),
            "overridden by environment variable IPTABLES_MODE=nft"
        );
        let override_file = Reason::Override {
            value: "legacy".into(),
            origin: Origin::File {
                path: Path::new("/etc/iptables-wrapper/IPTABLES_MODE").into(),
                line: 2,
            },
        };
        assert_eq!(
            override_file.to_string(),
            "pinned by the settings file /etc/iptables-wrapper/IPTABLES_MODE line 2: legacy"
        );
        let link = Reason::HostLink {
            path: "/host/usr/sbin/iptables".into(),
            chain: vec!["/etc/alternatives/iptables".into(), "/usr/sbin/iptables-nft".into()],
        };
        assert_eq!(
            link.to_string(),
            "host link /host/usr/sbin/iptables -> /etc/alternatives/iptables -> /usr/sbin/iptables-nft"
        );
        let hint = |found_in, nft_read| Reason::HintChain {
            chain: "KUBE-IPTABLES-HINT",
            family: Family::Ipv6,
            found_in,
            nft_read,
        };
        assert_eq!(
            hint(Mode::Nft, true).to_string(),
            "hint chain KUBE-IPTABLES-HINT found in nft (ipv6)"
        );
        assert_eq!(
            hint(Mode::Legacy, true).to_string(),
            "hint chain KUBE-IPTABLES-HINT found in legacy (ipv6), not in nft"
        );
        assert_eq!(
            hint(Mode::Legacy, false).to_string(),
            "hint chain KUBE-IPTABLES-HINT found in legacy (ipv6), nft's could not be read"
        );
        assert_eq!(Reason::from("counts").to_string(), "counts");
    }
}
