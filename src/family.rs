//! The two address families the iptables commands work on.

/// IPv4 (`iptables*`) or IPv6 (`ip6tables*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Ipv4,
    Ipv6,
}

impl Family {
    pub const BOTH: [Family; 2] = [Family::Ipv4, Family::Ipv6];

    /// The iptables program prefix of this family: `iptables` or `ip6tables`.
    pub fn program(self) -> &'static str {
        match self {
            Family::Ipv4 => "iptables",
            Family::Ipv6 => "ip6tables",
        }
    }

    /// The nftables family name: `ip` or `ip6`.
    pub fn nft_name(self) -> &'static str {
        match self {
            Family::Ipv4 => "ip",
            Family::Ipv6 => "ip6",
        }
    }

    /// Short label used in reports: `ipv4` / `ipv6`.
    pub fn label(self) -> &'static str {
        match self {
            Family::Ipv4 => "ipv4",
            Family::Ipv6 => "ipv6",
        }
    }
}
