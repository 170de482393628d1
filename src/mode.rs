//! The two iptables backends, and the `IPTABLES_MODE` override that picks one
//! (where the override's value comes from is `settings`' concern).

use crate::escape::quoted;
use std::fmt;

/// Which iptables backend a call goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Nft,
    Legacy,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Nft => "nft",
            Mode::Legacy => "legacy",
        }
    }

    pub fn other(self) -> Mode {
        match self {
            Mode::Nft => Mode::Legacy,
            Mode::Legacy => Mode::Nft,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The setting that overrides detection (environment variable, or the file
/// of that name in the settings directory: see `settings`).
pub const OVERRIDE_VAR: &str = "IPTABLES_MODE";

/// An `IPTABLES_MODE` value that is none of the accepted ones, as given.
#[derive(Debug, PartialEq, Eq)]
pub struct InvalidOverride(pub Vec<u8>);

impl fmt::Display for InvalidOverride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let not_utf8 = if std::str::from_utf8(&self.0).is_err() {
            "not valid UTF-8; "
        } else {
            ""
        };
        write!(
            f,
            "invalid {OVERRIDE_VAR}={}: {not_utf8}expected nft, nf_tables, legacy, auto or empty (case-insensitive)",
            quoted(&self.0)
        )
    }
}

/// Parses an `IPTABLES_MODE` value: `Ok(None)` means "detect".
pub fn parse_override(value: &[u8]) -> Result<Option<Mode>, InvalidOverride> {
    match value.to_ascii_lowercase().as_slice() {
        b"" | b"auto" => Ok(None),
        b"nft" | b"nf_tables" => Ok(Some(Mode::Nft)),
        b"legacy" => Ok(Some(Mode::Legacy)),
        _ => Err(InvalidOverride(value.to_vec())),
    }
}

/// What a program or link name says about its backend, by exact name:
/// `iptables-nft`, `ip6tables-nft`, `xtables-nft-multi` and their `-save` /
/// `-restore` forms say nft; the same with `legacy` say legacy. Anything
/// else says nothing: a wrapper, a plain `iptables`, and names that merely
/// contain a mode (`xtables-legacy-multi.dpkg-old`, `iptables-nft-but-weird`),
/// which no packaged backend has.
pub fn mode_named_by(file_name: &str) -> Option<Mode> {
    // Taken apart rather than compared with each of the 14 names: it runs
    // on every call that reads a host link.
    let mode = match file_name.strip_prefix("xtables-") {
        Some(rest) => rest.strip_suffix("-multi")?,
        None => {
            let rest = file_name
                .strip_prefix("iptables-")
                .or_else(|| file_name.strip_prefix("ip6tables-"))?;
            rest.strip_suffix("-save")
                .or_else(|| rest.strip_suffix("-restore"))
                .unwrap_or(rest)
        }
    };
    [Mode::Nft, Mode::Legacy].into_iter().find(|m| m.name() == mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_values() {
        assert_eq!(parse_override(b""), Ok(None));
        assert_eq!(parse_override(b"AUTO"), Ok(None));
        assert_eq!(parse_override(b"nft"), Ok(Some(Mode::Nft)));
        assert_eq!(parse_override(b"NF_TABLES"), Ok(Some(Mode::Nft)));
        assert_eq!(parse_override(b"Legacy"), Ok(Some(Mode::Legacy)));
        assert_eq!(parse_override(b"bogus"), Err(InvalidOverride(b"bogus".to_vec())));
        assert_eq!(parse_override(b" nft"), Err(InvalidOverride(b" nft".to_vec())));
        assert_eq!(parse_override(b"nft\xff"), Err(InvalidOverride(b"nft\xff".to_vec())));
        assert_eq!(
            InvalidOverride(b"n\x1b[31mft\xff".to_vec()).to_string(),
            "invalid IPTABLES_MODE=\"n\\u{1b}[31mft\\xff\": not valid UTF-8; expected nft, nf_tables, legacy, auto or empty (case-insensitive)"
        );
    }

    #[test]
    fn names_that_say_a_mode() {
        assert_eq!(mode_named_by("iptables-nft"), Some(Mode::Nft));
        assert_eq!(mode_named_by("ip6tables-nft-save"), Some(Mode::Nft));
        assert_eq!(mode_named_by("xtables-nft-multi"), Some(Mode::Nft));
        assert_eq!(mode_named_by("iptables-legacy"), Some(Mode::Legacy));
        assert_eq!(mode_named_by("xtables-legacy-multi"), Some(Mode::Legacy));
        assert_eq!(mode_named_by("iptables-wrapper"), None);
        assert_eq!(mode_named_by("iptables"), None);
        assert_eq!(mode_named_by("iptables-nft-legacy"), None);
        assert_eq!(mode_named_by("ip6tables-legacy-restore"), Some(Mode::Legacy));
        assert_eq!(mode_named_by("iptables-nft-restore"), Some(Mode::Nft));
        assert_eq!(mode_named_by("xtables-legacy-multi.dpkg-old"), None);
        assert_eq!(mode_named_by("iptables-nft-but-weird"), None);
        assert_eq!(mode_named_by("iptables-legacy-foo"), None);
        assert_eq!(mode_named_by("xtables-nft-multi.new"), None);
        assert_eq!(mode_named_by("Iptables-nft"), None);
        assert_eq!(mode_named_by("iptables-nft-save-save"), None);
        assert_eq!(mode_named_by("iptables--save"), None);
        assert_eq!(mode_named_by("xtables-multi"), None);
        assert_eq!(mode_named_by("xtables-nft-save"), None);
        assert_eq!(mode_named_by("iptables-nft-multi"), None);
    }
}
