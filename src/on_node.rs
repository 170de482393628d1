//! The stale rules' backups as the node names them (`stale --backups-in
//! DIR --backups-on-host PATH`): the container mounts the node's PATH at
//! DIR, and an operator on the node types PATH's names, so the undo lines
//! and the pruned backups are said with PATH in place of DIR. Only what is
//! printed changes; every file is read and written through DIR.

use crate::escape::Shown as _;
use crate::stale::backup::undo;
use std::path::{Path, PathBuf};

/// `--backups-in`'s directory and, with `--backups-on-host`, its path on
/// the node.
pub struct NodePaths<'a> {
    pub inside: &'a Path,
    pub on_host: Option<&'a Path>,
}

impl NodePaths<'_> {
    /// `path` (in the directory) as the node names it; None without a
    /// node path, or for a path outside the directory.
    pub fn shown(&self, path: &Path) -> Option<String> {
        let inside = path.strip_prefix(self.inside).ok()?;
        Some(self.on_host?.join(inside).shown().to_string())
    }

    /// One line per file of the backup just written: the command that
    /// restores it, typed on the node (`iptables-legacy-restore <
    /// PATH/stale-backup-.../iptables-legacy.rules`).
    pub fn undo_lines(&self, backup: &Path) -> Vec<String> {
        rules_files(backup)
            .iter()
            .filter_map(|file| {
                let tool = file.file_stem()?.to_string_lossy();
                let restore = format!("{tool}-restore");
                Some(format!("undo on the node: {}", undo(&restore, &self.shown(file)?)))
            })
            .collect()
    }
}

/// The backup files in `backup` (`<family>-<backend>.rules`, restored by
/// `<family>-<backend>-restore`), in name order; none if it was not written.
fn rules_files(backup: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(backup)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rules"))
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::NodePaths;
    use std::path::Path;

    #[test]
    fn a_path_in_the_directory_is_shown_under_the_node_path() {
        let paths = NodePaths {
            inside: Path::new("/stale-backups"),
            on_host: Some(Path::new("/run/iptables-wrapper-stale-backups")),
        };
        assert_eq!(
            paths
                .shown(Path::new("/stale-backups/stale-backup-000001-x/iptables-legacy.rules"))
                .as_deref(),
            Some("/run/iptables-wrapper-stale-backups/stale-backup-000001-x/iptables-legacy.rules")
        );
        assert_eq!(paths.shown(Path::new("/elsewhere/x")), None);
        let without = NodePaths {
            inside: Path::new("/stale-backups"),
            on_host: None,
        };
        assert_eq!(without.shown(Path::new("/stale-backups/x")), None);
    }
}
