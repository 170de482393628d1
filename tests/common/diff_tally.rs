//! What the differential run found and how it reports it: each state's
//! families with both wrappers' verdicts, this wrapper's witnesses (how
//! each maps onto the topology and what replaying it gave), the packet
//! checks of the families whose verdict changed, the counts, and the list
//! of every changed family with its classification.

use super::differential::{rules_of, Judgement, Kind};
use super::packet_run::run as packet_run;
use super::replay::{opened, Lab};
use super::rule_grammar::State;
use super::witness::Replay;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const WAIT: Duration = Duration::from_millis(500);
const LONG_WAIT: Duration = Duration::from_secs(3);

/// One family: its verdict by the older wrapper and by this one (None:
/// nothing stale there), and each table's.
#[derive(Clone, Debug)]
pub struct FamilyResult {
    pub family: String,
    pub old: Option<Kind>,
    pub new: Option<Kind>,
    pub tables: Vec<(String, Option<Kind>, Option<Kind>)>,
    pub new_said: Vec<String>,
}

impl FamilyResult {
    pub fn changed(&self) -> bool {
        self.old != self.new
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Confirmed,
    /// Stopped by one order of the copies only, and not stopped here (the
    /// kernel's order is not read: documented).
    OneOrderNotStopped,
    /// Failed once, held when sent again into the state rebuilt with a long wait.
    Slow,
    /// `--remove --allow-opening` did not empty the family.
    NotRemoved(String),
    Wrong(String),
}

#[derive(Clone, Debug)]
pub struct WitnessEntry {
    pub family: String,
    pub text: String,
    pub mapped: Result<Replay, String>,
    pub outcome: Option<Outcome>,
}

#[derive(Clone, Debug)]
pub struct StateResult {
    pub seed: u64,
    pub pieces: Vec<&'static str>,
    pub refused: (bool, bool),
    pub families: Vec<FamilyResult>,
    pub witnesses: Vec<WitnessEntry>,
    /// What sending packets around a removal found, for a changed family.
    pub probed: Vec<String>,
    /// A flow opened by a removal without `--allow-opening`.
    pub opening: Option<String>,
}

/// A family's verdict (refused for every family of a state refused), its
/// tables' and what each table's says.
fn kinds(judgement: &Judgement, family: &str) -> (Option<Kind>, Vec<(String, Kind)>, Vec<String>) {
    match judgement.family(family) {
        None => (None, Vec::new(), Vec::new()),
        Some(f) => (
            Some(if judgement.refused { Kind::Refused } else { f.kind() }),
            f.tables.iter().map(|t| (t.table.clone(), t.kind)).collect(),
            f.tables.iter().map(|t| format!("{}: {}", t.table, t.opening)).collect(),
        ),
    }
}

impl StateResult {
    pub fn new(seed: u64, pieces: Vec<&'static str>, old: &Judgement, new: &Judgement) -> StateResult {
        let mut families = Vec::new();
        for family in ["ipv4", "ipv6"] {
            let (old_kind, old_tables, _) = kinds(old, family);
            let (new_kind, new_tables, new_said) = kinds(new, family);
            if old_kind.is_none() && new_kind.is_none() {
                continue;
            }
            let mut tables: Vec<(String, Option<Kind>, Option<Kind>)> = Vec::new();
            for (name, _) in old_tables.iter().chain(&new_tables) {
                if tables.iter().any(|t| &t.0 == name) {
                    continue;
                }
                let of = |list: &[(String, Kind)]| list.iter().find(|t| &t.0 == name).map(|t| t.1);
                tables.push((name.clone(), of(&old_tables), of(&new_tables)));
            }
            families.push(FamilyResult {
                family: family.into(),
                old: old_kind,
                new: new_kind,
                tables,
                new_said,
            });
        }
        StateResult {
            seed,
            pieces,
            refused: (old.refused, new.refused),
            families,
            witnesses: Vec::new(),
            probed: Vec::new(),
            opening: None,
        }
    }

    pub fn witness(&mut self, family: &str, text: String, mapped: Result<Replay, String>) {
        self.witnesses.push(WitnessEntry {
            family: family.into(),
            text,
            mapped,
            outcome: None,
        });
    }

    fn has_change(&self) -> bool {
        self.families.iter().any(FamilyResult::changed) || self.refused.0 != self.refused.1
    }

    /// Whether a family removed by one wrapper is held by the other (or
    /// the state refused by one only): what packets around a removal check.
    fn removal_changed(&self) -> bool {
        let removed = |k: Option<Kind>| k == Some(Kind::Removed);
        self.families
            .iter()
            .any(|f| f.old.is_some() && f.new.is_some() && removed(f.old) != removed(f.new))
            || self.refused.0 != self.refused.1
    }
}

fn name(kind: Option<Kind>) -> &'static str {
    kind.map_or("nothing stale", Kind::name)
}

/// The problems found: flows opened by a removal, witnesses that were wrong.
pub struct Changed {
    pub openings: Vec<u64>,
    pub wrong: Vec<u64>,
}

pub struct Run {
    pub tried: usize,
    pub states: Vec<StateResult>,
    replayed_states: usize,
}

/// Runs `work` on each of `items` on `workers` threads.
fn each<T: Send>(items: &mut [T], workers: usize, work: impl Fn(&mut T) + Sync) {
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<&mut T>> = items.iter_mut().map(Mutex::new).collect();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(slot) = slots.get(index) else { break };
                work(&mut slot.lock().unwrap());
            });
        }
    });
}

/// Sends each mapped witness of `result` before and after `--remove
/// --allow-opening` in one lab; the outcomes, by index in `witnesses`.
fn replay_in_lab(state: &State, entries: &[(usize, Replay)], wait: Duration) -> Vec<(usize, Outcome)> {
    let ports: Vec<(bool, u16)> = entries
        .iter()
        .flat_map(|(_, r)| std::iter::once(r.send).chain(r.primer))
        .map(|s| (s.tcp, s.to.port()))
        .collect();
    let lab = Lab::new(state, &ports);
    // One after the other where a list kept by name could carry one
    // witness's packets into another's, or where one is seen arriving
    // (by port, not by connection); else all at once.
    let lists =
        super::differential::rules_of(state).contains("-m recent") || entries.iter().any(|(_, r)| r.reply_stopped);
    let send_all = |lab: &Lab| -> Vec<[bool; 2]> {
        if lists {
            return entries.iter().map(|(_, r)| lab.sent_twice(r, wait)).collect();
        }
        std::thread::scope(|scope| {
            let sends: Vec<_> = entries
                .iter()
                .map(|(_, r)| scope.spawn(move || lab.sent_twice(r, wait)))
                .collect();
            sends.into_iter().map(|s| s.join().unwrap()).collect()
        })
    };
    let before = send_all(&lab);
    let out = lab.remove(true);
    let after = send_all(&lab);
    entries
        .iter()
        .zip(before.iter().zip(&after))
        .map(|((at, r), (b, a))| {
            let stopped = !b[1] && (r.second || !b[0]);
            let outcome = if out.status.code() != Some(0) {
                Outcome::NotRemoved(format!(
                    "exit {:?}: {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or_default()
                ))
            } else if !stopped && r.one_order {
                Outcome::OneOrderNotStopped
            } else if !(stopped && a[0] && a[1]) {
                Outcome::Wrong(format!("before (answered, answered again) {b:?}, after {a:?}"))
            } else {
                Outcome::Confirmed
            };
            (*at, outcome)
        })
        .collect()
}

impl Run {
    pub fn new(mut states: Vec<StateResult>, tried: usize) -> Run {
        states.sort_by_key(|s| s.seed);
        Run {
            tried,
            states,
            replayed_states: 0,
        }
    }

    /// Replays every mapped witness of a state where a family removed by
    /// one wrapper is held by the other, then
    /// those of states spread evenly over the run until `target` are.
    pub fn replay_witnesses(&mut self, target: usize, workers: usize, state_of: fn(u64) -> (State, Vec<&'static str>)) {
        let mapped = |s: &StateResult| s.witnesses.iter().filter(|w| w.mapped.is_ok()).count();
        let mut chosen: Vec<usize> = (0..self.states.len())
            .filter(|&i| self.states[i].removal_changed() && mapped(&self.states[i]) > 0)
            .collect();
        let mut count: usize = chosen.iter().map(|&i| mapped(&self.states[i])).sum();
        let others: Vec<usize> = (0..self.states.len())
            .filter(|&i| !chosen.contains(&i) && mapped(&self.states[i]) > 0)
            .collect();
        let total: usize = others.iter().map(|&i| mapped(&self.states[i])).sum();
        let stride = (total / target.saturating_sub(count).max(1)).max(1);
        for pass in [stride, 1] {
            for &i in others.iter().step_by(pass) {
                if count >= target {
                    break;
                }
                if !chosen.contains(&i) {
                    chosen.push(i);
                    count += mapped(&self.states[i]);
                }
            }
        }
        self.replayed_states = chosen.len();
        eprintln!("replaying {count} witnesses of {} states", chosen.len());
        let mut picked: Vec<&mut StateResult> = Vec::new();
        for (i, state) in self.states.iter_mut().enumerate() {
            if chosen.contains(&i) {
                picked.push(state);
            }
        }
        each(&mut picked, workers, |result| {
            let (state, _) = state_of(result.seed);
            let entries: Vec<(usize, Replay)> = result
                .witnesses
                .iter()
                .enumerate()
                .filter_map(|(i, w)| w.mapped.clone().ok().map(|r| (i, r)))
                .collect();
            for (at, outcome) in replay_in_lab(&state, &entries, WAIT) {
                let outcome = match outcome {
                    Outcome::Wrong(_) => {
                        let again = &replay_in_lab(
                            &state,
                            &[entries.iter().find(|e| e.0 == at).unwrap().clone()],
                            LONG_WAIT,
                        )[0]
                        .1;
                        match again {
                            Outcome::Confirmed => Outcome::Slow,
                            other => other.clone(),
                        }
                    }
                    other => other,
                };
                result.witnesses[at].outcome = Some(outcome);
            }
        });
    }

    /// Sends packets around removals of the states whose verdicts changed:
    /// where a family held before is removed now, the packet test's run
    /// (`--remove`: nothing may open); where one removed before is held
    /// now, every topology flow around `--remove --allow-opening` (what
    /// the hold keeps stopped).
    pub fn probe_changed(&mut self, workers: usize, state_of: fn(u64) -> (State, Vec<&'static str>)) {
        let mut picked: Vec<&mut StateResult> = self.states.iter_mut().filter(|s| s.removal_changed()).collect();
        eprintln!("sending packets around the removal of {} changed states", picked.len());
        each(&mut picked, workers, |result| {
            let (state, _) = state_of(result.seed);
            let removed_now = |f: &FamilyResult| f.new == Some(Kind::Removed) && f.changed();
            let held_now = |f: &FamilyResult| f.old == Some(Kind::Removed) && f.changed() && f.new.is_some();
            if result.families.iter().any(removed_now) {
                let tally = packet_run(&state);
                result.probed.push(format!("--remove: {}", tally.counts()));
                if !tally.failures.is_empty() {
                    result.opening = Some(tally.failures.join("\n=====\n"));
                }
            }
            if result.families.iter().any(held_now) {
                let lab = Lab::new(&state, &[]);
                let before = lab.probe_all(WAIT);
                let out = lab.remove(true);
                let after = lab.probe_all(WAIT);
                let flows: Vec<String> = opened(&before, &after).iter().map(|f| f.to_string()).collect();
                result.probed.push(format!(
                    "--remove --allow-opening (exit {:?}) opened {} flows: {}",
                    out.status.code(),
                    flows.len(),
                    flows.join(", ")
                ));
            }
        });
    }

    pub fn problems(&self) -> Changed {
        Changed {
            openings: self
                .states
                .iter()
                .filter(|s| s.opening.is_some())
                .map(|s| s.seed)
                .collect(),
            wrong: self
                .states
                .iter()
                .filter(|s| s.witnesses.iter().any(|w| matches!(w.outcome, Some(Outcome::Wrong(_)))))
                .map(|s| s.seed)
                .collect(),
        }
    }

    /// The counts.
    pub fn summary(&self) -> String {
        let families: usize = self.states.iter().map(|s| s.families.len()).sum();
        let mut changes: BTreeMap<String, usize> = BTreeMap::new();
        let mut table_changes: BTreeMap<String, usize> = BTreeMap::new();
        for state in &self.states {
            for f in state.families.iter().filter(|f| f.changed()) {
                *changes.entry(format!("{} → {}", name(f.old), name(f.new))).or_default() += 1;
            }
            for f in &state.families {
                for (_, old, new) in f.tables.iter().filter(|t| t.1 != t.2) {
                    *table_changes
                        .entry(format!("{} → {}", name(*old), name(*new)))
                        .or_default() += 1;
                }
            }
        }
        let refused = |pick: fn(&(bool, bool)) -> bool| self.states.iter().filter(|s| pick(&s.refused)).count();
        let witnesses: Vec<&WitnessEntry> = self.states.iter().flat_map(|s| &s.witnesses).collect();
        let mut unreplayable: BTreeMap<&str, usize> = BTreeMap::new();
        for w in &witnesses {
            if let Err(why) = &w.mapped {
                *unreplayable.entry(why.as_str()).or_default() += 1;
            }
        }
        let outcome = |pick: fn(&Outcome) -> bool| {
            witnesses
                .iter()
                .filter(|w| w.outcome.as_ref().is_some_and(pick))
                .count()
        };
        let mut text = format!(
            "states: {} tried, {} non-empty; families judged: {families}; refused by the old wrapper {}, by this one {}\n",
            self.tried,
            self.states.len(),
            refused(|r| r.0),
            refused(|r| r.1)
        );
        text += &format!(
            "families whose verdict changed (old → new): {}\n",
            changes.values().sum::<usize>()
        );
        for (change, n) in &changes {
            text += &format!("  {n:6}  {change}\n");
        }
        text += "tables whose verdict changed (old → new):\n";
        for (change, n) in &table_changes {
            text += &format!("  {n:6}  {change}\n");
        }
        text += &format!(
            "witnesses: {} found, {} mappable onto the topology, {} unreplayable; {} replayed (in {} states): {} confirmed, {} wrong, {} slow (held when sent again with a long wait), {} stopped by one order of the copies only and not here, {} not removed by --allow-opening\n",
            witnesses.len(),
            witnesses.iter().filter(|w| w.mapped.is_ok()).count(),
            unreplayable.values().sum::<usize>(),
            witnesses.iter().filter(|w| w.outcome.is_some()).count(),
            self.replayed_states,
            outcome(|o| *o == Outcome::Confirmed),
            outcome(|o| matches!(o, Outcome::Wrong(_))),
            outcome(|o| *o == Outcome::Slow),
            outcome(|o| *o == Outcome::OneOrderNotStopped),
            outcome(|o| matches!(o, Outcome::NotRemoved(_))),
        );
        text += "unreplayable, why:\n";
        for (why, n) in &unreplayable {
            text += &format!("  {n:6}  {why}\n");
        }
        let probed = self.states.iter().filter(|s| !s.probed.is_empty()).count();
        text += &format!(
            "changed states sent packets around a removal: {probed}; flows opened by --remove (never allowed): {}",
            self.problems().openings.len()
        );
        text
    }

    /// Every changed family, classified; then every problem with its
    /// state's rules.
    pub fn report(&self, state_of: &dyn Fn(u64) -> (State, Vec<&'static str>)) -> String {
        let mut text = self.summary() + "\n\n";
        for state in self.states.iter().filter(|s| s.has_change()) {
            for f in state.families.iter().filter(|f| f.changed()) {
                text += &format!(
                    "seed {} {}: {} → {}; tables {}; pieces added {:?}\n",
                    state.seed,
                    f.family,
                    name(f.old),
                    name(f.new),
                    f.tables
                        .iter()
                        .map(|(t, o, n)| format!("{t} {} → {}", name(*o), name(*n)))
                        .collect::<Vec<_>>()
                        .join(", "),
                    state.pieces
                );
                for said in &f.new_said {
                    let cut: String = said.chars().take(600).collect();
                    text += &format!("    now: {cut}\n");
                }
                for w in state.witnesses.iter().filter(|w| w.family == f.family) {
                    text += &format!("    witness {:?}: {}\n", w.outcome, w.text);
                }
            }
            if state.refused.0 != state.refused.1 {
                text += &format!(
                    "seed {}: refused {} → {}\n",
                    state.seed, state.refused.0, state.refused.1
                );
            }
            for probed in &state.probed {
                text += &format!("    packets: {probed}\n");
            }
        }
        for state in &self.states {
            let wrong: Vec<&WitnessEntry> = state
                .witnesses
                .iter()
                .filter(|w| matches!(w.outcome, Some(Outcome::Wrong(_))))
                .collect();
            if wrong.is_empty() && state.opening.is_none() {
                continue;
            }
            text += &format!(
                "\n===== PROBLEM in seed {}\n{}",
                state.seed,
                rules_of(&state_of(state.seed).0)
            );
            for w in wrong {
                text += &format!("wrong witness ({:?}): {}\n", w.outcome, w.text);
            }
            if let Some(opening) = &state.opening {
                text += &format!("opening:\n{opening}\n");
            }
        }
        text
    }
}
