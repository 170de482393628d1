//! A grammar of realistic iptables states for the packet test of
//! `stale --remove`: what a stale backend and a live backend hold, per
//! family, built from motifs (a firewall's accept list before a block, a
//! mark written in `mangle` and read in `filter`, a DNAT and a filter
//! behind it, ...), and what the node holds beside them (ipsets, policy
//! routing rules). It decides which rules a state holds and how the live
//! backend copies the stale one: whole, in part (some rules kept, some
//! dropped, some motifs made again with other addresses or ports), or not
//! at all.

use super::netns_topology::Family;

/// A small seeded generator (splitmix64): the same seed, the same state.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with `percent` chances in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Backend {
    Legacy,
    Nft,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Legacy => "legacy",
            Backend::Nft => "nft",
        }
    }

    pub fn other(self) -> Backend {
        match self {
            Backend::Legacy => Backend::Nft,
            Backend::Nft => Backend::Legacy,
        }
    }

    /// `iptables-legacy`, `ip6tables-nft`, ... with `suffix` (`-save`,
    /// `-restore` or nothing).
    pub fn tool(self, family: Family, suffix: &str) -> String {
        format!("{}-{}{suffix}", family.command(), self.name())
    }
}

/// One line of a restore file, with the table it belongs to.
#[derive(Clone, PartialEq, Debug)]
pub enum Line {
    /// A built-in chain's policy other than ACCEPT.
    Policy {
        table: &'static str,
        chain: &'static str,
        policy: &'static str,
    },
    /// A rule; `-A chain rule`. A user chain is declared where a rule is
    /// in it or jumps or goes to it.
    Rule {
        table: &'static str,
        chain: String,
        rule: String,
    },
    /// A user chain declared whether or not a rule is in it (`-N`).
    Chain { table: &'static str, chain: String },
}

impl Line {
    fn table(&self) -> &'static str {
        match self {
            Line::Policy { table, .. } | Line::Rule { table, .. } | Line::Chain { table, .. } => table,
        }
    }

    /// The (table, chain) pairs this line writes into or reaches.
    fn chains(&self) -> Vec<(&'static str, String)> {
        match self {
            Line::Policy { table, chain, .. } => vec![(table, chain.to_string())],
            Line::Chain { table, chain } => vec![(table, chain.clone())],
            Line::Rule { table, chain, rule } => {
                let mut chains = vec![(*table, chain.clone())];
                chains.extend(jump_target(rule).map(|target| (*table, target.to_string())));
                chains
            }
        }
    }
}

fn rule(table: &'static str, chain: &str, rule: impl Into<String>) -> Line {
    Line::Rule {
        table,
        chain: chain.to_string(),
        rule: rule.into(),
    }
}

/// The user chain a rule jumps or goes to, if any.
fn jump_target(rule: &str) -> Option<&str> {
    let mut words = rule.split_whitespace();
    while let Some(word) = words.next() {
        if word == "-j" || word == "-g" {
            let target = words.next()?;
            let user = target.chars().any(|c| c.is_ascii_lowercase() || c == '-') || target.starts_with("DOCKER");
            return user.then_some(target);
        }
    }
    None
}

pub const TABLES: [(&str, &[&str]); 5] = [
    ("raw", &["PREROUTING", "OUTPUT"]),
    ("mangle", &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]),
    ("nat", &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"]),
    ("filter", &["INPUT", "FORWARD", "OUTPUT"]),
    ("security", &["INPUT", "FORWARD", "OUTPUT"]),
];

/// A family's lines as one restore file (every table they use, each
/// built-in chain declared with its policy).
pub fn restore_text(lines: &[Line]) -> String {
    let mut text = String::new();
    for (table, builtins) in TABLES {
        let mine: Vec<&Line> = lines.iter().filter(|l| l.table() == table).collect();
        if mine.is_empty() {
            continue;
        }
        text += &format!("*{table}\n");
        for builtin in builtins {
            let policy = mine
                .iter()
                .find_map(|l| match l {
                    Line::Policy { chain, policy, .. } if chain == builtin => Some(*policy),
                    _ => None,
                })
                .unwrap_or("ACCEPT");
            text += &format!(":{builtin} {policy} [0:0]\n");
        }
        let mut users: Vec<String> = Vec::new();
        for (_, chain) in mine.iter().flat_map(|l| l.chains()) {
            if !builtins.contains(&chain.as_str()) && !users.contains(&chain) {
                users.push(chain);
            }
        }
        for user in users {
            text += &format!(":{user} - [0:0]\n");
        }
        for line in mine {
            if let Line::Rule { chain, rule, .. } = line {
                text += &format!("-A {chain} {rule}\n");
            }
        }
        text += "COMMIT\n";
    }
    text
}

/// What the node holds beside the backends: ipsets, policy routing and
/// native nftables tables.
#[derive(Clone, Default, Debug)]
pub struct NodeSetup {
    /// Shell commands, run once each, in order, before either backend is
    /// written.
    pub commands: Vec<String>,
    /// Shell commands run after the stale backend is written and before
    /// the live one: a hook registered then runs after the live copy's
    /// and before the stale copy's at the same priority (the kernel puts
    /// a new hook before those of its priority).
    pub between: Vec<String>,
}

impl NodeSetup {
    pub fn add(&mut self, command: String) {
        if !self.commands.contains(&command) {
            self.commands.push(command);
        }
    }

    pub fn add_between(&mut self, command: String) {
        if !self.between.contains(&command) {
            self.between.push(command);
        }
    }
}

/// How the live backend copies the stale one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LiveCopy {
    /// Every stale line, in order, and only additions in chains the stale
    /// backend does not touch: removing the stale backend changes nothing.
    Whole,
    /// Some stale lines, some motifs made again with other parameters,
    /// some of the live backend's own.
    Partial,
    /// Every stale line but some of the filter table's `ACCEPT` rules: the
    /// stale copy accepts more than the live one, blocks nothing more.
    Loosened,
    /// Motifs of its own.
    Independent,
}

/// One generated state: both backends' lines per family and the node's.
#[derive(Clone, Debug)]
pub struct State {
    pub seed: u64,
    pub stale_backend: Backend,
    pub copy: LiveCopy,
    /// (family, stale lines, live lines).
    pub families: Vec<(Family, Vec<Line>, Vec<Line>)>,
    pub node: NodeSetup,
}

/// A motif: one coherent piece of a firewall, as a writer or an admin
/// would write it, its shape (chains, ports, verdicts) drawn from the
/// first generator, its details (addresses, marks, set members) from the
/// second. Made again with other details, it is a similar piece: the same
/// block behind other accepts.
type Motif = fn(&mut Rng, &mut Rng, Family, &mut NodeSetup) -> Vec<Line>;

/// Each motif with its weight (how often it is drawn): the accept list,
/// where similar copies differ most subtly, most often.
pub const MOTIFS: [(&str, Motif, usize); 17] = [
    ("accept list before a block", super::rule_motifs::accept_list, 3),
    ("conntrack states", super::rule_motifs::conntrack_states, 1),
    ("mark read by a filter", super::rule_motifs::mark_filter, 1),
    ("connmark", super::rule_motifs::connmark, 1),
    ("notrack", super::rule_motifs::notrack, 1),
    ("dnat", super::rule_motifs::dnat, 1),
    ("ttl", super::rule_motifs::ttl, 1),
    ("dscp and tos", super::rule_motifs::dscp, 1),
    ("ipset", super::rule_motifs::ipset, 1),
    ("user chain", super::rule_motifs::user_chain, 1),
    ("security table", super::rule_motifs::security, 1),
    ("fwmark routing", super::rule_motifs::fwmark_route, 1),
    ("harmless", super::rule_motifs::harmless, 1),
    ("docker-like writer", super::rule_motifs::docker, 1),
    ("calico-like writer", super::rule_motifs::calico, 1),
    ("native chain between the copies", super::rule_motifs::native_between, 1),
    ("a block behind a stateful match", super::rule_motifs::stateful_block, 1),
];

/// `count` motifs drawn by weight: (which, its shape's seed, its lines).
fn motifs(rng: &mut Rng, family: Family, node: &mut NodeSetup, count: usize) -> Vec<(usize, u64, Vec<Line>)> {
    let total: usize = MOTIFS.iter().map(|m| m.2).sum();
    (0..count)
        .map(|_| {
            let mut draw = rng.below(total);
            let kind = MOTIFS
                .iter()
                .position(|m| {
                    let here = draw < m.2;
                    draw = draw.saturating_sub(m.2);
                    here
                })
                .unwrap();
            let seed = rng.next();
            (kind, seed, make(kind, seed, seed, family, node))
        })
        .collect()
}

fn make(kind: usize, shape: u64, detail: u64, family: Family, node: &mut NodeSetup) -> Vec<Line> {
    (MOTIFS[kind].1)(&mut Rng::new(shape), &mut Rng::new(detail ^ 0xd37a11), family, node)
}

fn touched(lines: &[Line]) -> Vec<(&'static str, String)> {
    lines.iter().flat_map(|l| l.chains()).collect()
}

impl State {
    pub fn generate(seed: u64) -> State {
        let mut rng = Rng::new(seed);
        let stale_backend = if rng.chance(75) { Backend::Legacy } else { Backend::Nft };
        let copy = match rng.below(100) {
            0..=34 => LiveCopy::Whole,
            35..=64 => LiveCopy::Partial,
            65..=79 => LiveCopy::Loosened,
            _ => LiveCopy::Independent,
        };
        let mut node = NodeSetup::default();
        let mut families = Vec::new();
        for family in [Family::V4, Family::V6] {
            let count = rng.below(4);
            let stale_motifs = motifs(&mut rng, family, &mut node, count);
            let stale: Vec<Line> = stale_motifs.iter().flat_map(|m| m.2.clone()).collect();
            let live = match copy {
                LiveCopy::Whole => {
                    let extra_count = rng.below(2);
                    let mut live = stale.clone();
                    let stale_chains = touched(&stale);
                    for (_, _, extra) in motifs(&mut rng, family, &mut node, extra_count) {
                        if touched(&extra).iter().all(|c| !stale_chains.contains(c)) {
                            live.extend(extra);
                        }
                    }
                    live
                }
                LiveCopy::Partial => {
                    let mut live = Vec::new();
                    for (kind, seed, lines) in &stale_motifs {
                        match rng.below(8) {
                            0 | 1 => live.extend(lines.iter().filter(|_| rng.chance(50)).cloned()),
                            2 | 3 => live.extend(make(*kind, *seed, rng.next(), family, &mut node)),
                            4 => live.extend(make(*kind, rng.next(), rng.next(), family, &mut node)),
                            _ => live.extend(lines.iter().cloned()),
                        }
                    }
                    let own_count = rng.below(2);
                    let own: Vec<Line> = motifs(&mut rng, family, &mut node, own_count)
                        .into_iter()
                        .flat_map(|m| m.2)
                        .collect();
                    if rng.chance(50) {
                        live.extend(own);
                        live
                    } else {
                        own.into_iter().chain(live).collect()
                    }
                }
                LiveCopy::Loosened => stale
                    .iter()
                    .filter(|line| {
                        let accepts =
                            matches!(line, Line::Rule { table: "filter", rule, .. } if rule.ends_with("-j ACCEPT"));
                        !(accepts && rng.chance(50))
                    })
                    .cloned()
                    .collect(),
                LiveCopy::Independent => {
                    let own_count = 1 + rng.below(3);
                    motifs(&mut rng, family, &mut node, own_count)
                        .into_iter()
                        .flat_map(|m| m.2)
                        .collect()
                }
            };
            families.push((family, stale, live));
        }
        State {
            seed,
            stale_backend,
            copy,
            families,
            node,
        }
    }

    /// A hand-written state (a fixed case): `stale` and `live` per family.
    pub fn fixed(
        stale_backend: Backend,
        copy: LiveCopy,
        families: Vec<(Family, Vec<Line>, Vec<Line>)>,
        node: &[&str],
    ) -> State {
        State {
            seed: 0,
            stale_backend,
            copy,
            families,
            node: NodeSetup {
                commands: node.iter().map(|c| c.to_string()).collect(),
                between: Vec::new(),
            },
        }
    }

    /// True when neither backend holds anything.
    pub fn is_empty(&self) -> bool {
        self.families
            .iter()
            .all(|(_, stale, live)| stale.is_empty() && live.is_empty())
    }
}

/// The lines of `table` written as `CHAIN RULE...`, one per line of
/// `text` (`INPUT -s 10.1.0.5 -j ACCEPT`); a line `:CHAIN POLICY` is a
/// policy, a line `-N CHAIN` a user chain.
pub fn lines(table: &'static str, text: &str) -> Vec<Line> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| match l.strip_prefix(':') {
            None if l.starts_with("-N ") => Line::Chain {
                table,
                chain: l[3..].to_string(),
            },
            Some(policy) => {
                let (chain, policy) = policy.split_once(' ').expect(":CHAIN POLICY");
                let builtin = TABLES
                    .iter()
                    .flat_map(|(_, chains)| chains.iter())
                    .find(|c| **c == chain)
                    .expect("a built-in chain");
                let policy = ["DROP", "ACCEPT"]
                    .into_iter()
                    .find(|p| *p == policy)
                    .expect("DROP or ACCEPT");
                Line::Policy {
                    table,
                    chain: builtin,
                    policy,
                }
            }
            None => {
                let (chain, words) = l.split_once(' ').expect("CHAIN RULE");
                rule(table, chain, words)
            }
        })
        .collect()
}
