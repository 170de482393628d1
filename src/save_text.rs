//! The text the iptables save tools print, read one way for `detect`,
//! `stale` and the tests: what each line is, the tables it declares, and a
//! save's sections for some of its tables.
//!
//! | line | is |
//! |---|---|
//! | `*NAME` | a table begins |
//! | `:CHAIN POLICY [p:b]` | a chain: built-in with its policy, or a user chain (`-`) |
//! | `-A CHAIN ...`, or `[p:b] -A CHAIN ...` (`-c`) | a rule of that chain |
//! | `COMMIT` | the table ends |
//! | anything else (`#` headers, blank) | nothing |
//!
//! A line may end in `\n` and `\r\n`; neither is part of what it holds.
//! Bytes are kept as they are (a comment need not be UTF-8).

/// What one line of a save is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// `*NAME`.
    Table(&'a [u8]),
    /// `:CHAIN POLICY`: `policy` is `-` for a user chain (and for a
    /// declaration that names none).
    Chain {
        name: &'a [u8],
        policy: &'a [u8],
    },
    /// `-A CHAIN ...`: `rule` is the whole rule from `-A`, counters aside,
    /// blanks at its end trimmed.
    Rule {
        chain: &'a [u8],
        rule: &'a [u8],
    },
    Commit,
    Other,
}

/// What `line` is (with or without its line end).
pub fn line(line: &[u8]) -> Line<'_> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if let Some(name) = line.strip_prefix(b"*") {
        return Line::Table(name);
    }
    if line == b"COMMIT" {
        return Line::Commit;
    }
    if let Some(declaration) = line.strip_prefix(b":") {
        let mut fields = words(declaration);
        let name = fields.next().unwrap_or_default();
        let policy = fields.next().unwrap_or(b"-");
        return Line::Chain { name, policy };
    }
    // `-c` saves print "[packets:bytes] -A ...".
    let rule = match line.strip_prefix(b"[") {
        Some(rest) => match rest.iter().position(|&b| b == b']') {
            Some(end) => rest[end + 1..].trim_ascii_start(),
            None => line,
        },
        None => line,
    };
    match rule.strip_prefix(b"-A ") {
        Some(body) => Line::Rule {
            chain: words(body).next().unwrap_or_default(),
            rule: rule.trim_ascii_end(),
        },
        None => Line::Other,
    }
}

/// Each line of `save`, with what it is.
pub fn lines(save: &[u8]) -> impl Iterator<Item = Line<'_>> {
    save.split(|&b| b == b'\n').map(line)
}

/// One table of a save: its chains and its rules, in the order printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    /// `(chain, policy)` of each declared chain; `-` for a user chain.
    pub policies: Vec<(Vec<u8>, Vec<u8>)>,
    /// `(chain, whole rule from "-A")`.
    pub rules: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The tables of `save`, by name, in order. A chain or rule before any
/// table is no table's, and left out.
pub fn tables(save: &[u8]) -> Vec<(Vec<u8>, Table)> {
    let mut tables: Vec<(Vec<u8>, Table)> = Vec::new();
    for line in lines(save) {
        match (line, tables.last_mut()) {
            (Line::Table(name), _) => tables.push((name.to_vec(), Table::default())),
            (Line::Chain { name, policy }, Some((_, table))) => table.policies.push((name.to_vec(), policy.to_vec())),
            (Line::Rule { chain, rule }, Some((_, table))) => table.rules.push((chain.to_vec(), rule.to_vec())),
            _ => {}
        }
    }
    tables
}

/// The sections of `save` for the given tables (`*NAME` to `COMMIT`),
/// each line as printed, ending in `\n`.
pub fn sections(save: &[u8], names: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut keep = false;
    for raw in save.split_inclusive(|&b| b == b'\n') {
        let read = line(raw);
        if let Line::Table(table) = read {
            keep = names.iter().any(|name| name.as_bytes() == table);
        }
        if keep {
            out.extend_from_slice(raw.strip_suffix(b"\n").unwrap_or(raw));
            out.push(b'\n');
        }
        if read == Line::Commit {
            keep = false;
        }
    }
    out
}

/// The blank-separated words of `text`.
fn words(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    text.split(u8::is_ascii_whitespace).filter(|word| !word.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One example per row of the module's table, both line ends.
    #[test]
    fn each_kind_of_line_is_read_as_the_table_says() {
        for end in ["", "\n", "\r\n"] {
            let read = |text: &str| line(format!("{text}{end}").as_bytes()).to_owned_kind();
            assert_eq!(read("*nat"), "table nat");
            assert_eq!(read(":INPUT DROP [3:180]"), "chain INPUT DROP");
            assert_eq!(read(":KUBE-SERVICES - [0:0]"), "chain KUBE-SERVICES -");
            assert_eq!(read(":BARE"), "chain BARE -");
            assert_eq!(
                read("-A INPUT -p tcp -j ACCEPT "),
                "rule INPUT -A INPUT -p tcp -j ACCEPT"
            );
            assert_eq!(read("[5:300] -A FORWARD -j DROP"), "rule FORWARD -A FORWARD -j DROP");
            assert_eq!(read("COMMIT"), "commit");
            for other in ["# Generated by iptables-save", "", "-N X", "[1:2]"] {
                assert_eq!(read(other), "other", "{other:?}");
            }
        }
    }

    impl Line<'_> {
        fn to_owned_kind(self) -> String {
            let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            match self {
                Line::Table(name) => format!("table {}", s(name)),
                Line::Chain { name, policy } => format!("chain {} {}", s(name), s(policy)),
                Line::Rule { chain, rule } => format!("rule {} {}", s(chain), s(rule)),
                Line::Commit => "commit".into(),
                Line::Other => "other".into(),
            }
        }
    }

    #[test]
    fn tables_hold_their_chains_and_rules_in_order() {
        let save = b"# head\n:STRAY - [0:0]\n*filter\n:INPUT DROP [0:0]\n:X - [0:0]\n-A INPUT -j X\n-A X -m comment --comment caf\xe9 -j ACCEPT\nCOMMIT\n*raw\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n";
        let read = tables(save);
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].0, b"filter");
        assert_eq!(
            read[0].1.policies,
            vec![(b"INPUT".to_vec(), b"DROP".to_vec()), (b"X".to_vec(), b"-".to_vec())]
        );
        assert_eq!(read[0].1.rules.len(), 2);
        assert_eq!(read[0].1.rules[1].0, b"X");
        assert_eq!(read[1].0, b"raw");
        assert!(read[1].1.rules.is_empty());
    }

    #[test]
    fn sections_keep_only_the_tables_named() {
        let save = b"# head\n*filter\n-A INPUT -j ACCEPT\nCOMMIT\n*nat\n-A OUTPUT -j RETURN\nCOMMIT\n# tail";
        assert_eq!(sections(save, &["nat"]), b"*nat\n-A OUTPUT -j RETURN\nCOMMIT\n");
        assert_eq!(sections(save, &["mangle"]), b"");
    }
}
