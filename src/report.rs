//! The `detect` report: the mode on the first line, then why, in words or
//! as one JSON object; and how evidence is shown anywhere it is shown.
//!
//! Evidence comes from places others control (a host link's target, a chain
//! name): every text shown to a person, in the report, on stderr or in the
//! warnings record, goes through `printable`, so it stays one line and cannot
//! carry terminal escapes or forged log lines.

use crate::decision::{Decision, Evidence};
use crate::kernel::RuleBounds;
use crate::mode::Mode;
use std::borrow::Cow;
use std::fmt::Write;

/// `text` with backslashes and control characters escaped (`\\`, `\n`,
/// `\t`, `\r`, `\u{1b}`): one line, nothing a terminal or a log reader
/// would interpret.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c == '\\' || c.is_control()) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The human-readable report.
pub fn text(decision: &Decision) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", decision.mode);
    let _ = writeln!(out, "command:    {}", decision.command);
    let _ = writeln!(
        out,
        "decided by: {} ({})",
        decision.decided_by.key(),
        printable(&decision.reason)
    );
    let _ = writeln!(out, "evidence:");
    for evidence in &decision.evidence {
        let _ = writeln!(
            out,
            "  [{}] {}: {}  ({}){}",
            evidence.source.key(),
            printable(&evidence.location),
            printable(&evidence.value),
            printable(&evidence.method),
            pointer(evidence, decision.mode)
        );
    }
    if let Some(counts) = decision.rule_counts.as_ref().filter(|c| c.is_mixed()) {
        let _ = writeln!(
            out,
            "mixed state: both backends hold many rules (legacy {}, nft {})",
            counts.legacy.low, counts.nft.low
        );
    }
    let warnings = decision.warnings();
    if !warnings.is_empty() {
        let _ = writeln!(out, "disagreements and warnings:");
        for warning in warnings {
            let _ = writeln!(out, "  {}", printable(&warning));
        }
    }
    if let Some(took) = decision.took {
        let _ = writeln!(out, "took:       {:.3} ms", took.as_secs_f64() * 1e3);
    }
    out
}

fn pointer(evidence: &Evidence, chosen: Mode) -> String {
    match evidence.points_to {
        None => String::new(),
        Some(mode) if mode == chosen => format!(" -> {mode}"),
        Some(mode) => format!(" -> {mode} (disagrees)"),
    }
}

/// The same content as one JSON object on one line.
pub fn json(decision: &Decision) -> String {
    let evidence: Vec<String> = decision
        .evidence
        .iter()
        .map(|e| {
            format!(
                "{{\"source\":{},\"location\":{},\"value\":{},\"method\":{},\"points_to\":{}}}",
                string(e.source.key()),
                string(&e.location),
                string(&e.value),
                string(&e.method),
                e.points_to.map_or("null".to_string(), |m| string(m.name()))
            )
        })
        .collect();
    let warnings: Vec<String> = decision.warnings().iter().map(|w| string(w)).collect();
    let counts = match &decision.rule_counts {
        None => "null".to_string(),
        Some(counts) => format!(
            "{{\"legacy\":{},\"nft\":{},\"mixed\":{}}}",
            bounds(counts.legacy, &counts.legacy_method),
            bounds(counts.nft, &counts.nft_method),
            counts.is_mixed()
        ),
    };
    format!(
        "{{\"mode\":{},\"command\":{},\"decided_by\":{},\"reason\":{},\"evidence\":[{}],\"rule_counts\":{},\"warnings\":[{}],\"took_ms\":{}}}",
        string(decision.mode.name()),
        string(decision.command),
        string(decision.decided_by.key()),
        string(&decision.reason),
        evidence.join(","),
        counts,
        warnings.join(","),
        decision
            .took
            .map_or("null".to_string(), |took| format!("{:.3}", took.as_secs_f64() * 1e3))
    )
}

fn bounds(bounds: RuleBounds, method: &str) -> String {
    let exact = if bounds.is_exact() {
        bounds.low.to_string()
    } else {
        "null".to_string()
    };
    format!(
        "{{\"low\":{},\"high\":{},\"exact\":{exact},\"method\":{}}}",
        bounds.low,
        bounds.high,
        string(method)
    )
}

/// A JSON string literal.
pub fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::{printable, string};

    #[test]
    fn json_strings_escape() {
        assert_eq!(string("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        assert_eq!(string("\u{9b}"), "\"\\u009b\"");
    }

    #[test]
    fn printable_is_one_line_without_escapes() {
        assert_eq!(printable("/usr/sbin/iptables-nft"), "/usr/sbin/iptables-nft");
        assert_eq!(
            printable("a\nb\r\tc\u{1b}[31m\u{7f}\u{9b}d\\"),
            "a\\nb\\r\\tc\\u{1b}[31m\\u{7f}\\u{9b}d\\\\"
        );
    }
}
