//! Removing what is stale, only when asked (`stale --remove`): a backup
//! first, then each stale table replaced by an empty one, then a fresh read.
//!
//! The backup is the stale backend's full save (its own save tool, never
//! with `-t`), one file per family, `iptables-<backend>.rules` and
//! `ip6tables-<backend>.rules`, each written to a temporary file and linked
//! into place (mode 0600; an existing file is never replaced), into a new
//! directory named by the time under the runtime directory, or the
//! `--backup-dir` given. A backup that cannot be written, or that lacks a
//! table to be emptied, stops the removal before anything changes.
//!
//! Each stale table is then restored as an empty table (its built-in chains
//! with ACCEPT policies, no user chain, no rule) with the stale backend's own
//! restore tool, without `--noflush`: one commit per table (legacy's
//! `SO_SET_REPLACE` under the xtables lock, `-w`; nft's one transaction).
//! Only tables just read are named, so no legacy table is created.
//! Legacy tables stay registered (only the module's unloading or the
//! namespace's end removes them); empty, they weigh nothing anywhere.

use super::find::{self, Finding};
use super::show::{self, print_out};
use super::{HostBackend, Options, EXIT_NOTHING_STALE, EXIT_STALE};
use crate::backend;
use crate::command::WrappedCommand;
use crate::escape::{printable, string};
use crate::family::Family;
use crate::kernel::legacy;
use crate::kernel::modules::{self, Presence};
use crate::mode::Mode;
use crate::run_dir::RunDir;
use crate::standard_fds::say;
use crate::warnings_record::utc_time;
use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, mkdirat, Mode as FileMode, SFlag};
use nix::unistd::{fsync, linkat, unlinkat, UnlinkatFlags};
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// How long legacy's restore waits for the xtables lock (seconds).
const LOCK_WAIT_SECONDS: &str = "10";

/// The backup directory, open.
struct BackupDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// Runs the removal; exit 0 when nothing stale remains.
pub fn run(hosts: &[HostBackend], options: &Options) -> i32 {
    let before: Vec<Finding> = hosts.iter().map(|h| find::find(h.stale(), h.family)).collect();
    if let Some(unknown) = before.iter().find_map(|f| f.unknown.as_ref()) {
        say(&format!("stale --remove: {}; nothing was changed", printable(unknown)));
        return EXIT_STALE;
    }
    if before.iter().all(|f| f.tables.is_empty()) {
        let out = if options.json {
            format!(
                "{}\n",
                show::json(hosts, &before, &[], Some(removal_json(None, &[], &[], &[])))
            )
        } else {
            format!(
                "{}nothing stale: nothing removed, no backup written\n",
                show::text(hosts, &before, &[])
            )
        };
        return print_out(&out).err().unwrap_or(EXIT_NOTHING_STALE);
    }
    let backup = match open_backup_dir(options.backup_dir.as_deref()) {
        Ok(dir) => dir,
        Err(why) => {
            say(&format!(
                "stale --remove: backup: {}; nothing was changed",
                printable(&why)
            ));
            return EXIT_STALE;
        }
    };
    let files = match write_backup(&backup, &before) {
        Ok(files) => files,
        Err(why) => {
            say(&format!(
                "stale --remove: backup into {}: {}; nothing was changed",
                backup.path.display(),
                printable(&why)
            ));
            return EXIT_STALE;
        }
    };
    let mut emptied = Vec::new();
    let mut failed = Vec::new();
    for finding in &before {
        for table in &finding.tables {
            let what = (finding.backend, finding.family, table.name);
            match restore_empty(finding.backend, finding.family, table.name, &table.builtin_chains) {
                Ok(()) => emptied.push((what, show::table_summary(table))),
                Err(why) => failed.push((what, why)),
            }
        }
    }
    let after: Vec<Finding> = hosts.iter().map(|h| find::find(h.stale(), h.family)).collect();
    let status = if failed.is_empty() {
        show::status(&after)
    } else {
        EXIT_STALE
    };
    let out = if options.json {
        let removal = removal_json(Some(&backup.path), &files, &emptied, &failed);
        format!("{}\n", show::json(hosts, &after, &[], Some(removal)))
    } else {
        let mut out = format!("backup: {}\n", backup.path.display());
        for (file, tool) in &files {
            let _ = writeln!(out, "  {} (undo: {tool} < {})", file.display(), file.display());
        }
        for ((backend, family, table), summary) in &emptied {
            let _ = writeln!(out, "emptied: {backend} {} {table} (held {summary})", family.label());
        }
        for ((backend, family, table), why) in &failed {
            let _ = writeln!(out, "FAILED: {backend} {} {table}: {}", family.label(), printable(why));
        }
        out.push_str("after the removal:\n");
        out.push_str(&show::text(hosts, &after, &[]));
        if status == EXIT_NOTHING_STALE {
            out.push_str("nothing stale remains\n");
        } else {
            out.push_str("stale state remains (see above)\n");
        }
        out
    };
    print_out(&out).err().unwrap_or(status)
}

type Table = (Mode, Family, &'static str);

fn removal_json(
    dir: Option<&Path>,
    files: &[(PathBuf, String)],
    emptied: &[(Table, String)],
    failed: &[(Table, String)],
) -> String {
    let table = |(backend, family, name): &Table| {
        format!(
            "\"backend\":{},\"family\":{},\"table\":{}",
            string(backend.name()),
            string(family.label()),
            string(name)
        )
    };
    let files: Vec<String> = files
        .iter()
        .map(|(file, tool)| {
            format!(
                "{{\"path\":{},\"undo\":{}}}",
                string(&file.display().to_string()),
                string(tool)
            )
        })
        .collect();
    let emptied: Vec<String> = emptied.iter().map(|(t, _)| format!("{{{}}}", table(t))).collect();
    let failed: Vec<String> = failed
        .iter()
        .map(|(t, why)| format!("{{{},\"error\":{}}}", table(t), string(why)))
        .collect();
    format!(
        "{{\"backup_dir\":{},\"backup_files\":[{}],\"emptied\":[{}],\"failed\":[{}]}}",
        dir.map_or("null".into(), |d| string(&d.display().to_string())),
        files.join(","),
        emptied.join(","),
        failed.join(",")
    )
}

/// The backup directory: `dir` (made, mode 0700, when missing), or a new
/// directory `stale-backup-<UTC time>` in the runtime directory.
fn open_backup_dir(dir: Option<&Path>) -> Result<BackupDir, String> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let open = |path: &Path| -> Result<BackupDir, String> {
        let raw = openat(None, path, flags, FileMode::empty()).map_err(|e| format!("{}: {e}", path.display()))?;
        // SAFETY: openat returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        match fstat(fd.as_raw_fd()) {
            Ok(stat) if stat.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits() => Ok(BackupDir {
                fd,
                path: path.to_path_buf(),
            }),
            Ok(_) => Err(format!("{}: not a directory", path.display())),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    };
    if let Some(dir) = dir {
        match mkdirat(None, dir, FileMode::S_IRWXU) {
            Ok(()) | Err(Errno::EEXIST) => return open(dir),
            Err(e) => return Err(format!("cannot make {}: {e}", dir.display())),
        }
    }
    let run_dir = RunDir::open_or_create().ok_or_else(|| {
        "the runtime directory cannot be used (see IPTABLES_WRAPPER_RUN_DIR); give --backup-dir DIR".to_string()
    })?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| "the clock is before 1970: give --backup-dir DIR".to_string())?
        .as_secs();
    let stamp: String = utc_time(now).chars().filter(|c| *c != '-' && *c != ':').collect();
    for attempt in 1..100 {
        let name = match attempt {
            1 => format!("stale-backup-{stamp}"),
            n => format!("stale-backup-{stamp}.{n}"),
        };
        let path = run_dir.path().join(&name);
        match mkdirat(None, &path, FileMode::S_IRWXU) {
            Ok(()) => return open(&path),
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(format!("cannot make {}: {e}", path.display())),
        }
    }
    Err(format!(
        "too many backups named stale-backup-{stamp} in {}",
        run_dir.path().display()
    ))
}

/// Saves each finding's family of its backend into the backup directory;
/// returns each file with the command that restores it.
fn write_backup(dir: &BackupDir, findings: &[Finding]) -> Result<Vec<(PathBuf, String)>, String> {
    let mut files = Vec::new();
    for finding in findings {
        let (backend, family) = (finding.backend, finding.family);
        // Where the backend holds nothing in this family, its save tool is
        // not run (nft's could load nf_tables); the file says so instead.
        let holds_nothing = match backend {
            Mode::Nft => !matches!(modules::nf_tables(), Presence::Present(_) | Presence::Askable(_)),
            Mode::Legacy => legacy::listed_tables(family)?.unwrap_or_default().is_empty(),
        };
        let save = if holds_nothing {
            format!("# no {backend} {} tables existed: nothing to restore\n", family.label())
        } else {
            find::save(backend, family, false)?
        };
        for table in &finding.tables {
            if !save.lines().any(|line| line.strip_prefix('*') == Some(table.name)) {
                return Err(format!(
                    "the {}-{backend}-save output lacks table {}: it would not restore what is removed",
                    family.program(),
                    table.name
                ));
            }
        }
        let name = format!("{}-{backend}.rules", family.program());
        write_new_file(dir, &name, save.as_bytes()).map_err(|e| format!("{name}: {e}"))?;
        files.push((dir.path.join(&name), format!("{}-{backend}-restore", family.program())));
    }
    fsync(dir.fd.as_raw_fd()).map_err(|e| format!("{}: {e}", dir.path.display()))?;
    Ok(files)
}

/// Writes `contents` to a new file `name` (mode 0600) whole: into a
/// temporary file, synced, then linked under its name, which fails if that
/// name exists. A reader never sees a part.
fn write_new_file(dir: &BackupDir, name: &str, contents: &[u8]) -> std::io::Result<()> {
    let dir_fd = dir.fd.as_raw_fd();
    let temporary = format!(".{name}.{}.tmp", std::process::id());
    let _ = unlinkat(Some(dir_fd), temporary.as_str(), UnlinkatFlags::NoRemoveDir);
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let written = (|| {
        let raw = openat(
            Some(dir_fd),
            temporary.as_str(),
            flags,
            FileMode::S_IRUSR | FileMode::S_IWUSR,
        )?;
        // SAFETY: openat returned a new descriptor that nothing else owns.
        let mut file = unsafe { File::from_raw_fd(raw) };
        file.write_all(contents)?;
        file.sync_all()?;
        linkat(Some(dir_fd), temporary.as_str(), Some(dir_fd), name, AtFlags::empty())?;
        Ok(())
    })();
    let _ = unlinkat(Some(dir_fd), temporary.as_str(), UnlinkatFlags::NoRemoveDir);
    written
}

/// Replaces `table` of `backend` in `family` by an empty one, in one commit
/// of the backend's own restore tool.
fn restore_empty(backend: Mode, family: Family, table: &str, builtin_chains: &[&str]) -> Result<(), String> {
    let mut input = format!("*{table}\n");
    for chain in builtin_chains {
        let _ = writeln!(input, ":{chain} ACCEPT [0:0]");
    }
    input.push_str("COMMIT\n");
    let name = match family {
        Family::Ipv4 => "iptables-restore",
        Family::Ipv6 => "ip6tables-restore",
    };
    let command = WrappedCommand::from_name(name).expect("a known name");
    let tool = backend::locate(&command, backend).map_err(|e| e.to_string())?;
    let mut restore = Command::new(&tool.path);
    restore.arg0(command.name);
    if backend == Mode::Legacy {
        restore.arg(format!("--wait={LOCK_WAIT_SECONDS}"));
    }
    let mut child = restore
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", tool.path.display()))?;
    let fed = child.stdin.take().expect("stdin is piped").write_all(input.as_bytes());
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    match (fed, output.status.success()) {
        (Ok(()), true) => Ok(()),
        (fed, _) => Err(format!(
            "{} ({}-{backend}-restore) {}: {}{}",
            tool.path.display(),
            family.program(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim(),
            fed.err()
                .map(|e| format!(" (writing its input: {e})"))
                .unwrap_or_default()
        )),
    }
}
