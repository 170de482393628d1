//! iptables-wrapper: decides on every call whether the host runs iptables
//! `legacy` (x_tables) or `nft` (nf_tables), then execs that backend.
//!
//! The binary (`src/main.rs`) is thin; each concern lives in its own module.

pub mod family;
pub mod kernel;
