//! How much a decision reads ([`Depth`]) and what it has read so far: the
//! evidence in the order it was read, and the first source that decided
//! (later ones may add evidence, never change the decision).
//!
//! It decides nothing itself and reads nothing: each source's module adds
//! what it read (kept only where warnings or the report will read it) and,
//! if it decides, says so; `decide` stops asking sources
//! once [`Collector::done`] says reading can stop.

use super::evidence::Evidence;
use super::reason::Reason;
use super::source::{ReasonKept, Source};
use crate::mode::Mode;

/// How much to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// Stop at the first source that decides, and skip the reads that could
    /// only add a warning (a wrapped call whose warnings nobody will see).
    Decide,
    /// Stop at the first source that decides, then read what could add a
    /// warning about that decision (a wrapped call whose warnings go to
    /// stderr or are due in the warnings record).
    DecideAndWarn,
    /// Read every source, with exact counts (the `detect` report).
    Everything,
}

impl Depth {
    /// Whether reading stops at the first source that decides.
    pub(super) fn stops_early(self) -> bool {
        self != Depth::Everything
    }

    /// Whether the reads that could only add a warning are made.
    pub(super) fn warns(self) -> bool {
        self != Depth::Decide
    }
}

/// Collects evidence; the first source to decide wins.
pub(super) struct Collector {
    pub(super) depth: Depth,
    pub(super) evidence: Vec<Evidence>,
    pub(super) decided: Option<(Mode, Source, Reason)>,
}

impl Collector {
    pub(super) fn new(depth: Depth) -> Collector {
        Collector {
            depth,
            evidence: Vec::new(),
            decided: None,
        }
    }

    /// Records a piece of evidence, made only where something reads it:
    /// not at [`Depth::Decide`], whose call shows no warning and no report
    /// (its locations, findings and methods are text, and formatting them
    /// cost a host-link call a fifth of its instructions).
    pub(super) fn add(&mut self, evidence: impl FnOnce() -> Evidence) {
        if self.depth.warns() {
            self.evidence.push(evidence());
        }
    }

    pub(super) fn decide(&mut self, mode: Mode, source: Source, reason: impl Into<Reason>) {
        if self.decided.is_none() {
            let reason = reason.into();
            debug_assert_eq!(
                matches!(reason, Reason::Described(_)),
                source.facts().reason == ReasonKept::InWords,
                "{source:?} keeps its reason as its facts say"
            );
            self.decided = Some((mode, source, reason));
        }
    }

    /// Whether reading can stop here.
    pub(super) fn done(&self) -> bool {
        self.depth.stops_early() && self.decided.is_some()
    }
}
