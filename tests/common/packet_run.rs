//! One state of the packet test of `stale --remove`, run: its topology
//! built, both backends written into the router, the probe flows sent
//! before and after the removal, and what the removal must keep: no flow
//! that was stopped passes after (the documented limits counted apart: a
//! stale-only DNAT into a live block, and a flow only the two copies
//! together stopped where every stale rule has its twin), a family's stale backend emptied whole
//! or left whole, exit 0 only when nothing stale remains, the backup
//! restoring what was removed, and a stale backend wholly copied in the
//! live one removed (but where it holds anything in the security table).

use super::netns_topology::{Family, Flow, Topology};
use super::rule_grammar::{restore_text, Backend, Line, LiveCopy, State};
use super::save_tables::{tables, text, Tables};
use super::stale::{backup_dir_of, stale, stderr, stdout, without_headers};
use super::Node;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How long a probe waits for an answer (connect, then the echo).
const WAIT: Duration = Duration::from_millis(500);
/// How long a flow that seemed to open is given in the state rebuilt.
const LONG_WAIT: Duration = Duration::from_secs(3);

/// What one or many states gave.
#[derive(Default, Debug)]
pub struct Tally {
    pub states: usize,
    pub removed: usize,
    pub held: usize,
    pub refused: usize,
    pub wholly_copied: usize,
    pub wholly_copied_removed: usize,
    /// States whose stale copy only accepts more ([`LiveCopy::Loosened`]).
    pub loosened: usize,
    pub loosened_removed: usize,
    pub flows_sent: usize,
    /// Flows opened by removing a stale-only nat rule that steered them
    /// into a live block (the documented limit).
    pub nat_limit_flows: usize,
    /// Flows opened where every stale rule has its twin and each backend
    /// alone lets them through: only the two copies together stopped them
    /// (one copy's rule reads what its twin wrote; the documented limit).
    pub doubling_flows: usize,
    /// Flows that seemed stopped before but passed in the state rebuilt
    /// (each with its state's seed).
    pub slow: Vec<String>,
    /// The flows stopped before the removal (of one state: what a fixed
    /// case shows it blocks).
    pub stopped_before: Vec<Flow>,
    pub failures: Vec<String>,
}

impl Tally {
    pub fn add(&mut self, other: Tally) {
        self.states += other.states;
        self.removed += other.removed;
        self.held += other.held;
        self.refused += other.refused;
        self.wholly_copied += other.wholly_copied;
        self.wholly_copied_removed += other.wholly_copied_removed;
        self.loosened += other.loosened;
        self.loosened_removed += other.loosened_removed;
        self.flows_sent += other.flows_sent;
        self.nat_limit_flows += other.nat_limit_flows;
        self.doubling_flows += other.doubling_flows;
        self.slow.extend(other.slow);
        self.stopped_before.extend(other.stopped_before);
        self.failures.extend(other.failures);
    }

    pub fn counts(&self) -> String {
        format!(
            "{} states: {} removed (exit 0), {} held (exit 1), {} refused (exit 2); {} wholly copied, {} of them removed; {} loosened, {} of them removed; {} flows sent; {} opened by a stale-only nat rule into a live block and {} opened where only both copies together stopped them (the documented limits); {} slow before (passed when rebuilt); {} failures",
            self.states,
            self.removed,
            self.held,
            self.refused,
            self.wholly_copied,
            self.wholly_copied_removed,
            self.loosened,
            self.loosened_removed,
            self.flows_sent,
            self.nat_limit_flows,
            self.doubling_flows,
            self.slow.len(),
            self.failures.len()
        )
    }
}

/// Which lines a build writes: both backends', the live backend's with the
/// stale nat rules only, or one backend's alone.
#[derive(Clone, Copy, PartialEq)]
enum Written {
    Both,
    StaleNatOnly,
    LiveOnly,
    StaleOnly,
}

static NODES: AtomicUsize = AtomicUsize::new(0);

/// The state's router (the calling thread's new namespace, with the host
/// link naming the live backend) and its topology, both backends written.
fn build(state: &State, written: Written) -> (Node, Topology) {
    let node = Node::new(&format!("packets-{}", NODES.fetch_add(1, Ordering::Relaxed)));
    let live = state.stale_backend.other();
    for family in [Family::V4, Family::V6] {
        node.set_host_link(family.command(), &format!("/usr/sbin/{}", live.tool(family, "")));
    }
    let topology = Topology::around_this_thread();
    let mut script = state.node.commands.join("\n") + "\n";
    for backend in [state.stale_backend, live] {
        if backend == live {
            script += &state.node.between.iter().map(|c| format!("{c}\n")).collect::<String>();
        }
        for (family, stale, live_lines) in &state.families {
            let mut lines: Vec<Line> = if backend == live {
                live_lines.clone()
            } else {
                stale.clone()
            };
            if backend != live && written == Written::StaleNatOnly {
                lines.retain(|l| matches!(l, Line::Rule { table: "nat", .. }));
            }
            if (backend == live && written == Written::StaleOnly) || (backend != live && written == Written::LiveOnly) {
                lines.clear();
            }
            if lines.is_empty() {
                continue;
            }
            let file = node.path(&format!("{}.rules", backend.tool(*family, "")));
            std::fs::write(&file, restore_text(&lines)).unwrap();
            script += &format!("{} < {}\n", backend.tool(*family, "-restore"), file.display());
        }
    }
    node.sh(&script);
    (node, topology)
}

/// A backend's save per family, as the save tool prints it.
fn saves(node: &Node, backend: Backend) -> Vec<(Family, String)> {
    [Family::V4, Family::V6]
        .into_iter()
        .map(|family| (family, without_headers(&node.sh(&backend.tool(family, "-save")))))
        .collect()
}

fn tables_of(saves: &[(Family, String)]) -> Vec<(Family, Tables)> {
    saves.iter().map(|(family, save)| (*family, tables(save))).collect()
}

/// Runs one state; its counts, and a failure per broken promise.
pub fn run(state: &State) -> Tally {
    let (node, topology) = build(state, Written::Both);
    let flows = Topology::flows();
    let stale_backend = state.stale_backend;
    let stale_saves = saves(&node, stale_backend);
    let live_saves = saves(&node, stale_backend.other());
    let before = topology.probe(&flows, WAIT);
    let out = stale(&node, &["--remove"]);
    let after = topology.probe(&flows, WAIT);
    let stale_before = tables_of(&stale_saves);
    let stale_after = tables_of(&saves(&node, stale_backend));
    let mut tally = Tally {
        states: 1,
        flows_sent: 2 * flows.len(),
        stopped_before: flows
            .iter()
            .zip(&before)
            .filter(|(_, b)| !**b)
            .map(|(f, _)| *f)
            .collect(),
        ..Tally::default()
    };
    let code = out.status.code();
    let described = describe(state, &stale_saves, &live_saves, &out);
    let fail = |why: String| format!("{why}\n{described}");
    let mut failures = Vec::new();
    match code {
        Some(0) => tally.removed += 1,
        Some(1) => tally.held += 1,
        Some(2) => tally.refused += 1,
        _ => failures.push(fail(format!("exit status {code:?}, not 0, 1 or 2"))),
    }
    // The security table's twins never count (the backends hook it at
    // different priorities): a copy holding anything there stays.
    let in_security = |l: &Line| {
        matches!(
            l,
            Line::Rule { table: "security", .. }
                | Line::Policy { table: "security", .. }
                | Line::Chain { table: "security", .. }
        )
    };
    // Nor do a table's twins where a native chain runs between the copies.
    let whole = state.copy == LiveCopy::Whole
        && state.families.iter().any(|(_, stale, _)| !stale.is_empty())
        && !state.families.iter().any(|(_, stale, _)| stale.iter().any(in_security))
        && state.node.between.is_empty();
    if whole {
        tally.wholly_copied += 1;
        if code == Some(0) {
            tally.wholly_copied_removed += 1;
        } else {
            failures.push(fail(
                "the live backend holds every stale rule, yet the stale backend was not removed".into(),
            ));
        }
    }
    if state.copy == LiveCopy::Loosened {
        tally.loosened += 1;
        tally.loosened_removed += usize::from(code == Some(0));
    }
    let mut changed = false;
    for ((family, was), (_, is)) in stale_before.iter().zip(&stale_after) {
        if code == Some(0) && !is.is_empty() {
            failures.push(fail(format!(
                "exit 0, yet {} {} still holds:\n{}",
                stale_backend.name(),
                family.name(),
                text(is)
            )));
        }
        if is != was && !is.is_empty() {
            failures.push(fail(format!(
                "{} {} neither emptied whole nor left whole; it now holds:\n{}",
                stale_backend.name(),
                family.name(),
                text(is)
            )));
        }
        changed |= is != was;
    }
    if changed {
        failures.extend(backup_restores(&node, stale_backend, &stale_before, &out).map(fail));
    }
    let opened: Vec<Flow> = flows
        .iter()
        .zip(before.iter().zip(&after))
        .filter(|(_, (before, after))| !**before && **after)
        .map(|(flow, _)| *flow)
        .collect();
    drop(topology);
    drop(node);
    if !opened.is_empty() {
        let judged = judge_openings(state, &opened);
        tally.flows_sent += judged.sent;
        tally.nat_limit_flows += judged.nat_limit;
        tally.doubling_flows += judged.doubling;
        tally
            .slow
            .extend(judged.slow.iter().map(|flow| format!("seed {}: {flow}", state.seed)));
        if !judged.opened.is_empty() {
            let flows: Vec<String> = judged.opened.iter().map(Flow::to_string).collect();
            failures.push(fail(format!(
                "stopped before the removal, passing after it: {}",
                flows.join(", ")
            )));
        }
    }
    tally.failures = failures;
    tally
}

/// The backup the removal printed, restored into the router: the stale
/// backend then holds what it held before.
fn backup_restores(
    node: &Node,
    stale_backend: Backend,
    before: &[(Family, Tables)],
    out: &std::process::Output,
) -> Option<String> {
    if !stdout(out).lines().any(|l| l.starts_with("backup: ")) {
        return Some("the stale backend changed, yet no backup was printed".into());
    }
    let dir = backup_dir_of(out);
    for (family, _) in before {
        let file = dir.join(format!("{}.rules", stale_backend.tool(*family, "")));
        if file.exists() {
            node.sh(&format!(
                "{} < {}",
                stale_backend.tool(*family, "-restore"),
                file.display()
            ));
        }
    }
    let restored = tables_of(&saves(node, stale_backend));
    for ((family, was), (_, is)) in before.iter().zip(&restored) {
        if is != was {
            return Some(format!(
                "the backup in {} does not restore {} {}: restored, it holds:\n{}",
                dir.display(),
                stale_backend.name(),
                family.name(),
                text(is)
            ));
        }
    }
    None
}

/// The flows that seemed opened, judged again: every flow sent again at
/// once into the state rebuilt, with a long wait (one answered there was
/// only slow, or raced a flow that changes what others meet, such as a
/// `SET` target); the rest, into the live backend beside the stale nat
/// rules alone: one stopped there was steered by a stale nat rule into a
/// live block (the documented limit). Where every stale rule has its twin,
/// one that each backend alone lets through was stopped only by the two
/// copies together (a copy reads what its twin wrote: the other limit).
struct Judged {
    opened: Vec<Flow>,
    slow: Vec<Flow>,
    nat_limit: usize,
    doubling: usize,
    sent: usize,
}

fn judge_openings(state: &State, seemed: &[Flow]) -> Judged {
    let flows = Topology::flows();
    let passed_in_rebuilt = |written: Written, which: &[Flow]| -> Vec<bool> {
        let (state, all) = (state.clone(), flows.clone());
        let passed = std::thread::spawn(move || {
            let (_node, topology) = build(&state, written);
            topology.probe(&all, LONG_WAIT)
        })
        .join()
        .unwrap();
        which
            .iter()
            .map(|flow| passed[flows.iter().position(|f| f == flow).unwrap()])
            .collect()
    };
    let again = passed_in_rebuilt(Written::Both, seemed);
    let (slow, stopped): (Vec<Flow>, Vec<Flow>) = seemed
        .iter()
        .partition(|flow| again[seemed.iter().position(|f| f == *flow).unwrap()]);
    let mut judged = Judged {
        opened: stopped.clone(),
        slow,
        nat_limit: 0,
        doubling: 0,
        sent: flows.len(),
    };
    let has_nat = state
        .families
        .iter()
        .any(|(_, stale, _)| stale.iter().any(|l| matches!(l, Line::Rule { table: "nat", .. })));
    if !stopped.is_empty() && has_nat {
        judged.sent += flows.len();
        let with_stale_nat = passed_in_rebuilt(Written::StaleNatOnly, &stopped);
        judged.opened = stopped
            .iter()
            .zip(&with_stale_nat)
            .filter(|(_, passed)| **passed)
            .map(|(f, _)| *f)
            .collect();
        judged.nat_limit = stopped.len() - judged.opened.len();
    }
    if judged.opened.is_empty() || !stale_within_live(state) {
        return judged;
    }
    judged.sent += 2 * flows.len();
    let live_alone = passed_in_rebuilt(Written::LiveOnly, &judged.opened);
    let stale_alone = passed_in_rebuilt(Written::StaleOnly, &judged.opened);
    let only_doubled: Vec<Flow> = judged
        .opened
        .iter()
        .zip(live_alone.iter().zip(&stale_alone))
        .filter(|(_, (live, stale))| **live && **stale)
        .map(|(f, _)| *f)
        .collect();
    judged.doubling += only_doubled.len();
    judged.opened.retain(|f| !only_doubled.contains(f));
    judged
}

/// Whether the stale backend is a copy of (part of) the live one: every
/// stale line is in the live backend too, in the same family, table and
/// chain (each as often), and each chain holding stale rules holds the
/// same rules in the same order in both (a live rule after a copied one
/// can undo it: that is no copy). The removal then leaves the host exactly
/// as its live backend alone would run.
fn stale_within_live(state: &State) -> bool {
    fn rules_of<'a>(lines: &'a [Line], table: &str, chain: &str) -> Vec<&'a str> {
        lines
            .iter()
            .filter_map(|l| match l {
                Line::Rule {
                    table: t,
                    chain: c,
                    rule,
                } if *t == table && c == chain => Some(rule.as_str()),
                _ => None,
            })
            .collect()
    }
    state.families.iter().all(|(_, stale, live)| {
        let mut left: Vec<&Line> = live.iter().collect();
        let within = stale.iter().all(|line| match left.iter().position(|l| *l == line) {
            Some(at) => {
                left.swap_remove(at);
                true
            }
            None => false,
        });
        within
            && stale.iter().all(|line| match line {
                Line::Rule { table, chain, .. } => rules_of(stale, table, chain) == rules_of(live, table, chain),
                _ => true,
            })
    })
}

/// The state, for a failure's message: its seed, both backends' saves
/// before, the node's setup and what the removal printed.
fn describe(
    state: &State,
    stale: &[(Family, String)],
    live: &[(Family, String)],
    out: &std::process::Output,
) -> String {
    let mut text = format!(
        "seed {} (replay: IPTW_STALE_SEED={} IPTW_STALE_STATES=1), stale {}, live copy {:?}\n",
        state.seed,
        state.seed,
        state.stale_backend.name(),
        state.copy
    );
    for (label, saves) in [("stale", stale), ("live", live)] {
        for (family, save) in saves {
            text += &format!("--- {label} {} save:\n{save}", family.name());
        }
    }
    text += &format!(
        "--- node: {:?}, between: {:?}\n",
        state.node.commands, state.node.between
    );
    text += &format!(
        "--- stale --remove exited {:?}:\n{}{}",
        out.status.code(),
        stdout(out),
        stderr(out)
    );
    text
}
