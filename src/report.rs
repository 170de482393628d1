//! The `detect` report: the mode on the first line, then why, in words or
//! as one JSON object; and how evidence is shown anywhere it is shown.
//!
//! Evidence comes from places others control (a host link's target, a chain
//! name): every text shown to a person, in the report, on stderr or in the
//! warnings record, goes through `printable`, so it stays one line and cannot
//! carry terminal escapes or forged log lines.
//!
//! Each text is escaped once, in one way: reasons, evidence and warnings are
//! kept raw and escaped where they are shown; an error that names a value
//! from outside (an environment variable, a settings file, an argument)
//! escapes that value itself with `quoted`, which also shows bytes that are
//! not UTF-8 as `\xNN`, and is shown as it is.

use crate::backend::{SBIN_VAR, SYSTEM_DIRS};
use crate::decision::{Decision, Evidence};
use crate::host_link::{DEFAULT_HOST_ROOT, HOST_ROOT_VAR};
use crate::kernel::RuleBounds;
use crate::mode::{Mode, OVERRIDE_VAR};
use crate::run_dir::{DEFAULT_RUN_DIR, RUN_DIR_VAR};
use crate::settings::{Origin, Settings};
use std::borrow::Cow;
use std::fmt::Write;
use std::os::unix::ffi::OsStrExt;

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

/// `bytes` as `printable` shows text, each byte that is not part of valid
/// UTF-8 shown as `\xNN`.
pub fn printable_bytes(bytes: &[u8]) -> Cow<'_, str> {
    with_bytes_shown(bytes, printable)
}

/// `bytes` as text, each byte that is not part of valid UTF-8 shown as
/// `\xNN` and the valid parts passed through `show`.
fn with_bytes_shown<'a>(bytes: &'a [u8], show: fn(&str) -> Cow<'_, str>) -> Cow<'a, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => show(text),
        Err(_) => {
            let mut out = String::with_capacity(bytes.len() + 8);
            for chunk in bytes.utf8_chunks() {
                out.push_str(&show(chunk.valid()));
                for byte in chunk.invalid() {
                    let _ = write!(out, "\\x{byte:02x}");
                }
            }
            Cow::Owned(out)
        }
    }
}

/// What each setting is when nothing gives it a value.
fn default_in_words(name: &str) -> String {
    match name {
        OVERRIDE_VAR => "auto: detect".to_string(),
        HOST_ROOT_VAR => DEFAULT_HOST_ROOT.to_string(),
        SBIN_VAR => format!("{}, then the wrapper's own directory", SYSTEM_DIRS.join(":")),
        RUN_DIR_VAR => DEFAULT_RUN_DIR.to_string(),
        _ => String::new(),
    }
}

/// Where a value came from, in words: "environment", the file and line, or
/// "default".
fn origin_in_words(origin: &Origin) -> String {
    match origin {
        Origin::File { path, line } => format!("file {} line {line}", path.display()),
        other => other.key().to_string(),
    }
}

/// The settings section of the text report: each setting's value and where
/// it came from, and values given but not used.
fn settings_text(out: &mut String, settings: &Settings) {
    let _ = writeln!(out, "settings:");
    for setting in &settings.settings {
        let value = setting.value.as_deref().map_or_else(
            || default_in_words(setting.name).into(),
            |value| printable_bytes(value.as_bytes()),
        );
        let _ = writeln!(
            out,
            "  {}: {}  ({})",
            setting.name,
            value,
            printable(&origin_in_words(&setting.origin))
        );
        for unused in &setting.unused {
            let _ = writeln!(
                out,
                "    not used: {} from {}: {}",
                quoted(unused.value.as_bytes()),
                printable(&origin_in_words(&unused.origin)),
                unused.why
            );
        }
    }
}

/// The settings as a JSON array.
fn settings_json(settings: &Settings) -> String {
    let value = |value: &[u8]| string(&with_bytes_shown(value, |text| Cow::Borrowed(text)));
    let location = |origin: &Origin| match origin {
        Origin::File { path, line } => format!("\"file\":{},\"line\":{line}", value(path.as_os_str().as_bytes())),
        _ => "\"file\":null,\"line\":null".to_string(),
    };
    let entries: Vec<String> = settings
        .settings
        .iter()
        .map(|setting| {
            let unused: Vec<String> = setting
                .unused
                .iter()
                .map(|unused| {
                    format!(
                        "{{\"value\":{},\"source\":{},{},\"why\":{}}}",
                        value(unused.value.as_bytes()),
                        string(unused.origin.key()),
                        location(&unused.origin),
                        string(unused.why)
                    )
                })
                .collect();
            format!(
                "{{\"name\":{},\"value\":{},\"source\":{},{},\"default\":{},\"unused\":[{}]}}",
                string(setting.name),
                setting
                    .value
                    .as_deref()
                    .map_or("null".to_string(), |v| value(v.as_bytes())),
                string(setting.origin.key()),
                location(&setting.origin),
                string(&default_in_words(setting.name)),
                unused.join(",")
            )
        })
        .collect();
    format!("[{}]", entries.join(","))
}

/// A value from outside, for an error message: in double quotes, escaped
/// as `printable_bytes` does, with `"` as `\"`.
pub fn quoted(bytes: &[u8]) -> String {
    format!("\"{}\"", printable_bytes(bytes).replace('"', "\\\""))
}

/// The human-readable report of `decision`, made with `settings`.
pub fn text(decision: &Decision, settings: &Settings) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", decision.mode);
    let _ = writeln!(out, "command:    {}", decision.command);
    let _ = writeln!(
        out,
        "decided by: {} ({})",
        decision.decided_by.key(),
        printable(&decision.reason)
    );
    settings_text(&mut out, settings);
    let _ = writeln!(out, "evidence:");
    for evidence in &decision.evidence {
        let _ = writeln!(
            out,
            "  [{}] {}: {}  ({}){}",
            evidence.source.key(),
            printable(&evidence.location),
            printable(&evidence.finding.to_string()),
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
pub fn json(decision: &Decision, settings: &Settings) -> String {
    let evidence: Vec<String> = decision
        .evidence
        .iter()
        .map(|e| {
            format!(
                "{{\"source\":{},\"location\":{},\"value\":{},\"state\":{},\"method\":{},\"points_to\":{}}}",
                string(e.source.key()),
                string(&e.location),
                string(&e.finding.to_string()),
                string(e.finding.state()),
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
        "{{\"mode\":{},\"command\":{},\"decided_by\":{},\"reason\":{},\"settings\":{},\"evidence\":[{}],\"rule_counts\":{},\"warnings\":[{}],\"took_ms\":{}}}",
        string(decision.mode.name()),
        string(decision.command),
        string(decision.decided_by.key()),
        string(&decision.reason),
        settings_json(settings),
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
    use super::{printable, quoted, string};

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

    #[test]
    fn quoted_escapes_once_and_shows_bytes() {
        assert_eq!(quoted(b"n\x1b[31mft"), "\"n\\u{1b}[31mft\"");
        assert_eq!(quoted(b"legacy\xff"), "\"legacy\\xff\"");
        assert_eq!(quoted(b"a\"b\\c\xc3\xa9\n\xff"), "\"a\\\"b\\\\c\u{e9}\\n\\xff\"");
    }
}
