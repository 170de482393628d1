//! Reads the kernel's firewall state directly, without side effects:
//! legacy x_tables through getsockopt, nf_tables through netlink.

pub mod legacy;
pub mod nft;

/// The tables iptables-nft and iptables-legacy use; only these are counted.
pub const IPTABLES_TABLES: [&str; 5] = ["raw", "mangle", "filter", "security", "nat"];

/// kubelet's hint chains, created in the mangle table with the host's iptables.
pub const HINT_CHAINS: [&str; 2] = ["KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"];
