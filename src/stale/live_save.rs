//! What the host's own backend holds, read so that it can be trusted: its
//! save, kept per table only where that save restores exactly what the
//! kernel holds (proven as a backup is). The opening check
//! ([`super::opening`]) looks there for the stale rules' twins.

use super::find;
use super::proof;
use super::save_tool;
use crate::family::Family;
use crate::kernel::legacy;
use crate::kernel::modules;
use crate::kernel::nft::{NftSocket, NftTableImage};
use crate::kernel::IPTABLES_TABLES;
use crate::mode::Mode;
use crate::save_text;
use std::path::Path;

/// Readings of the live tables before they are given up as changing: a
/// live writer commits in bursts (kube-proxy's restores), and the proof
/// needs a save and a reading of the same state.
const LIVE_TRIES: u32 = 20;
/// The wait before the next reading, times the readings so far (at most
/// 3.8 s in all).
const LIVE_BACKOFF: std::time::Duration = std::time::Duration::from_millis(20);

/// The live backend's save of a family, cut to the tables it restores
/// exactly: only those say what the kernel enforces.
#[derive(Debug, Default)]
pub struct LiveSave {
    /// The sections of the tables whose save restores exactly.
    pub exact: Vec<u8>,
    /// Per live table whose save does not: its name and why.
    pub inexact: Vec<(String, String)>,
    /// For nft: iptables-nft's own tables, each with its base chains.
    pub own: Option<Vec<(&'static str, Vec<String>)>>,
}

/// The live backend's save of every iptables table of `family` (for nft,
/// of iptables-nft's own), each table kept only where its save, restored
/// with `live`'s own tool into a scratch namespace, reads back as the live
/// table does (as a backup is proven: `proof::prove_legacy`,
/// `proof::prove_nft`). A save can print what the kernel does not hold:
/// `iptables-nft-save` prints the last of two `tcp dport` matches alone,
/// so a rule that matches no packet would read as one that drops port
/// 8080. Read without creating anything: empty when legacy lists no table,
/// or nf_tables is not in the kernel. `private_lock` is the restore's
/// xtables lock.
pub fn proven_live_save(live: Mode, family: Family, private_lock: &Path) -> Result<LiveSave, String> {
    for reading in 0..LIVE_TRIES {
        std::thread::sleep(LIVE_BACKOFF * reading);
        let attempt = match live {
            Mode::Legacy => proven_legacy(family, private_lock)?,
            Mode::Nft => proven_nft(family, private_lock)?,
        };
        if let Some(save) = attempt {
            return Ok(save);
        }
    }
    Err(format!(
        "its tables changed while being read, in each of {LIVE_TRIES} readings (something writes to them without a pause)"
    ))
}

/// The live save of `names` kept where `verdicts` say it restores exactly.
fn kept(save: &[u8], names: &[&str], verdicts: Vec<Result<(), String>>) -> LiveSave {
    let mut live = LiveSave::default();
    let mut exact = Vec::new();
    for (name, verdict) in names.iter().zip(verdicts) {
        match verdict {
            Ok(()) => exact.push(*name),
            Err(why) => live.inexact.push((name.to_string(), why)),
        }
    }
    live.exact = save_text::sections(save, &exact);
    live
}

/// One reading of the live legacy tables (None: they changed meanwhile).
fn proven_legacy(family: Family, private_lock: &Path) -> Result<Option<LiveSave>, String> {
    let listed = legacy::listed_tables(family)?.unwrap_or_default();
    // Every table, not only those to be emptied: whether the live backend
    // filters anything at all decides what counts as an item.
    let names: Vec<&str> = IPTABLES_TABLES
        .iter()
        .copied()
        .filter(|t| listed.iter().any(|l| l == t))
        .collect();
    if names.is_empty() {
        return Ok(Some(LiveSave::default()));
    }
    let images = proof::legacy_images(family, &names)?;
    let save = save_tool::legacy(family)?.stdout;
    if proof::legacy_images(family, &names)? != images {
        return Ok(None);
    }
    proof::scratch_namespace_available()?;
    let (_, verdicts) = proof::prove_legacy("its save", family, &save, &names, &images, private_lock)?;
    Ok(Some(kept(&save, &names, verdicts)))
}

/// One reading of the live nf_tables tables, all at one generation (None:
/// it moved meanwhile).
fn proven_nft(family: Family, private_lock: &Path) -> Result<Option<LiveSave>, String> {
    if !modules::nf_tables_readable()? {
        return Ok(Some(LiveSave::default()));
    }
    let socket = NftSocket::open().map_err(|e| format!("nf_tables cannot be read: {e}"))?;
    let generation = socket
        .generation()
        .map_err(|e| format!("nf_tables cannot be read: {e}"))?;
    // Every iptables table read whole once: which are iptables-nft's own,
    // and the images the save is proven against.
    let Some((mut read, at)) = proof::nft_images(&socket, family, &IPTABLES_TABLES)? else {
        return Ok(None);
    };
    if at != generation {
        return Ok(None);
    }
    let own = find::nft_own_base_chains_of(family, IPTABLES_TABLES.iter().copied().zip(&read));
    // A table iptables-nft-save cannot read (1.8.11 exits 3 on a rule it
    // cannot parse) is not counted; the others are.
    let all: Vec<&str> = own.iter().map(|(name, _)| *name).collect();
    let (save, unsaved) = save_tool::each(Mode::Nft, family, &all)?;
    let names: Vec<&str> = all
        .into_iter()
        .filter(|name| !unsaved.iter().any(|(table, _)| table == name))
        .collect();
    let unsaved: Vec<(String, String)> = unsaved
        .into_iter()
        .map(|(name, why)| (name.to_string(), format!("iptables-nft-save cannot save it: {why}")))
        .collect();
    if names.is_empty() {
        return Ok(Some(LiveSave {
            inexact: unsaved,
            own: Some(own),
            ..LiveSave::default()
        }));
    }
    // The save's generation is the images': nothing committed since.
    let now = socket
        .generation()
        .map_err(|e| format!("nf_tables cannot be read: {e}"))?;
    if now != generation {
        return Ok(None);
    }
    let images: Vec<NftTableImage> = names
        .iter()
        .map(|name| {
            let at = IPTABLES_TABLES
                .iter()
                .position(|t| t == name)
                .expect("an iptables table");
            std::mem::take(&mut read[at])
        })
        .collect();
    proof::scratch_namespace_available()?;
    let (_, verdicts) = proof::prove_nft("its save", family, &save.stdout, &names, &images, private_lock)?;
    let mut live = kept(&save.stdout, &names, verdicts);
    live.inexact.extend(unsaved);
    live.own = Some(own);
    Ok(Some(live))
}
