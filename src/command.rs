//! The six iptables commands the wrapper stands in for.

use crate::family::Family;

/// One of `iptables`, `iptables-save`, `iptables-restore` and their
/// `ip6tables` twins, as the wrapper was invoked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrappedCommand {
    pub name: &'static str,
    pub family: Family,
}

/// Every command name the wrapper answers to, in install order.
pub const COMMAND_NAMES: [&str; 6] = [
    "iptables",
    "iptables-save",
    "iptables-restore",
    "ip6tables",
    "ip6tables-save",
    "ip6tables-restore",
];

impl WrappedCommand {
    /// The command for an invocation name (the basename of `argv[0]`), if it is one.
    pub fn from_name(name: &str) -> Option<WrappedCommand> {
        let name = *COMMAND_NAMES.iter().find(|known| **known == name)?;
        let family = if name.starts_with("ip6") {
            Family::Ipv6
        } else {
            Family::Ipv4
        };
        Some(WrappedCommand { name, family })
    }

    /// The save command of a family: `iptables-save` or `ip6tables-save`.
    pub fn save_tool(family: Family) -> WrappedCommand {
        let name = match family {
            Family::Ipv4 => "iptables-save",
            Family::Ipv6 => "ip6tables-save",
        };
        WrappedCommand { name, family }
    }
}

/// Whether `name` (a basename) is another program of the iptables family
/// (`ebtables`, `arptables`, `iptables-legacy`, `xtables-monitor`, ...),
/// one the wrapper does not answer to: a call through it is refused with
/// the names it does answer to, not taken for the wrapper's own command
/// line. The wrapper's own name (`iptables-wrapper...`) is not one.
pub fn another_tables_program(name: &str) -> bool {
    name.contains("tables") && WrappedCommand::from_name(name).is_none() && !name.starts_with("iptables-wrapper")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_tables_programs_are_told_apart() {
        for other in [
            "ebtables",
            "arptables",
            "iptables-legacy",
            "ip6tables-nft-save",
            "xtables-monitor",
        ] {
            assert!(another_tables_program(other), "{other}");
        }
        for own in [
            "iptables",
            "ip6tables-restore",
            "iptables-wrapper",
            "iptables-wrapper-1.2",
            "detect",
            "-L",
        ] {
            assert!(!another_tables_program(own), "{own}");
        }
    }

    #[test]
    fn known_names_only() {
        assert_eq!(
            WrappedCommand::from_name("ip6tables-restore").unwrap().family,
            Family::Ipv6
        );
        assert_eq!(WrappedCommand::from_name("iptables").unwrap().family, Family::Ipv4);
        assert!(WrappedCommand::from_name("iptables-wrapper").is_none());
        assert!(WrappedCommand::from_name("iptables-nft").is_none());
    }
}
