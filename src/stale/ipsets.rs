//! The ipsets a save's rules name (`-m set --match-set`, `-j SET
//! --add-set/--del-set/--map-set`), given to the proof's scratch namespace
//! as the host holds them. Sets are the node's, not a backend's: both
//! backends' rules read the same sets, so a removal never creates, changes
//! or removes one in the host's namespace, and emptying a table leaves
//! every set in place.
//!
//! A restore resolves each set's name to the set's kernel index, and the
//! rule keeps only the index (in legacy's entry blob and in nf_tables'
//! compat expression alike): the scratch namespace's sets must have the
//! host's indices, or the proof's byte-for-byte comparison would differ
//! (or, worse, agree for the wrong set). So each named set (and each
//! member of a `list:set` among them) is read from the host's namespace,
//! its index by the kernel's own sockopt ([`IpsetSocket`]), its type,
//! options and members by `ipset save NAME` (the `ipset` program found
//! where the backends are: its save and restore formats are the one stable
//! description of a set, which a netlink client of the wrapper's own would
//! have to follow for every set type). In the scratch namespace the sets
//! are made in ascending index order, placeholders (empty `list:set`s) in
//! the gaps, then filled; their indices are checked. The namespace goes
//! away with the proof, and its sets with it.
//!
//! Where the program is missing or a set cannot be read, the table does
//! not prove, with the reason; nothing is guessed.

use super::saved_rules::quoted_words;
use crate::backend;
use crate::escape::printable;
use crate::escape::Shown as _;
use crate::kernel::ipset::IpsetSocket;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The program that reads and makes sets.
const PROGRAM: &str = "ipset";
/// The options of a rule that name a set, each followed by the name.
const SET_OPTIONS: [&[u8]; 4] = [b"--match-set", b"--add-set", b"--del-set", b"--map-set"];
/// What a placeholder in an index gap is called, before its index.
const PLACEHOLDER: &str = "iptables-wrapper-gap-";

/// One set as the host holds it.
#[derive(Debug)]
struct HostSet {
    name: String,
    /// The `create` line of its save.
    create: String,
    /// Its save's `add` lines, in order.
    adds: String,
}

/// The host's sets a save names, by their kernel index, and the program
/// that makes them again.
#[derive(Debug, Default)]
pub struct HostSets {
    by_index: BTreeMap<u16, HostSet>,
    program: Option<PathBuf>,
}

/// The names of the sets `save`'s rules name, sorted, each once. The
/// words are split as the save tools quote them, so a comment that holds
/// `--match-set X` names nothing (a name missed would only make the
/// proof's restore fail).
pub fn named_in(save: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    for rule in save.split(|&b| b == b'\n').filter(|line| line.starts_with(b"-A ")) {
        let words = quoted_words(rule);
        for pair in words.windows(2) {
            if SET_OPTIONS.contains(&pair[0].as_slice()) {
                names.push(String::from_utf8_lossy(&pair[1]).into_owned());
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

impl HostSets {
    /// Reads, in this thread's namespace (the host's), the sets `save`
    /// names and the members of any `list:set` among them; `subject` names
    /// the save in a reason ("the backup"). Nothing is read, and no program
    /// needed, when it names none.
    pub fn read(subject: &str, save: &[u8]) -> Result<HostSets, String> {
        let mut pending = named_in(save);
        let Some(first) = pending.first() else {
            return Ok(HostSets::default());
        };
        let uses = |name: &str| format!("{subject} uses ipset {}", printable(name));
        let program = backend::locate_beside(PROGRAM).map_err(|looked| {
            format!(
                "{}; reading it needs the ipset program: install ipset ({looked})",
                uses(first)
            )
        })?;
        let socket = IpsetSocket::open().map_err(|e| format!("{}; its index cannot be read: {e}", uses(first)))?;
        let index_of = |name: &str| -> Result<u16, String> {
            match socket.index_of(name) {
                Ok(Some(index)) => Ok(index),
                Ok(None) => Err(format!("{}, which this namespace does not hold", uses(name))),
                Err(e) => Err(format!("{}; its index cannot be read: {e}", uses(name))),
            }
        };
        let mut sets = HostSets {
            by_index: BTreeMap::new(),
            program: Some(program),
        };
        while let Some(name) = pending.pop() {
            if sets.by_index.values().any(|set| set.name == name) {
                continue;
            }
            let index = index_of(&name)?;
            let set = sets
                .saved(&name)
                .map_err(|why| format!("{}; it cannot be read: {why}", uses(&name)))?;
            pending.extend(set.members());
            if index_of(&name)? != index {
                return Err(format!("{}; it was made again while it was read", uses(&name)));
            }
            sets.by_index.insert(index, set);
        }
        Ok(sets)
    }

    /// `ipset save NAME`, as a set.
    fn saved(&self, name: &str) -> Result<HostSet, String> {
        let out = self.run(&["save", name], None)?;
        let mut create = String::new();
        let mut adds = String::new();
        for line in String::from_utf8_lossy(&out).lines() {
            if line.starts_with("create ") && create.is_empty() {
                create = format!("{line}\n");
            } else if line.starts_with("add ") {
                adds.push_str(line);
                adds.push('\n');
            } else if !line.is_empty() {
                return Err(format!("its save holds a line it should not: {}", printable(line)));
            }
        }
        if create.is_empty() {
            return Err("its save holds no create line".into());
        }
        Ok(HostSet {
            name: name.to_string(),
            create,
            adds,
        })
    }

    /// Makes the sets in this thread's namespace (a fresh scratch one, which
    /// holds no set) at the host's indices, and checks that they are there.
    pub fn recreate(&self) -> Result<(), String> {
        let Some(&top) = self.by_index.keys().next_back() else {
            return Ok(());
        };
        let mut input = String::new();
        for index in 0..=top {
            match self.by_index.get(&index) {
                Some(set) => input.push_str(&set.create),
                None => {
                    let _ = writeln!(input, "create {} list:set", self.placeholder(index));
                }
            }
        }
        for set in self.by_index.values() {
            input.push_str(&set.adds);
        }
        let unmade = |why: String| format!("the host's ipsets cannot be made in the scratch namespace: {why}");
        let socket = IpsetSocket::open().map_err(|e| unmade(format!("their indices cannot be read: {e}")))?;
        // Where they are already (the host's own namespace, not a fresh
        // one), nothing is made.
        for set in self.by_index.values() {
            if socket.index_of(&set.name).map_err(|e| unmade(e.to_string()))?.is_some() {
                return Err(unmade(format!(
                    "this namespace already holds ipset {}: it is not a fresh one",
                    printable(&set.name)
                )));
            }
        }
        self.run(&["restore"], Some(input.as_bytes())).map_err(unmade)?;
        for (&index, set) in &self.by_index {
            let made = socket.index_of(&set.name).map_err(|e| unmade(e.to_string()))?;
            if made != Some(index) {
                return Err(unmade(format!(
                    "ipset {} has index {made:?}, not the host's {index}",
                    printable(&set.name)
                )));
            }
        }
        Ok(())
    }

    /// A placeholder's name for the gap at `index`: one no set read has.
    fn placeholder(&self, index: u16) -> String {
        let mut name = format!("{PLACEHOLDER}{index}");
        while self.by_index.values().any(|set| set.name == name) {
            name.push('_');
        }
        name
    }

    /// Runs the program with `args` (and `input` on its stdin); its stdout.
    fn run(&self, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, String> {
        let program = self.program.as_ref().expect("a program where there are sets");
        let mut child = Command::new(program)
            .args(args)
            .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", program.shown()))?;
        let fed = match (input, child.stdin.take()) {
            (Some(input), Some(mut stdin)) => stdin.write_all(input),
            _ => Ok(()),
        };
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        match (fed, out.status.success()) {
            (Ok(()), true) => Ok(out.stdout),
            (fed, _) => Err(format!(
                "{} {}: {}: {}{}",
                program.shown(),
                args[0],
                out.status,
                printable(&String::from_utf8_lossy(out.stderr.trim_ascii())),
                fed.err()
                    .map(|e| format!(" (writing its input: {e})"))
                    .unwrap_or_default()
            )),
        }
    }
}

impl HostSet {
    /// The sets a `list:set` holds (none for another type).
    fn members(&self) -> Vec<String> {
        let kind = self.create.split_ascii_whitespace().nth(2);
        if kind != Some("list:set") {
            return Vec::new();
        }
        let prefix = format!("add {} ", self.name);
        self.adds
            .lines()
            .filter_map(|line| line.strip_prefix(&prefix)?.split_ascii_whitespace().next())
            .map(str::to_string)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_set_options_of_rules_only() {
        let save = b"*filter\n:cali-INPUT - [0:0]\n\
-A cali-INPUT -m set --match-set cali40all-ipam-pools src -j ACCEPT\n\
-A cali-INPUT -m set ! --match-set b dst,dst -j DROP\n\
-A cali-INPUT -j SET --add-set c src --exist\n\
-A cali-INPUT -j SET --del-set a src\n\
-A cali-INPUT -j SET --map-set m src --map-mark\n\
-A cali-INPUT -m comment --comment \"--match-set hidden src\" -j ACCEPT\n\
COMMIT\n";
        assert_eq!(named_in(save), ["a", "b", "c", "cali40all-ipam-pools", "m"]);
        assert!(named_in(b"*filter\n-A INPUT -j ACCEPT\nCOMMIT\n").is_empty());
    }

    #[test]
    fn a_list_set_names_its_members() {
        let list = HostSet {
            name: "l".into(),
            create: "create l list:set size 8\n".into(),
            adds: "add l a\nadd l b timeout 5\n".into(),
        };
        assert_eq!(list.members(), ["a", "b"]);
        let hash = HostSet {
            name: "h".into(),
            create: "create h hash:ip family inet\n".into(),
            adds: "add h 10.0.0.1\n".into(),
        };
        assert!(hash.members().is_empty());
    }
}
