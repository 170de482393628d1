//! The `detect` report. As text: a one-line verdict (the mode first, then
//! for which command and why) and one line per distinct warning, what a
//! person woken at night needs; `-v` adds the source that decided, the
//! settings and every piece of evidence with how it was read. As JSON: all
//! of it in one object. Evidence comes from places others control (a host
//! link's target, a chain name), so every text in it is escaped as
//! [`escape`](crate::escape) says, once, where it is shown.

use crate::backend::{Backend, BackendError, SYSTEM_DIRS};
use crate::decision::{Decision, Evidence, STALE_COMMAND_HINT};
use crate::escape::Shown as _;
use crate::escape::{bytes_shown, printable, printable_bytes, quoted, string};
use crate::host_link::DEFAULT_HOST_ROOT;
use crate::kernel::RuleBounds;
use crate::mode::{Mode, OVERRIDE_VAR};
use crate::run_dir::DEFAULT_RUN_DIR;
use crate::settings::{Origin, Settings, HOST_ROOT_VAR, RUN_DIR_VAR, SBIN_VAR};
use std::fmt::Write;
use std::os::unix::ffi::OsStrExt;

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
        Origin::File { path, line } => format!("file {} line {line}", path.shown()),
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
    let value = |value: &[u8]| string(&bytes_shown(value));
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

/// The verdict: the mode first (so a script can take the first word), then
/// the command decided for and why.
fn verdict(decision: &Decision) -> String {
    format!(
        "{} for {}: {}",
        decision.mode,
        decision.command,
        printable(&decision.reason.to_string())
    )
}

/// The clause the stale legacy tables' evidence ends with: said once after
/// the warnings, not in each.
fn stale_clause() -> String {
    format!("stale legacy rules may still apply; {STALE_COMMAND_HINT}")
}

/// `finding` without the stale clause, if it has it.
fn without_stale_clause(finding: &str) -> Option<String> {
    let clause = stale_clause();
    let at = finding.find(&clause)?;
    let before = finding[..at].trim_end_matches([' ', '(', ':', ';']);
    let after = finding[at + clause.len()..].trim_start_matches(')');
    Some(format!("{before}{after}"))
}

/// The chosen backend as `detect` found it: its program, or why no call
/// of the command can run it.
pub type Found = Result<Backend, BackendError>;

/// The warning when the chosen backend cannot run: it comes first, since
/// every call of the command fails.
fn cannot_run(decision: &Decision, backend: &Found) -> Option<String> {
    let error = backend.as_ref().err()?;
    Some(format!("every {} call will fail: {error}", decision.command))
}

/// The warnings, one line each, without what the verdict already says:
/// a backend that cannot run, each piece of disagreeing evidence as where
/// it was read and what it found, the stale clause once, then the other
/// warnings as they are.
fn warning_lines(decision: &Decision, backend: &Found) -> Vec<String> {
    let mut lines: Vec<String> = cannot_run(decision, backend).into_iter().collect();
    let mut stale = false;
    for evidence in decision.disagreements() {
        let finding = evidence.finding.to_string();
        let shown = match without_stale_clause(&finding) {
            Some(shorter) => {
                stale = true;
                shorter
            }
            None => finding,
        };
        lines.push(format!(
            "points to {}: {}: {}",
            decision.mode.other(),
            evidence.location,
            shown
        ));
    }
    if stale {
        lines.push(stale_clause());
    }
    // `warnings` says the disagreements first, one each, as said above.
    let disagreements = decision.disagreements().count();
    lines.extend(decision.warnings().into_iter().skip(disagreements));
    lines
        .iter()
        .map(|line| format!("warning: {}", printable(line)))
        .collect()
}

/// The short report: the verdict and a line per warning.
pub fn text(decision: &Decision, backend: &Found) -> String {
    let mut out = verdict(decision);
    out.push('\n');
    for line in warning_lines(decision, backend) {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// The full report (`-v`): the verdict, the source that decided, each
/// setting and where it came from, every piece of evidence and how it was
/// read, the backend's program, the warnings and the time taken.
pub fn verbose_text(decision: &Decision, settings: &Settings, backend: &Found) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", verdict(decision));
    let _ = writeln!(out, "command:    {}", decision.command);
    let _ = writeln!(
        out,
        "decided by: {} ({})",
        decision.decided_by.key(),
        printable(&decision.reason.to_string())
    );
    let program = backend
        .as_ref()
        .map_or("none found".into(), |found| shown_path(&found.path));
    let _ = writeln!(out, "backend:    {program}");
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
    for line in warning_lines(decision, backend) {
        let _ = writeln!(out, "{line}");
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
pub fn json(decision: &Decision, settings: &Settings, backend: &Found) -> String {
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
    let warnings: Vec<String> = cannot_run(decision, backend)
        .into_iter()
        .chain(decision.warnings())
        .map(|w| string(&w))
        .collect();
    let backend = match backend {
        Ok(found) => format!(
            "{{\"runnable\":true,\"path\":{},\"error\":null}}",
            string(&bytes_shown(found.path.as_os_str().as_bytes()))
        ),
        Err(error) => format!(
            "{{\"runnable\":false,\"path\":null,\"error\":{}}}",
            string(&error.to_string())
        ),
    };
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
        "{{\"mode\":{},\"command\":{},\"decided_by\":{},\"reason\":{},\"settings\":{},\"backend\":{},\"evidence\":[{}],\"rule_counts\":{},\"warnings\":[{}],\"took_ms\":{}}}",
        string(decision.mode.name()),
        string(decision.command),
        string(decision.decided_by.key()),
        string(&decision.reason.to_string()),
        settings_json(settings),
        backend,
        evidence.join(","),
        counts,
        warnings.join(","),
        decision
            .took
            .map_or("null".to_string(), |took| format!("{:.3}", took.as_secs_f64() * 1e3))
    )
}

fn shown_path(path: &std::path::Path) -> String {
    printable_bytes(path.as_os_str().as_bytes()).into_owned()
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

#[cfg(test)]
mod tests {
    use super::{stale_clause, without_stale_clause};

    #[test]
    fn the_stale_clause_is_cut_from_both_shapes_it_comes_in() {
        let clause = stale_clause();
        assert_eq!(
            without_stale_clause(&format!("filter holds 1 rule ({clause})")).as_deref(),
            Some("filter holds 1 rule")
        );
        assert_eq!(
            without_stale_clause(&format!(
                "filter, nat exist; whether they hold rules is unknown (EPERM): {clause}"
            ))
            .as_deref(),
            Some("filter, nat exist; whether they hold rules is unknown (EPERM)")
        );
        assert_eq!(without_stale_clause("legacy rules (ipv4 + ipv6): 6"), None);
    }
}
