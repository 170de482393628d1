//! Showing what is stale: per family, table and chain, in words or as one
//! JSON object, and with `-v` the rules in `iptables-save` form (the stale
//! backend's own save tool, which only reads), byte for byte as the tool
//! wrote them but for bytes that are not printable (`saved_line`).
//! Everything else read from the kernel is shown through `printable`
//! (chain names are anyone's).

use super::fates::Witness;
use super::find::{self, Finding};
use super::judge;
use super::look::Look;
use super::opening;
use super::proof;
use super::save_tool;
use super::{HostBackend, Options, EXIT_NOTHING_STALE, EXIT_STALE};
use crate::escape::{bytes_shown, printable, saved_line, string};
use crate::save_text;
use crate::standard_fds::say;
use std::fmt::Write as _;
use std::io::Write as _;

/// Shows the stale state; exit 0 when nothing is stale, 1 when something
/// is or may be. With `uncertain` (why the host's backend is not certain),
/// what each backend holds, since either may be the stale one.
pub fn run(hosts: &[HostBackend], uncertain: Option<&str>, options: &Options, look: &mut Look) -> i32 {
    let backends = |h: &HostBackend| match uncertain {
        None => vec![h.stale()],
        Some(_) => vec![h.decision.mode, h.stale()],
    };
    let findings: Vec<Finding> = hosts
        .iter()
        .flat_map(|h| backends(h).into_iter().map(|backend| (backend, h.family)))
        .map(|(backend, family)| look.of(backend, family).clone())
        .collect();
    let saves = if options.verbose { saves(&findings) } else { Vec::new() };
    let judged = openings(hosts, &findings);
    let out = if options.json {
        format!("{}\n", json_report(hosts, uncertain, &findings, &saves, &judged, None))
    } else {
        let mut out = String::new();
        if let Some(why) = uncertain {
            let _ = writeln!(out, "which backend is stale is not certain: {}", printable(why));
        }
        out.push_str(&text_with(hosts, &findings, &saves, &judged));
        out.push_str(&summary(&findings, uncertain.is_some()));
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
pub fn saves(findings: &[Finding]) -> Vec<Result<Vec<u8>, String>> {
    findings
        .iter()
        .map(|f| {
            if f.tables().is_empty() {
                return Ok(Vec::new());
            }
            let names: Vec<&str> = f.tables().iter().map(|t| t.name).collect();
            save_tool::tables(f.backend, f.family, &names).map(|save| save_text::sections(&save.stdout, &names))
        })
        .collect()
}

/// Per finding of a backend the host does not use, per table: why emptying
/// it is not proven safe (None: it is), or why that is unknown.
/// Empty for the host's own backend.
type Openings = Vec<Vec<Result<Option<String>, String>>>;

/// What the judgement says per finding: [`Openings`]; per table its held
/// chains stale against live (empty where it is not held, or where that
/// is unknown), the witness packet of a table held by one, and a change
/// that holds nothing; and how many packets the fates tried (None: not
/// judged).
#[derive(Default)]
struct Judged {
    opens: Openings,
    side_by_side: Vec<Vec<Vec<String>>>,
    witnesses: Vec<Vec<Option<Witness>>>,
    changes: Vec<Vec<Option<Witness>>>,
    tried: Vec<Option<usize>>,
}

/// [`Judged`] for each finding.
fn openings(hosts: &[HostBackend], findings: &[Finding]) -> Judged {
    let mut judged = Judged::default();
    for f in findings {
        judge_one(hosts, f, &mut judged);
    }
    judged
}

/// One finding's part of [`Judged`], added to it.
fn judge_one(hosts: &[HostBackend], f: &Finding, judged: &mut Judged) {
    let live = host_of(hosts, f.family);
    let names: Vec<&str> = f.tables().iter().map(|t| t.name).collect();
    let (mut said, mut side_by_side, mut witnesses, mut changes, mut tried) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), None);
    let opens = match f.backend == live || names.is_empty() {
        true => Ok((Vec::new(), Vec::new(), 0)),
        false => proof::AnonymousLock::new().and_then(|lock| {
            save_tool::tables(f.backend, f.family, &names)
                .and_then(|save| opening::openings(&save.stdout, live, f.family, &names, lock.path()))
        }),
    };
    match opens {
        Ok((opens, _, _)) if opens.is_empty() => {}
        Ok((opens, found_changes, packets)) => {
            tried = Some(packets);
            changes = found_changes;
            for open in opens {
                let (why, shown, witness) = match open {
                    Some(open) => (Some(open.why), open.side_by_side, open.witness),
                    None => (None, Vec::new(), None),
                };
                said.push(Ok(why));
                side_by_side.push(shown);
                witnesses.push(witness);
            }
        }
        Err(why) => {
            said = names.iter().map(|_| Err(why.clone())).collect();
            side_by_side = vec![Vec::new(); names.len()];
            witnesses = vec![None; names.len()];
            changes = vec![None; names.len()];
        }
    }
    let said = match said.is_empty() {
        true => said,
        false => judge::shown_as_one(said, &names),
    };
    judged.opens.push(said);
    judged.side_by_side.push(side_by_side);
    judged.witnesses.push(witnesses);
    judged.changes.push(changes);
    judged.tried.push(tried);
}

/// The report in words.
pub fn text(hosts: &[HostBackend], findings: &[Finding], saves: &[Result<Vec<u8>, String>]) -> String {
    text_with(hosts, findings, saves, &Judged::default())
}

/// The report in words, with whether removing each stale table is proven
/// safe.
fn text_with(
    hosts: &[HostBackend],
    findings: &[Finding],
    saves: &[Result<Vec<u8>, String>],
    judged: &Judged,
) -> String {
    let (opens, side_by_side) = (&judged.opens, &judged.side_by_side);
    let mut out = String::new();
    for host in hosts {
        let _ = writeln!(
            out,
            "host {}: {} ({}: {})",
            host.family.label(),
            host.decision.mode,
            host.decision.decided_by.key(),
            printable(&host.decision.reason.to_string())
        );
    }
    for (index, finding) in findings.iter().enumerate() {
        let (backend, family) = (finding.backend, finding.family);
        if let Some(why) = finding.unknown() {
            let _ = writeln!(out, "{backend} {}: unknown: {}", family.label(), printable(why));
        }
        if let Some(tool) = &finding.read_by {
            let _ = writeln!(out, "{backend} {}: read through {tool}", family.label());
        }
        for (table_index, table) in finding.tables().iter().enumerate() {
            let _ = writeln!(
                out,
                "{} {backend} {} {}: {}",
                if finding.backend == host_of(hosts, family) {
                    "held by"
                } else {
                    "stale"
                },
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
            match opens.get(index).and_then(|o| o.get(table_index)) {
                Some(Ok(None)) => {
                    let _ = writeln!(
                        out,
                        "  removing it opens nothing: each rule and policy of its family that needs a twin (by the table of effects) has one in {}, and no packet tried passes after that is stopped now",
                        host_of(hosts, family)
                    );
                    if let Some(Some(change)) = judged.changes.get(index).and_then(|c| c.get(table_index)) {
                        let _ = writeln!(
                            out,
                            "  removing it changes, holding nothing: {}",
                            printable(&change.to_string())
                        );
                    }
                }
                Some(Ok(Some(why))) => {
                    let _ = writeln!(out, "  {}; --remove leaves it unless --allow-opening", printable(why));
                    for line in side_by_side
                        .get(index)
                        .and_then(|s| s.get(table_index))
                        .into_iter()
                        .flatten()
                    {
                        let _ = writeln!(out, "    {}", printable(line));
                    }
                }
                Some(Err(why)) => {
                    let _ = writeln!(out, "  whether removing it is safe is unknown: {}", printable(why));
                }
                None => {}
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
                for line in save.split(|&b| b == b'\n').filter(|line| !line.is_empty()) {
                    let _ = writeln!(out, "  {}", saved_line(line));
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

/// The closing line: nothing stale, what to run, or what is not known.
fn summary(findings: &[Finding], uncertain: bool) -> String {
    let backends: Vec<String> = findings
        .iter()
        .map(|f| format!("{} {}", f.backend, f.family.label()))
        .collect();
    let found = findings.iter().any(|f| !f.tables().is_empty());
    let unknown = findings.iter().any(|f| f.unknown().is_some());
    match (found, unknown, uncertain) {
        (true, _, true) => "state found in the backends above; which is stale is not certain, so `iptables-wrapper stale --remove` refuses until it is\n".to_string(),
        (true, _, false) => "stale state found: `iptables-wrapper stale -v` shows the rules, `iptables-wrapper stale --remove` removes them after a backup\n".to_string(),
        (false, true, _) if nix::unistd::geteuid().is_root() => "whether anything is stale is unknown (see above)\n".to_string(),
        (false, true, _) => "whether anything is stale is unknown (see above): reading the tables needs root, or CAP_NET_ADMIN and CAP_NET_RAW\n".to_string(),
        (false, false, _) if findings.iter().any(|f| !f.left.is_empty()) => format!(
            "nothing stale that `iptables-wrapper stale --remove` would remove in {}; the tables left alone above are not iptables-nft's own, and only their owner can say whether they are stale\n",
            backends.join(", ")
        ),
        (false, false, _) => format!("nothing stale in {}\n", backends.join(", ")),
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

/// The host's backend for `family`, as decided.
fn host_of(hosts: &[HostBackend], family: crate::family::Family) -> crate::mode::Mode {
    hosts
        .iter()
        .find(|h| h.family == family)
        .map_or(crate::mode::Mode::Nft, |h| h.decision.mode)
}

/// The report as one JSON object; `removal` adds what a removal did.
pub fn json(
    hosts: &[HostBackend],
    findings: &[Finding],
    saves: &[Result<Vec<u8>, String>],
    removal: Option<String>,
) -> String {
    json_report(hosts, None, findings, saves, &Judged::default(), removal)
}

/// The report as one JSON object, saying whether the host's backend is
/// certain (and why not).
fn json_report(
    hosts: &[HostBackend],
    uncertain: Option<&str>,
    findings: &[Finding],
    saves: &[Result<Vec<u8>, String>],
    judged: &Judged,
    removal: Option<String>,
) -> String {
    let opens = &judged.opens;
    let host_lines: Vec<String> = hosts
        .iter()
        .map(|h| {
            format!(
                "{{\"family\":{},\"mode\":{},\"decided_by\":{},\"reason\":{}}}",
                string(h.family.label()),
                string(h.decision.mode.name()),
                string(h.decision.decided_by.key()),
                string(&h.decision.reason.to_string())
            )
        })
        .collect();
    let findings: Vec<String> = findings
        .iter()
        .enumerate()
        .map(|(index, f)| {
            let tables: Vec<String> = f
                .tables()
                .iter()
                .enumerate()
                .map(|(table_index, t)| {
                    let opening = match opens.get(index).and_then(|o| o.get(table_index)) {
                        Some(Ok(None)) => ",\"would_open\":false,\"opening\":null".to_string(),
                        Some(Ok(Some(why))) => format!(",\"would_open\":true,\"opening\":{}", string(why)),
                        Some(Err(why)) => format!(",\"would_open\":null,\"opening\":{}", string(why)),
                        None => String::new(),
                    };
                    let witness = match judged.witnesses.get(index).and_then(|w| w.get(table_index)) {
                        Some(Some(w)) => format!(
                            ",\"witness\":{{\"packet\":{},\"order\":{},\"now\":{},\"after\":{}}}",
                            string(&w.packet),
                            w.order.as_deref().map_or("null".into(), string),
                            string(&w.now),
                            string(&w.after)
                        ),
                        _ if opening.is_empty() => String::new(),
                        _ => ",\"witness\":null".into(),
                    };
                    let change = match judged.changes.get(index).and_then(|c| c.get(table_index)) {
                        Some(Some(w)) => format!(
                            ",\"change\":{{\"packet\":{},\"now\":{},\"after\":{}}}",
                            string(&w.packet),
                            string(&w.now),
                            string(&w.after)
                        ),
                        _ => String::new(),
                    };
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
                        "{{\"table\":{},\"rules\":{},\"chains\":[{}]{opening}{witness}{change}}}",
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
                Some(Ok(save)) => string(&bytes_shown(save)),
                Some(Err(why)) => format!("{{\"error\":{}}}", string(why)),
                None => "null".into(),
            };
            format!(
                "{{\"backend\":{},\"family\":{},\"host_backend\":{},\"stale\":{},\"tables\":[{}],\"left_alone\":[{}],\"unknown\":{},\"read_by\":{},\"rules_saved\":{save},\"packets_tried\":{}}}",
                string(f.backend.name()),
                string(f.family.label()),
                f.backend == host_of(hosts, f.family),
                f.is_stale() && f.backend != host_of(hosts, f.family),
                tables.join(","),
                left.join(","),
                f.unknown().map_or("null".into(), string),
                f.read_by.as_deref().map_or("null".into(), string),
                judged.tried.get(index).copied().flatten().map_or("null".into(), |n| n.to_string()),
            )
        })
        .collect();
    format!(
        "{{\"refused\":null,\"certain\":{},\"uncertain\":{},\"hosts\":[{}],\"findings\":[{}],\"removal\":{}}}",
        uncertain.is_none(),
        uncertain.map_or("null".into(), string),
        host_lines.join(","),
        findings.join(","),
        removal.unwrap_or_else(|| "null".into())
    )
}

/// A refusal as the JSON object a script reads: `hosts` the decisions, if
/// any were made (none for an invalid setting), and `certain` false.
pub fn print_json_refusal(hosts: &[HostBackend], refusal: &str, contradicted: &[String]) {
    let contradicted: Vec<String> = contradicted.iter().map(|line| string(line)).collect();
    let report = json_report(hosts, Some(refusal), &[], &[], &Judged::default(), None);
    let _ = print_out(&format!(
        "{{\"refused\":{},\"contradicted_by\":[{}],{}\n",
        string(refusal),
        contradicted.join(","),
        report.strip_prefix("{\"refused\":null,").unwrap_or(&report)
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
