//! The differential run's judging: one generated state written into a
//! fresh node (both backends, the node's ipsets, rules and native chains,
//! the host link naming the live backend), `stale --json` run by two
//! wrappers on it, and each family's and table's verdict read from the
//! report: removed, or held and how (a witness that opens, cannot tell,
//! may open, not proven safe, held with its family, other).

use super::netns_topology::Family;
use super::rule_grammar::{restore_text, Line, State};
use super::Node;
use super::OutputWithin as _;
use std::process::Command;

/// What a verdict says of a table or a family, strongest hold first.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Kind {
    Opens,
    CannotTell,
    MayOpen,
    NotProven,
    /// Held with the held table of its family ("left with the ...").
    Follows,
    /// Held for another reason (a save that does not restore, unknown).
    Other,
    /// The whole state: the host's backend not certain (`--remove` refuses).
    Refused,
    Removed,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Opens => "opens",
            Kind::CannotTell => "cannot tell",
            Kind::MayOpen => "may open",
            Kind::NotProven => "not proven safe",
            Kind::Follows => "held with its family",
            Kind::Other => "held (other)",
            Kind::Refused => "refused (not certain)",
            Kind::Removed => "removed",
        }
    }

    /// A table's kind from its `would_open` and `opening`.
    fn of(would_open: &serde_json::Value, opening: &str) -> Kind {
        if would_open == &serde_json::Value::Bool(false) {
            return Kind::Removed;
        }
        let kinds = [
            ("removing it opens: ", Kind::Opens),
            ("cannot tell: ", Kind::CannotTell),
            ("removing it may open", Kind::MayOpen),
            ("removing it is not proven safe", Kind::NotProven),
            ("left with the ", Kind::Follows),
        ];
        kinds
            .iter()
            .find(|(prefix, _)| opening.starts_with(prefix))
            .map_or(Kind::Other, |(_, kind)| *kind)
    }
}

#[derive(Clone, Debug)]
pub struct TableVerdict {
    pub table: String,
    pub kind: Kind,
    pub opening: String,
}

#[derive(Clone, Debug)]
pub struct FamilyVerdict {
    /// "ipv4" or "ipv6".
    pub family: String,
    pub tables: Vec<TableVerdict>,
}

impl FamilyVerdict {
    /// Removed when every table goes; else its strongest own hold.
    pub fn kind(&self) -> Kind {
        if self.tables.iter().all(|t| t.kind == Kind::Removed) {
            return Kind::Removed;
        }
        self.tables
            .iter()
            .map(|t| t.kind)
            .filter(|k| *k != Kind::Removed)
            .min_by_key(|k| if *k == Kind::Follows { Kind::Other } else { *k })
            .unwrap_or(Kind::Other)
    }

    /// The witnesses its tables name ("removing it opens: " and on), each once.
    pub fn witnesses(&self) -> Vec<String> {
        let mut found: Vec<String> = Vec::new();
        for table in &self.tables {
            if let Some(rest) = table.opening.strip_prefix("removing it opens: ") {
                let witness = witness_text(rest).to_string();
                if !found.contains(&witness) {
                    found.push(witness);
                }
            }
        }
        found
    }
}

/// The witness at the start of `rest`: up to the `)` closing its
/// "(now...; after: ...)".
fn witness_text(rest: &str) -> &str {
    let Some(start) = rest.find(" (now") else { return rest };
    let mut depth = 0;
    for (at, c) in rest[start..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &rest[..start + at + 1];
                }
            }
            _ => {}
        }
    }
    rest
}

/// One wrapper's judgement of a state.
#[derive(Clone, Debug)]
pub struct Judgement {
    pub exit: Option<i32>,
    /// `refused` set or `certain` false: the host's backend is not
    /// certain enough, `--remove` refuses.
    pub refused: bool,
    pub families: Vec<FamilyVerdict>,
}

impl Judgement {
    pub fn family(&self, family: &str) -> Option<&FamilyVerdict> {
        self.families.iter().find(|f| f.family == family)
    }
}

/// Writes `state` into `node`'s namespace: the host link naming the live
/// backend, the node's commands, the stale backend, the commands made
/// between, the live backend.
pub fn write_state(node: &Node, state: &State) {
    let live = state.stale_backend.other();
    for family in [Family::V4, Family::V6] {
        node.set_host_link(family.command(), &format!("/usr/sbin/{}", live.tool(family, "")));
    }
    let mut script = state.node.commands.join("\n") + "\n";
    for backend in [state.stale_backend, live] {
        if backend == live {
            script += &state.node.between.iter().map(|c| format!("{c}\n")).collect::<String>();
        }
        for (family, stale, live_lines) in &state.families {
            let lines: &Vec<Line> = if backend == live { live_lines } else { stale };
            if lines.is_empty() {
                continue;
            }
            let file = node.path(&format!("{}.rules", backend.tool(*family, "")));
            std::fs::write(&file, restore_text(lines)).unwrap();
            script += &format!("{} < {}\n", backend.tool(*family, "-restore"), file.display());
        }
    }
    node.sh(&script);
}

/// `WRAPPER stale ARGS` in `node`, with the node's environment.
pub fn stale_by(node: &Node, wrapper: &str, args: &[&str]) -> std::process::Output {
    let mut command = Command::new(wrapper);
    node.isolate(&mut command);
    command.arg("stale").args(args).output_within_limit().unwrap()
}

/// `WRAPPER stale --json` in `node`, read.
pub fn judge(node: &Node, wrapper: &str) -> Judgement {
    let out = stale_by(node, wrapper, &["--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{wrapper} stale --json: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let mut families = Vec::new();
    for finding in report["findings"].as_array().into_iter().flatten() {
        if finding["host_backend"] != serde_json::Value::Bool(false) {
            continue;
        }
        let unknown = !finding["unknown"].is_null();
        let tables: Vec<TableVerdict> = finding["tables"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                let opening = t["opening"].as_str().unwrap_or_default().to_string();
                TableVerdict {
                    table: t["table"].as_str().unwrap_or_default().to_string(),
                    kind: if unknown {
                        Kind::Other
                    } else {
                        Kind::of(&t["would_open"], &opening)
                    },
                    opening,
                }
            })
            .collect();
        if tables.is_empty() && !unknown {
            continue;
        }
        families.push(FamilyVerdict {
            family: finding["family"].as_str().unwrap_or_default().to_string(),
            tables: if tables.is_empty() {
                vec![TableVerdict {
                    table: "-".into(),
                    kind: Kind::Other,
                    opening: finding["unknown"].to_string(),
                }]
            } else {
                tables
            },
        });
    }
    Judgement {
        exit: out.status.code(),
        refused: !report["refused"].is_null() || report["certain"] == serde_json::Value::Bool(false),
        families,
    }
}

/// The state's rules and node setup, for a report: each family's stale
/// and live restore text.
pub fn rules_of(state: &State) -> String {
    let mut text = format!(
        "seed {}, stale {}, live copy {:?}\n",
        state.seed,
        state.stale_backend.name(),
        state.copy
    );
    for (family, stale, live) in &state.families {
        text += &format!(
            "--- {} stale ({}):\n{}--- {} live ({}):\n{}",
            family.name(),
            state.stale_backend.name(),
            restore_text(stale),
            family.name(),
            state.stale_backend.other().name(),
            restore_text(live)
        );
    }
    text += &format!(
        "--- node: {:?}, between: {:?}\n",
        state.node.commands, state.node.between
    );
    text
}
