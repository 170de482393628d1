//! Reading one candidate inside the host root: its link followed, by
//! reading links only, until a target names a backend by exact file name or
//! the chain cannot tell (a regular file, a wrapper, a dangling or looping
//! chain), and why. Directory links on the way are resolved inside the root
//! too: an absolute target starts again at the root, `..` never climbs out
//! of it. Nothing is opened or executed; the only calls are `readlink`s.

use super::HostLink;
use crate::escape::Shown as _;
use crate::mode::mode_named_by;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Links followed at most in one candidate, directory links included.
const MAX_LINKS: usize = 8;

/// One reading of the host root: the directories already found to be real
/// directories (not links), so candidates sharing a prefix read it once.
///
/// Paths inside the root are kept as bytes, their parts joined by single
/// `/`s (what [`parts`] gives): `Path`'s joins and comparisons, which parse
/// components at every step, cost a host-link call a quarter of its
/// instructions.
pub(super) struct Walk<'a> {
    root: &'a Path,
    real_dirs: Vec<Vec<u8>>,
}

/// A path's parts, for resolving one at a time: split at `/`, without the
/// empty and `.` parts (as `Path::components`, less the root and `.`).
fn parts(path: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    path.split(|&b| b == b'/')
        .filter(|part| !part.is_empty() && *part != b".")
}

/// `directory/part`, or `part` at the top.
fn joined(directory: &[u8], part: &[u8]) -> Vec<u8> {
    if directory.is_empty() {
        return part.to_vec();
    }
    [directory, b"/", part].concat()
}

impl<'a> Walk<'a> {
    /// A fresh reading of `root`, nothing known yet.
    pub(super) fn new(root: &'a Path) -> Self {
        Walk {
            root,
            real_dirs: Vec::new(),
        }
    }

    /// `relative` (as [`joined`] makes it) under the root.
    fn inside(&self, relative: &[u8]) -> PathBuf {
        let root = self.root.as_os_str().as_bytes();
        let path = match (relative.is_empty(), root.ends_with(b"/")) {
            (true, _) => root.to_vec(),
            (false, true) => [root, relative].concat(),
            (false, false) => [root, b"/", relative].concat(),
        };
        PathBuf::from(OsString::from_vec(path))
    }

    /// The candidate at `relative` (one of [`super::candidates`]: parts joined by
    /// single `/`s), or `None` when it does not exist.
    pub(super) fn candidate(&mut self, relative: &str) -> Option<HostLink> {
        let mut links = 0;
        let (parent, name) = relative.rsplit_once('/').unwrap_or(("", relative));
        let directory = self.directory(parent.as_bytes(), &mut links)?;
        let seen = self.root.join(relative);
        let mut chain = Vec::new();
        let mut at = joined(&directory, name.as_bytes());
        loop {
            let target = match std::fs::read_link(self.inside(&at)) {
                Ok(target) => target,
                Err(e) if chain.is_empty() && is_missing(&e) => return None,
                Err(e) => {
                    let why = match (e.raw_os_error(), chain.is_empty()) {
                        (Some(libc::EINVAL), true) => "not a link (a file the wrapper neither runs nor reads)".to_string(),
                        (Some(libc::EINVAL), false) => format!(
                            "{} is not a link and not a backend's file name (a wrapper or a script the wrapper neither runs nor reads)",
                            self.inside(&at).shown()
                        ),
                        _ if is_missing(&e) => format!("{} does not exist (a dangling link)", self.inside(&at).shown()),
                        _ => format!("{}: {e}", self.inside(&at).shown()),
                    };
                    return Some(HostLink {
                        path: seen,
                        chain,
                        answer: Err(why),
                    });
                }
            };
            if let Some(mode) = target.file_name().and_then(|n| n.to_str()).and_then(mode_named_by) {
                chain.push(target);
                return Some(HostLink {
                    path: seen,
                    chain,
                    answer: Ok(mode),
                });
            }
            let next = if target.is_absolute() {
                PathBuf::from_iter(parts(target.as_os_str().as_bytes()).map(OsStr::from_bytes))
            } else {
                directory_of(Path::new(OsStr::from_bytes(&at))).join(&target)
            };
            chain.push(target);
            links += 1;
            let resolved = match (links <= MAX_LINKS)
                .then(|| next.parent().map(|parent| parent.as_os_str().as_bytes().to_vec()))
                .flatten()
            {
                Some(parent) => self.directory(&parent, &mut links),
                None => None,
            };
            let (Some(directory), Some(name)) = (resolved, next.file_name()) else {
                let why = if links > MAX_LINKS {
                    format!("more than {MAX_LINKS} links (a loop?)")
                } else {
                    format!("{} does not exist (a dangling link)", self.root.join(&next).shown())
                };
                return Some(HostLink {
                    path: seen,
                    chain,
                    answer: Err(why),
                });
            };
            at = joined(&directory, name.as_bytes());
        }
    }

    /// Resolves `relative` (a directory) inside the root, one part at a
    /// time, following directory links inside the root; `None` when it does
    /// not exist or takes more than [`MAX_LINKS`] links.
    fn directory(&mut self, relative: &[u8], links: &mut usize) -> Option<Vec<u8>> {
        let mut directory: Vec<u8> = Vec::new();
        let mut pending: Vec<Vec<u8>> = parts(relative).rev().map(<[u8]>::to_vec).collect();
        while let Some(part) = pending.pop() {
            if part == b".." {
                let parent = directory.iter().rposition(|&b| b == b'/').unwrap_or(0);
                directory.truncate(parent);
                continue;
            }
            let next = joined(&directory, &part);
            if self.real_dirs.contains(&next) {
                directory = next;
                continue;
            }
            match std::fs::read_link(self.inside(&next)) {
                Ok(target) => {
                    *links += 1;
                    if *links > MAX_LINKS {
                        return None;
                    }
                    let target = target.as_os_str().as_bytes();
                    if target.starts_with(b"/") {
                        directory.clear();
                    }
                    pending.extend(parts(target).rev().map(<[u8]>::to_vec));
                }
                Err(e) if is_missing(&e) => return None,
                Err(_) => {
                    self.real_dirs.push(next.clone());
                    directory = next;
                }
            }
        }
        Some(directory)
    }
}

fn directory_of(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

fn is_missing(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{answer, host};
    use crate::family::Family;
    use crate::mode::Mode;

    #[test]
    fn what_cannot_tell() {
        // Wolfi's iptables-wrappers: a link to a wrapper that is a file.
        let root = host(
            "cannot",
            &[("usr/sbin/iptables", "iptables-wrapper")],
            &["usr/sbin/iptables-wrapper", "sbin/iptables"],
        );
        let why = answer(&root, Family::Ipv4).unwrap_err();
        assert!(why.contains("iptables-wrapper is not a link"), "{why}");
        std::fs::remove_file(root.join("usr/sbin/iptables")).unwrap();
        // A regular file: not a link.
        let why = answer(&root, Family::Ipv4).unwrap_err();
        assert!(why.starts_with("not a link"), "{why}");
        std::fs::remove_dir_all(&root).unwrap();
        // A dangling link and a loop.
        let root = host(
            "dangling",
            &[
                ("etc/alternatives/iptables", "/usr/sbin/iptables-gone"),
                ("sbin/iptables", "iptables"),
            ],
            &[],
        );
        assert!(answer(&root, Family::Ipv4).unwrap_err().contains("dangling"));
        std::fs::remove_file(root.join("etc/alternatives/iptables")).unwrap();
        assert!(answer(&root, Family::Ipv4).unwrap_err().contains("loop"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn absolute_links_stay_inside_the_root() {
        // /run/current-system -> /nix/store/... must not reach this
        // machine's /nix, nor `..` climb out of the root.
        let root = host(
            "escape",
            &[
                ("sbin", "../../../../../../usr/local/sbin"),
                ("usr/local/sbin/iptables", "/usr/local/sbin/xtables-nft-multi"),
            ],
            &[],
        );
        assert_eq!(answer(&root, Family::Ipv4), Ok(Mode::Nft));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_wrapper_target_is_no_hint() {
        let root = host(
            "wrapper",
            &[("etc/alternatives/iptables", "/usr/sbin/iptables-wrapper")],
            &[],
        );
        assert!(answer(&root, Family::Ipv4).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
