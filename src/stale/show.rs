//! Showing what is stale: per family, table and chain, in words or as one
//! JSON object, and with `-v` the rules in `iptables-save` form (the stale
//! backend's own save tool, which only reads). Everything read from the
//! kernel is shown through `printable` (chain names are anyone's).

use super::find::{self, Finding};
use super::{HostBackend, Options, EXIT_NOTHING_STALE, EXIT_STALE};
use crate::escape::{printable, string};
use crate::standard_fds::say;
use std::fmt::Write as _;
use std::io::Write as _;

/// Shows the stale state; exit 0 when nothing is stale, 1 when something is.
pub fn run(hosts: &[HostBackend], options: &Options) -> i32 {
    let findings: Vec<Finding> = hosts.iter().map(|h| find::find(h.stale(), h.family)).collect();
    let saves = if options.verbose { saves(&findings) } else { Vec::new() };
    let out = if options.json {
        format!("{}\n", json(hosts, &findings, &saves, None))
    } else {
        let mut out = text(hosts, &findings, &saves);
        out.push_str(&summary(&findings));
        out
    };
    if let Err(status) = print_out(&out) {
        return status;
    }
    status(&findings)
}

/// 1 when anything is stale or may be (a family that could not be read).
pub fn status(findings: &[Finding]) -> i32 {
    if findings.iter().any(Finding::is_stale) {
        EXIT_STALE
    } else {
        EXIT_NOTHING_STALE
    }
}

/// Per finding, the stale tables' sections of its backend's save (or why
/// there is none).
pub fn saves(findings: &[Finding]) -> Vec<Result<String, String>> {
    findings
        .iter()
        .map(|f| {
            if f.tables.is_empty() {
                return Ok(String::new());
            }
            let names: Vec<&str> = f.tables.iter().map(|t| t.name).collect();
            find::save(f.backend, f.family, false).map(|save| find::sections(&save, &names))
        })
        .collect()
}

/// The report in words.
pub fn text(hosts: &[HostBackend], findings: &[Finding], saves: &[Result<String, String>]) -> String {
    let mut out = String::new();
    for host in hosts {
        let _ = writeln!(
            out,
            "host {}: {} ({}: {})",
            host.family.label(),
            host.decision.mode,
            host.decision.decided_by.key(),
            printable(&host.decision.reason)
        );
    }
    for (index, finding) in findings.iter().enumerate() {
        let (backend, family) = (finding.backend, finding.family);
        if let Some(why) = &finding.unknown {
            let _ = writeln!(out, "{backend} {}: unknown: {}", family.label(), printable(why));
        }
        for table in &finding.tables {
            let _ = writeln!(
                out,
                "stale {backend} {} {}: {}",
                family.label(),
                table.name,
                table_summary(table)
            );
            for chain in &table.chains {
                let kind = if chain.builtin { "" } else { " (user chain)" };
                let policy = match chain.policy {
                    Some(policy) if policy != "ACCEPT" => format!(", policy {policy}"),
                    _ => String::new(),
                };
                let _ = writeln!(
                    out,
                    "  {}{kind}: {}{policy}",
                    printable(&chain.name),
                    rules(chain.rules)
                );
            }
        }
        for left in &finding.left {
            let _ = writeln!(
                out,
                "left alone: {backend} {} {}: {}",
                family.label(),
                printable(&left.name),
                printable(&left.why)
            );
        }
        match saves.get(index) {
            Some(Ok(save)) if !save.is_empty() => {
                let _ = writeln!(
                    out,
                    "{backend} {} rules ({}-{backend}-save):",
                    family.label(),
                    family.program()
                );
                for line in save.lines() {
                    let _ = writeln!(out, "  {}", printable(line));
                }
            }
            Some(Err(why)) => {
                let _ = writeln!(
                    out,
                    "{backend} {} rules: cannot be shown: {}",
                    family.label(),
                    printable(why)
                );
            }
            _ => {}
        }
    }
    out
}

/// The closing line: nothing stale, or what to run.
fn summary(findings: &[Finding]) -> String {
    let backends: Vec<String> = findings
        .iter()
        .map(|f| format!("{} {}", f.backend, f.family.label()))
        .collect();
    if findings.iter().any(Finding::is_stale) {
        "stale state found: `iptables-wrapper stale -v` shows the rules, `iptables-wrapper stale --remove` removes them after a backup\n".to_string()
    } else {
        format!("nothing stale in {}\n", backends.join(", "))
    }
}

/// "2 rules, 1 user chain, policy FORWARD DROP".
pub fn table_summary(table: &find::StaleTable) -> String {
    let mut parts = vec![rules(table.rules())];
    let user = table.chains.iter().filter(|c| !c.builtin).count();
    if user > 0 {
        parts.push(if user == 1 {
            "1 user chain".into()
        } else {
            format!("{user} user chains")
        });
    }
    for chain in table.chains.iter().filter(|c| c.policy.is_some_and(|p| p != "ACCEPT")) {
        parts.push(format!(
            "policy {} {}",
            printable(&chain.name),
            chain.policy.unwrap_or_default()
        ));
    }
    parts.join(", ")
}

fn rules(count: u64) -> String {
    if count == 1 {
        "1 rule".into()
    } else {
        format!("{count} rules")
    }
}

/// The report as one JSON object; `removal` adds what a removal did.
pub fn json(
    hosts: &[HostBackend],
    findings: &[Finding],
    saves: &[Result<String, String>],
    removal: Option<String>,
) -> String {
    let hosts: Vec<String> = hosts
        .iter()
        .map(|h| {
            format!(
                "{{\"family\":{},\"mode\":{},\"decided_by\":{},\"reason\":{}}}",
                string(h.family.label()),
                string(h.decision.mode.name()),
                string(h.decision.decided_by.key()),
                string(&h.decision.reason)
            )
        })
        .collect();
    let findings: Vec<String> = findings
        .iter()
        .enumerate()
        .map(|(index, f)| {
            let tables: Vec<String> = f
                .tables
                .iter()
                .map(|t| {
                    let chains: Vec<String> = t
                        .chains
                        .iter()
                        .map(|c| {
                            format!(
                                "{{\"chain\":{},\"builtin\":{},\"policy\":{},\"rules\":{}}}",
                                string(&c.name),
                                c.builtin,
                                c.policy.map_or("null".into(), string),
                                c.rules
                            )
                        })
                        .collect();
                    format!(
                        "{{\"table\":{},\"rules\":{},\"chains\":[{}]}}",
                        string(t.name),
                        t.rules(),
                        chains.join(",")
                    )
                })
                .collect();
            let left: Vec<String> = f
                .left
                .iter()
                .map(|l| format!("{{\"table\":{},\"why\":{}}}", string(&l.name), string(&l.why)))
                .collect();
            let save = match saves.get(index) {
                Some(Ok(save)) => string(save),
                Some(Err(why)) => format!("{{\"error\":{}}}", string(why)),
                None => "null".into(),
            };
            format!(
                "{{\"backend\":{},\"family\":{},\"stale\":{},\"tables\":[{}],\"left_alone\":[{}],\"unknown\":{},\"rules_saved\":{save}}}",
                string(f.backend.name()),
                string(f.family.label()),
                f.is_stale(),
                tables.join(","),
                left.join(","),
                f.unknown.as_deref().map_or("null".into(), string),
            )
        })
        .collect();
    format!(
        "{{\"refused\":null,\"hosts\":[{}],\"findings\":[{}],\"removal\":{}}}",
        hosts.join(","),
        findings.join(","),
        removal.unwrap_or_else(|| "null".into())
    )
}

/// A refusal as the JSON object a script reads.
pub fn print_json_refusal(refusal: &str) {
    let _ = print_out(&format!(
        "{{\"refused\":{},\"hosts\":[],\"findings\":[],\"removal\":null}}\n",
        string(refusal)
    ));
}

/// Writes `text` to stdout; Err(1) when it cannot (a full disk).
pub fn print_out(text: &str) -> Result<(), i32> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| {
            say(&format!("cannot write to stdout: {e}"));
            EXIT_STALE
        })
}
