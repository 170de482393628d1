//! Running a backend's save tool, and cutting a save to tables.
//!
//! Legacy's is run without `-t`, which would look the table up and create
//! it (`iptables-legacy-save` then reads only the list of existing
//! tables). iptables-nft's too, and where that fails, again with `-t
//! TABLE` for each table a caller needs, each one the kernel holds: a
//! native table named and placed like an iptables table whose rule
//! `iptables-nft-save` cannot parse (a range of an IP header field: 1.8.11
//! exits 3, "range with unknown payload base") makes the whole save fail,
//! saving no table at all, while `-t` of another table still succeeds.
//! Each `-t` save costs about what the whole one does (1.8.9 reads the
//! whole ruleset for it), so it is only the fallback.

use crate::backend;
use crate::command::WrappedCommand;
use crate::escape::Shown as _;
use crate::family::Family;
use crate::kernel::modules;
use crate::kernel::nft::NftSocket;
use crate::mode::Mode;
use std::cell::RefCell;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// What a save tool printed, byte for byte.
#[derive(Clone)]
pub struct SaveOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// `<family>-legacy-save`: every table; an error unless it exits 0.
pub fn legacy(family: Family) -> Result<SaveOutput, String> {
    run(Mode::Legacy, family, None)
}

/// The save of `tables` of `family` (each one the kernel holds), as
/// [`each`] takes it; an error when any of them cannot be saved.
pub fn tables(backend: Mode, family: Family, tables: &[&str]) -> Result<SaveOutput, String> {
    let (save, unsaved) = each(backend, family, tables)?;
    match unsaved.into_iter().next() {
        Some((_, why)) => Err(why),
        None => Ok(save),
    }
}

/// A save, and the tables it could not save, each with why.
pub type Saved<'a> = (SaveOutput, Vec<(&'a str, String)>);

/// A save holding `tables` of `family` (each one the kernel holds; it may
/// hold others too), and each of them that cannot be saved, with why. For
/// nft, the whole save; where that fails, one `<family>-nft-save -t TABLE`
/// per table (which creates no table, not even a missing one, in 1.8.7,
/// 1.8.9 and 1.8.11), concatenated. For legacy, the whole save (an error if it fails).
pub fn each<'a>(backend: Mode, family: Family, tables: &[&'a str]) -> Result<Saved<'a>, String> {
    let mut all = SaveOutput {
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    if backend == Mode::Nft && tables.is_empty() {
        return Ok((all, Vec::new()));
    }
    let whole = match backend {
        Mode::Legacy => run(backend, family, None),
        Mode::Nft => whole_nft(family),
    };
    if backend == Mode::Legacy || whole.is_ok() {
        return whole.map(|save| (save, Vec::new()));
    }
    let mut unsaved = Vec::new();
    for table in tables {
        match run(backend, family, Some(table)) {
            Ok(one) => {
                all.stdout.extend_from_slice(&one.stdout);
                all.stderr.extend_from_slice(&one.stderr);
            }
            Err(why) => unsaved.push((*table, why)),
        }
    }
    Ok((all, unsaved))
}

thread_local! {
    /// The whole nft saves taken by this thread: per network namespace
    /// (its cookie) and family, the last one and the generation it was
    /// taken at.
    static WHOLE_NFT_SAVES: RefCell<Vec<(u64, Family, u32, SaveOutput)>> = const { RefCell::new(Vec::new()) };
}

/// The whole `<family>-nft-save`; taken again only when the nf_tables
/// generation moved since this thread last took it in this namespace: the
/// same ruleset saves the same (but for base chains' counters, which no
/// judgement reads). Showing and removing ask for it once for the family's
/// tables and once to prove the live save; at 100,000 rules a family, each
/// save costs seconds. A save during which the generation moved is not kept.
fn whole_nft(family: Family) -> Result<SaveOutput, String> {
    let readable = modules::nf_tables_readable().unwrap_or(false);
    let socket = readable.then(|| NftSocket::open().ok()).flatten();
    let at = || {
        let socket = socket.as_ref()?;
        Some((socket.netns_cookie().ok()?, socket.generation().ok()?))
    };
    let before = at();
    if let Some((cookie, generation)) = before {
        let kept = WHOLE_NFT_SAVES.with_borrow(|saves| {
            saves
                .iter()
                .find(|(c, f, g, _)| (*c, *f, *g) == (cookie, family, generation))
                .map(|(_, _, _, save)| save.clone())
        });
        if let Some(save) = kept {
            return Ok(save);
        }
    }
    let save = run(Mode::Nft, family, None)?;
    if let Some((cookie, generation)) = before.filter(|&taken| at() == Some(taken)) {
        WHOLE_NFT_SAVES.with_borrow_mut(|saves| {
            saves.retain(|(c, f, _, _)| (*c, *f) != (cookie, family));
            saves.push((cookie, family, generation, save.clone()));
        });
    }
    Ok(save)
}

fn run(backend: Mode, family: Family, table: Option<&str>) -> Result<SaveOutput, String> {
    let command = WrappedCommand::save_tool(family);
    let tool = backend::locate(&command, backend).map_err(|e| e.to_string())?;
    let output = Command::new(&tool.path)
        .arg0(command.name)
        .args(table.map(|t| ["-t", t]).iter().flatten())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", tool.path.shown()))?;
    if !output.status.success() {
        return Err(format!(
            "{} ({}-{backend}-save{}) {}: {}",
            tool.path.shown(),
            family.program(),
            table.map(|t| format!(" -t {t}")).unwrap_or_default(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(SaveOutput {
        stdout: output.stdout,
        stderr: output.stderr,
    })
}
