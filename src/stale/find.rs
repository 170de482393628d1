//! Finding what a backend holds that the host no longer uses: per family,
//! the tables holding state (a rule, a user chain, a built-in chain policy
//! other than ACCEPT), with those chains.
//!
//! Legacy: only tables `/proc/net/ip*_tables_names` lists are read
//! (GET_INFO and GET_ENTRIES), so nothing is created. nf_tables: asked only
//! once files show it is in the kernel; only tables named like an iptables
//! table in families ip and ip6 are candidates, and a candidate counts as
//! iptables-nft's only when nothing in it is what iptables-nft never makes
//! (see [`nft_table_not_ours`]). Others (kube-proxy's, firewalld's, Docker's,
//! an operator's own) are left alone and said so; iptables-nft 1.8.9 marks
//! its tables in no way (no flag, no user data), so a native table built
//! exactly like one of iptables-nft's cannot be told from it.

pub use super::finding::{Finding, Held, LeftTable, StaleChain, StaleTable};
use super::save_tool;
use crate::family::Family;
use crate::kernel::legacy::{self, LegacyFamily, LegacyTableImage};
use crate::kernel::modules;
use crate::kernel::nft::{NftChain, NftSocket, NftTable, NftTableImage, NF_ACCEPT};
use crate::kernel::{BUILTIN_CHAINS, IPTABLES_TABLES};
use crate::mode::Mode;
use crate::save_text;

/// What `backend` holds in `family`.
pub fn find(backend: Mode, family: Family) -> Finding {
    find_saved(backend, family).0
}

/// What `backend` holds in `family`, with a save holding its stale tables
/// taken while reading them (for nft, whose notes said each is
/// iptables-nft's: [`save_tool::each`]; empty for legacy).
pub fn find_saved(backend: Mode, family: Family) -> (Finding, Vec<u8>) {
    let mut saved = Vec::new();
    let mut finding = Finding::empty(backend, family);
    let read = match backend {
        Mode::Legacy => find_legacy(&mut finding),
        Mode::Nft => find_nft(&mut finding, &mut saved),
    };
    if let Err(why) = read {
        finding.held = Held::Unknown(why);
        saved.clear();
    }
    (finding, saved)
}

fn find_legacy(finding: &mut Finding) -> Result<(), String> {
    let family = finding.family;
    let names = legacy::listed_tables(family)?.unwrap_or_default();
    let tables = match LegacyFamily::open_listed(family, names) {
        Ok(tables) => tables,
        // Refused (no CAP_NET_ADMIN and CAP_NET_RAW here, where the save
        // tool may have them as file capabilities): what the save tool shows.
        Err(e) => return find_legacy_saved(finding, &e),
    };
    for table in &tables.tables {
        let contents = tables
            .contents(table)
            .map_err(|e| format!("legacy {} {}: {e}", family.label(), table.name))?;
        add_legacy_contents(finding, &table.name, &contents);
    }
    Ok(())
}

/// What the legacy tables of `family` hold, from `images` (one per
/// [`IPTABLES_TABLES`], None for a table not listed): the removal's
/// judgement finds and compares one reading, not two. Its tables come in
/// the order the kernel lists them, as [`find`]'s do.
pub fn legacy_from_images(family: Family, images: &[Option<LegacyTableImage>]) -> Finding {
    let mut finding = Finding::empty(Mode::Legacy, family);
    let listed = match legacy::listed_tables(family) {
        Ok(listed) => listed.unwrap_or_default(),
        Err(why) => {
            finding.held = Held::Unknown(why);
            return finding;
        }
    };
    let imaged = IPTABLES_TABLES.iter().zip(images);
    for listed in listed {
        let Some((name, Some(image))) = imaged.clone().find(|(name, _)| **name == listed) else {
            continue;
        };
        match image.contents(family, name) {
            Ok(contents) => add_legacy_contents(&mut finding, name, &contents),
            Err(e) => {
                finding.held = Held::Unknown(format!("legacy {} {name}: {e}", family.label()));
                break;
            }
        }
    }
    finding
}

/// A legacy table's chains that hold state, if any does.
fn add_legacy_contents(finding: &mut Finding, table: &str, contents: &legacy::TableContents) {
    if !contents.holds_state() {
        return;
    }
    let chains = contents
        .chains
        .iter()
        .filter(|c| c.rules > 0 || c.policy != Some(legacy::Policy::Accept))
        .map(|c| StaleChain {
            name: c.name.clone(),
            builtin: c.policy.is_some(),
            policy: c.policy.map(|p| p.name()),
            rules: c.rules,
        })
        .collect();
    add_legacy_table(finding, table, chains);
}

/// The stale tables as `<family>-legacy-save` shows them, where the kernel
/// refused the wrapper's own reads with `refused`.
fn find_legacy_saved(finding: &mut Finding, refused: &std::io::Error) -> Result<(), String> {
    let family = finding.family;
    let saved = save_tool::legacy(family).map_err(|why| {
        format!(
            "legacy {} tables cannot be read: {refused}{}, and {}-legacy-save failed too: {why}",
            family.label(),
            crate::privilege::needed_when_refused(refused),
            family.program()
        )
    })?;
    for (table, chains) in parse_save(&saved.stdout) {
        let holding: Vec<StaleChain> = chains
            .into_iter()
            .filter(|c| c.rules > 0 || c.policy != Some("ACCEPT"))
            .collect();
        if !holding.is_empty() {
            add_legacy_table(finding, &table, holding);
        }
    }
    finding.read_by = Some(format!("{}-legacy-save", family.program()));
    Ok(())
}

fn add_legacy_table(finding: &mut Finding, table: &str, chains: Vec<StaleChain>) {
    match IPTABLES_TABLES.iter().find(|t| **t == table) {
        Some(&name) => finding.add_table(StaleTable {
            name,
            builtin_chains: builtin_chains_of(name),
            chains,
        }),
        None => finding.left.push(LeftTable {
            name: table.to_string(),
            why: "not one of the iptables tables this command knows how to empty".into(),
        }),
    }
}

/// The tables of a save, each with every chain it declares: its policy
/// (None for a user chain, declared with `-`) and how many rules it has.
fn parse_save(save: &[u8]) -> Vec<(String, Vec<StaleChain>)> {
    save_text::tables(save)
        .into_iter()
        .map(|(name, table)| {
            let chains = table
                .policies
                .iter()
                .map(|(chain, policy)| {
                    let policy = match policy.as_slice() {
                        b"ACCEPT" => Some("ACCEPT"),
                        b"DROP" => Some("DROP"),
                        b"-" => None,
                        _ => Some("other"),
                    };
                    StaleChain {
                        name: String::from_utf8_lossy(chain).into_owned(),
                        builtin: policy.is_some(),
                        policy,
                        rules: table.rules.iter().filter(|(of, _)| of == chain).count() as u64,
                    }
                })
                .collect();
            (String::from_utf8_lossy(&name).into_owned(), chains)
        })
        .collect()
}

fn find_nft(finding: &mut Finding, saved: &mut Vec<u8>) -> Result<(), String> {
    let family = finding.family;
    if !modules::nf_tables_readable()? {
        return Ok(());
    }
    let socket = NftSocket::open().map_err(|e| format!("nf_tables cannot be read: {e}"))?;
    let tables = socket.tables(family).map_err(|e| {
        format!(
            "nf_tables {} tables cannot be read: {e}{}",
            family.nft_name(),
            crate::privilege::needed_when_refused(&e)
        )
    })?;
    let set_tables = socket
        .set_tables(family)
        .map_err(|e| format!("nf_tables {} sets cannot be read: {e}", family.nft_name()))?;
    let mut candidates = Vec::new();
    for table in tables {
        let Some(&name) = IPTABLES_TABLES.iter().find(|t| **t == table.name) else {
            continue; // a native nftables table: never a candidate
        };
        let chains = socket
            .chains(family, name)
            .map_err(|e| format!("nf_tables table {} {name}: {e}", family.nft_name()))?;
        let holding: Vec<StaleChain> = chains
            .iter()
            .filter(|c| c.rules > 0 || c.base.as_ref().map(|base| base.policy) != Some(NF_ACCEPT))
            .map(|c| StaleChain {
                name: c.name.clone(),
                builtin: c.base.is_some(),
                policy: c
                    .base
                    .as_ref()
                    .map(|base| if base.policy == NF_ACCEPT { "ACCEPT" } else { "DROP" }),
                rules: c.rules,
            })
            .collect();
        if holding.is_empty() {
            continue;
        }
        let sets = set_tables.iter().filter(|t| *t == name).count();
        match nft_table_not_ours(&table, &chains, sets) {
            Some(why) => finding.left.push(LeftTable {
                name: name.to_string(),
                why,
            }),
            None => candidates.push((name, holding)),
        }
    }
    let names: Vec<&str> = candidates.iter().map(|(name, _)| *name).collect();
    if names.is_empty() {
        return Ok(());
    }
    let (save, unsaved) = save_tool::each(Mode::Nft, family, &names)?;
    let notes = incompatibility_notes(&save);
    for (name, holding) in candidates {
        if let Some(note) = notes.iter().find(|n| n.contains(&format!("`{name}'"))) {
            finding.left.push(LeftTable {
                name: name.to_string(),
                why: format!("iptables-nft-save says: {}", note.trim_start_matches("# ")),
            });
            continue;
        }
        if let Some((_, why)) = unsaved.iter().find(|(table, _)| *table == name) {
            finding.add_unsaved(LeftTable {
                name: name.to_string(),
                why: format!("iptables-nft-save cannot save it, so it cannot be backed up: {why}"),
            });
        }
        finding.add_table(StaleTable {
            name,
            builtin_chains: builtin_chains_of(name),
            chains: holding,
        });
    }
    *saved = save.stdout;
    Ok(())
}

/// Why a table named like an iptables table is not iptables-nft's alone,
/// or None when nothing in it says so: no table flags or user data (which
/// iptables-nft never sets), nothing but chains (no sets, maps, objects or
/// flowtables; `sets` counts its sets, anonymous ones too), base chains only among the table's built-in ones with the
/// hook, type and priority iptables-nft gives them, and a counter in every
/// rule (iptables-nft puts one in each).
pub fn nft_table_not_ours(table: &NftTable, chains: &[NftChain], sets: usize) -> Option<String> {
    if table.flags != 0 {
        return Some(format!("table flags {:#x}, which iptables-nft never sets", table.flags));
    }
    if table.has_userdata {
        return Some("the table carries user data (an nft comment), which iptables-nft never writes".into());
    }
    if sets > 0 {
        return Some(format!(
            "the table holds {sets} set{} (named or anonymous, as `{{ ... }}` in a rule makes), which iptables-nft never makes",
            if sets == 1 { "" } else { "s" }
        ));
    }
    if table.use_count as usize != chains.len() {
        return Some(format!(
            "the table counts {} objects for its {} chains: it holds sets, maps, stateful objects or flowtables, which iptables-nft never makes",
            table.use_count,
            chains.len()
        ));
    }
    for chain in chains {
        if let Some(base) = &chain.base {
            let expected = iptables_nft_base_chain(&table.name, &chain.name);
            let matches = expected.is_some_and(|(hook, priority, chain_type)| {
                base.hook == hook && base.priority == priority && base.chain_type == chain_type
            });
            if !matches {
                return Some(format!(
                    "base chain {:?} (hook {}, priority {}, type {}) is not one iptables-nft makes",
                    chain.name, base.hook, base.priority, base.chain_type
                ));
            }
        }
        if chain.rules_without_counter > 0 {
            return Some(format!(
                "chain {:?} has {} without a counter, and iptables-nft gives every rule one",
                chain.name,
                if chain.rules_without_counter == 1 {
                    "1 rule".to_string()
                } else {
                    format!("{} rules", chain.rules_without_counter)
                }
            ));
        }
    }
    None
}

/// Per iptables table in nf_tables' `family` that is iptables-nft's own
/// (see [`nft_table_not_ours`]): its chains that are iptables-nft's base
/// chains, with the hook, priority and type iptables-nft gives them. Only
/// these filter packets the way the save prints them; a regular chain
/// named `INPUT` is printed as `-A INPUT` too. An error keeps its kind
/// ([`crate::kernel::nft::DumpInterrupted`]: read again).
pub fn nft_own_base_chains(socket: &NftSocket, family: Family) -> std::io::Result<Vec<(&'static str, Vec<String>)>> {
    let tables = socket.tables(family)?;
    let set_tables = socket.set_tables(family)?;
    let mut own = Vec::new();
    for table in tables {
        let Some(&name) = IPTABLES_TABLES.iter().find(|t| **t == table.name) else {
            continue;
        };
        let chains = socket.chains(family, name)?;
        let sets = set_tables.iter().filter(|t| *t == name).count();
        own.extend(own_base_chains(name, &table, &chains, sets).map(|base| (name, base)));
    }
    Ok(own)
}

/// [`nft_own_base_chains`] from images of the iptables tables of
/// `family` (a table that does not exist has an image too), read once
/// for this and for what they hold.
pub fn nft_own_base_chains_of<'a>(
    family: Family,
    images: impl IntoIterator<Item = (&'static str, &'a NftTableImage)>,
) -> Vec<(&'static str, Vec<String>)> {
    images
        .into_iter()
        .filter_map(|(name, image)| {
            let table = image.nft_table(family, name)?;
            let base = own_base_chains(name, &table, &image.nft_chains(), image.set_count())?;
            Some((name, base))
        })
        .collect()
}

/// The iptables-nft base chains of table `name`, if it is iptables-nft's
/// own ([`nft_table_not_ours`]).
fn own_base_chains(name: &str, table: &NftTable, chains: &[NftChain], sets: usize) -> Option<Vec<String>> {
    if nft_table_not_ours(table, chains, sets).is_some() {
        return None;
    }
    let base = chains
        .iter()
        .filter(|c| {
            c.base.as_ref().is_some_and(|base| {
                iptables_nft_base_chain(name, &c.name).is_some_and(|(hook, priority, chain_type)| {
                    base.hook == hook && base.priority == priority && base.chain_type == chain_type
                })
            })
        })
        .map(|c| c.name.clone())
        .collect();
    Some(base)
}

/// The hook number, priority and type iptables-nft gives a built-in chain.
pub(super) fn iptables_nft_base_chain(table: &str, chain: &str) -> Option<(u32, i32, &'static str)> {
    let hook = legacy::HOOK_CHAINS.iter().position(|c| *c == chain)? as u32;
    let (priority, chain_type) = match (table, chain) {
        ("raw", "PREROUTING" | "OUTPUT") => (-300, "filter"),
        ("mangle", "OUTPUT") => (-150, "route"),
        ("mangle", _) => (-150, "filter"),
        ("filter", "INPUT" | "FORWARD" | "OUTPUT") => (0, "filter"),
        // NF_IP_PRI_SECURITY is 50, but iptables-nft gives 150.
        ("security", "INPUT" | "FORWARD" | "OUTPUT") => (150, "filter"),
        ("nat", "PREROUTING" | "OUTPUT") => (-100, "nat"),
        ("nat", "INPUT" | "POSTROUTING") => (100, "nat"),
        _ => return None,
    };
    Some((hook, priority, chain_type))
}

pub(super) fn builtin_chains_of(table: &str) -> Vec<&'static str> {
    BUILTIN_CHAINS
        .iter()
        .find(|(name, _)| *name == table)
        .map(|(_, chains)| chains.to_vec())
        .unwrap_or_default()
}

/// The `# Table ... incompatible` notes of an `iptables-nft-save` (to
/// stdout or stderr, depending on the version).
fn incompatibility_notes(output: &save_tool::SaveOutput) -> Vec<String> {
    output
        .stdout
        .split(|&b| b == b'\n')
        .chain(output.stderr.split(|&b| b == b'\n'))
        .map(String::from_utf8_lossy)
        .filter(|line| line.starts_with("# Table") && line.contains("incompatible"))
        .map(|line| line.into_owned())
        .collect()
}
