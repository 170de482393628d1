//! A differential run of `stale --remove`'s judgement, run on demand (a
//! measurement, not part of the suite): generated states (the packet
//! test's grammar, widened by tests/common/diff_motifs.rs), each written
//! into a fresh node and judged read-only (`stale --json`) by this
//! wrapper and an older one; every family whose verdict changed listed and
//! classified; this wrapper's witnesses replayed by real packets through a
//! router between a client and a server (stopped now, passing after
//! `--remove --allow-opening`); families held before and removed now sent
//! every topology flow around a real `--remove` (nothing may open).
//!
//! ```sh
//! IPTW_OLD_WRAPPER=/path/to/old/iptables-wrapper cargo test --release \
//!     --test stale_differential -- --ignored --nocapture
//! ```
//!
//! `IPTW_DIFF_STATES` (20000), `IPTW_DIFF_SEED` (20261207),
//! `IPTW_DIFF_WORKERS` (3), `IPTW_DIFF_REPLAY` (witnesses to replay at
//! least, 1200: every one of a changed family, then others spread over
//! the run), `IPTW_DIFF_MINUTES` (stop judging new states after that
//! long), `IPTW_DIFF_REPORT` (the file listing every changed family;
//! default in the target's temporary directory).

mod common;

use common::diff_tally::{Changed, Run, StateResult};
use common::differential::{judge, write_state};
use common::netns_topology::Family;
use common::rule_grammar::State;
use common::witness::{parse, replay, Named};
use common::Node;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn setting(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value}: expected a whole number")),
        Err(_) => default,
    }
}

/// The state of `seed`: the grammar's, widened; and the pieces added.
pub fn state_of(seed: u64) -> (State, Vec<&'static str>) {
    let mut state = State::generate(seed);
    let added = common::diff_motifs::widen(&mut state);
    (state, added)
}

fn family_of(name: &str) -> Family {
    if name == "ipv6" {
        Family::V6
    } else {
        Family::V4
    }
}

/// Judges one state with both wrappers.
fn judged(seed: u64, old: &str) -> Option<StateResult> {
    let (state, pieces) = state_of(seed);
    if state.is_empty() {
        return None;
    }
    let node = Node::new(&format!("diff-judge-{seed}"));
    write_state(&node, &state);
    let new = judge(&node, common::WRAPPER);
    let before = judge(&node, old);
    let mut result = StateResult::new(seed, pieces, &before, &new);
    for family in &new.families {
        let named = Named::of(&state, family_of(&family.family));
        for text in family.witnesses() {
            let mapped = match parse(&text) {
                None => Err("not read".to_string()),
                Some(_) if new.refused => Err("its state refused (no removal to replay)".into()),
                Some(witness) => replay(&witness, family_of(&family.family), &named),
            };
            result.witness(&family.family, text, mapped);
        }
    }
    Some(result)
}

#[test]
#[ignore = "a measurement run on demand: IPTW_OLD_WRAPPER=... cargo test --release --test stale_differential -- --ignored"]
fn differential_against_an_older_wrapper() {
    common::root_or_skip!();
    let old = std::env::var("IPTW_OLD_WRAPPER").expect("IPTW_OLD_WRAPPER: the older wrapper's binary");
    let count = setting("IPTW_DIFF_STATES", 20_000) as usize;
    let seed = setting("IPTW_DIFF_SEED", 20_261_207);
    let workers = setting("IPTW_DIFF_WORKERS", 3).max(1);
    let replay_target = setting("IPTW_DIFF_REPLAY", 1200) as usize;
    let minutes = setting("IPTW_DIFF_MINUTES", 0);
    let report = std::env::var("IPTW_DIFF_REPORT")
        .unwrap_or_else(|_| format!("{}/stale-differential-{seed}.txt", env!("CARGO_TARGET_TMPDIR")));
    let started = Instant::now();
    let deadline = (minutes > 0).then(|| started + Duration::from_secs(60 * minutes));
    eprintln!("stale_differential: {count} states from IPTW_DIFF_SEED={seed}, {workers} at once, old wrapper {old}");
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= count || deadline.is_some_and(|d| Instant::now() > d) {
                    break;
                }
                if let Some(result) = judged(seed.wrapping_add(index as u64), &old) {
                    results.lock().unwrap().push(result);
                }
                let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                if finished % 1000 == 0 {
                    eprintln!("  {finished} states judged, {:.1} s", started.elapsed().as_secs_f64());
                }
            });
        }
    });
    let judging = started.elapsed();
    let mut run = Run::new(results.into_inner().unwrap(), done.into_inner());
    eprintln!(
        "judged {} states ({} non-empty) in {:.1} s: {:.1} states/s",
        run.tried,
        run.states.len(),
        judging.as_secs_f64(),
        run.tried as f64 / judging.as_secs_f64()
    );
    run.replay_witnesses(replay_target, workers as usize, state_of);
    run.probe_changed(workers as usize, state_of);
    let text = run.report(&state_of);
    std::fs::write(&report, &text).unwrap();
    eprintln!("{}", run.summary());
    eprintln!("every changed family, with its classification: {report}");
    eprintln!("wall time: {:.1} s", started.elapsed().as_secs_f64());
    let Changed { openings, wrong, .. } = run.problems();
    assert!(
        openings.is_empty() && wrong.is_empty(),
        "{} openings and {} wrong witnesses; see {report}",
        openings.len(),
        wrong.len()
    );
}
