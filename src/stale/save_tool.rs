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
use crate::mode::Mode;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// What a save tool printed, byte for byte.
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
    let whole = run(backend, family, None);
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
