//! The host's own choice, read from its iptables link through a mount.
//!
//! The host's filesystem may be mounted at `IPTABLES_WRAPPER_HOST_ROOT`
//! (an absolute path; default `/host`; the example DaemonSet mounts the
//! host's `/` there read-only, as node-exporter does). Each node OS keeps
//! its choice in a link of its own ([`candidates`], in the order read; the
//! layouts and their sources are in docs/node-os.md): the alternatives link
//! (Debian, Ubuntu, Fedora, RHEL), `/usr/sbin/iptables` (Flatcar,
//! Bottlerocket, Talos through its `/usr/sbin -> bin`), `/sbin/iptables`
//! (Alpine), NixOS's system profile, k3s's bundled binaries. The first
//! candidate that exists answers, and no other is read: its link target
//! names a backend by exact file name (`iptables-nft`,
//! `xtables-legacy-multi`, ...), or it is followed, by reading links only,
//! to the next link while the target names none (NixOS's chain of store
//! links, Debian's `/usr/sbin/iptables -> /etc/alternatives/iptables`);
//! anything else (a regular file, a wrapper, a script, a dangling or
//! looping chain) cannot tell, and says why. Nothing on the host is
//! executed or opened; links are read with `readlink`, inside the host
//! root (an absolute target never escapes it). Without a host root, the
//! cost is one failed `stat`.

use crate::family::Family;
use crate::mode::{mode_named_by, Mode};
use crate::settings::{self, HOST_ROOT_VAR};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

pub const DEFAULT_HOST_ROOT: &str = "/host";

/// Where the host's filesystem is mounted: the `IPTABLES_WRAPPER_HOST_ROOT`
/// setting (environment or settings file), or `/host` when neither gives
/// one. A relative value is ignored (`settings` logs it at debug level): it
/// would make the decision depend on the caller's working directory.
pub fn host_root() -> PathBuf {
    settings::current()
        .value(HOST_ROOT_VAR)
        .map_or(PathBuf::from(DEFAULT_HOST_ROOT), PathBuf::from)
}

/// The links consulted for a family, in order, relative to the host root:
/// per place, the family's own name first, then `iptables` (an
/// alternatives group or a layout that links only the IPv4 names).
pub fn candidates(family: Family) -> &'static [&'static str] {
    match family {
        Family::Ipv4 => &[
            "etc/alternatives/iptables",
            "usr/sbin/iptables",
            "sbin/iptables",
            "run/current-system/sw/bin/iptables",
            "var/lib/rancher/k3s/data/current/bin/aux/iptables",
        ],
        Family::Ipv6 => &[
            "etc/alternatives/ip6tables",
            "etc/alternatives/iptables",
            "usr/sbin/ip6tables",
            "usr/sbin/iptables",
            "sbin/ip6tables",
            "sbin/iptables",
            "run/current-system/sw/bin/ip6tables",
            "run/current-system/sw/bin/iptables",
            "var/lib/rancher/k3s/data/current/bin/aux/ip6tables",
            "var/lib/rancher/k3s/data/current/bin/aux/iptables",
        ],
    }
}

/// What the host root holds for a family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostLinks {
    /// The host root itself is not there (nothing mounted), is not a
    /// directory, or cannot be looked at: why, without the path.
    NoRoot(String),
    /// The host root is there and no candidate exists in it.
    NoneExists,
    /// The first candidate that exists, the candidates before it that do
    /// not, and (only when asked for every candidate) the later ones that
    /// exist too.
    Found {
        link: HostLink,
        missing: Vec<&'static str>,
        later: Vec<HostLink>,
    },
}

/// The first candidate that exists, and what it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostLink {
    /// The candidate as seen from here (under the host root).
    pub path: PathBuf,
    /// The link targets read, in order, exactly as stored (empty when the
    /// candidate is not a link).
    pub chain: Vec<PathBuf>,
    /// The mode the last target's file name names exactly, or why the
    /// links cannot tell.
    pub answer: Result<Mode, String>,
}

impl HostLink {
    /// `-> a -> b`, the chain as read.
    pub fn shown_chain(&self) -> String {
        shown_chain(&self.chain)
    }
}

/// `-> a -> b`: link targets as read, in order.
pub fn shown_chain(chain: &[PathBuf]) -> String {
    chain
        .iter()
        .map(|t| format!("-> {}", t.display()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Links followed at most in one candidate, directory links included.
const MAX_LINKS: usize = 8;

/// Reads the family's candidates under `root` until one exists, or with
/// `every_candidate` (`detect`) all of them.
pub fn read(root: &Path, family: Family, every_candidate: bool) -> HostLinks {
    // The root itself is the operator's setting: a link to the mount is
    // followed (`/host -> /mnt/host`); nothing below it is.
    match std::fs::metadata(root) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return HostLinks::NoRoot("not a directory".into()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return HostLinks::NoRoot("does not exist (the host root is not mounted)".into())
        }
        Err(e) => return HostLinks::NoRoot(e.to_string()),
    }
    let mut walk = Walk {
        root,
        real_dirs: Vec::new(),
    };
    let mut missing = Vec::new();
    let mut found: Vec<HostLink> = Vec::new();
    for &relative in candidates(family) {
        match walk.candidate(relative) {
            Some(link) => found.push(link),
            None if found.is_empty() => missing.push(relative),
            None => {}
        }
        if !found.is_empty() && !every_candidate {
            break;
        }
    }
    let mut found = found.into_iter();
    match found.next() {
        Some(link) => HostLinks::Found {
            link,
            missing,
            later: found.collect(),
        },
        None => HostLinks::NoneExists,
    }
}

/// One reading of the host root: the directories already found to be real
/// directories (not links), so candidates sharing a prefix read it once.
///
/// Paths inside the root are kept as bytes, their parts joined by single
/// `/`s (what [`parts`] gives): `Path`'s joins and comparisons, which parse
/// components at every step, cost a host-link call a quarter of its
/// instructions.
struct Walk<'a> {
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

impl Walk<'_> {
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

    /// The candidate at `relative` (one of [`candidates`]: parts joined by
    /// single `/`s), or `None` when it does not exist.
    fn candidate(&mut self, relative: &str) -> Option<HostLink> {
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
                            self.inside(&at).display()
                        ),
                        _ if is_missing(&e) => format!("{} does not exist (a dangling link)", self.inside(&at).display()),
                        _ => format!("{}: {e}", self.inside(&at).display()),
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
                    format!("{} does not exist (a dangling link)", self.root.join(&next).display())
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
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fake host root: `links` are (path, target) pairs, `files` empty
    /// regular files, both relative to the root.
    fn host(name: &str, links: &[(&str, &str)], files: &[&str]) -> PathBuf {
        let root = std::env::temp_dir().join(format!("iptw-host-link-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        for (path, target) in links {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            symlink(target, path).unwrap();
        }
        for path in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        root
    }

    fn answer(root: &Path, family: Family) -> Result<Mode, String> {
        match read(root, family, false) {
            HostLinks::Found { link, .. } => link.answer,
            other => Err(format!("{other:?}")),
        }
    }

    #[test]
    fn every_node_os_layout() {
        type Layout<'a> = (&'a str, &'a [(&'a str, &'a str)], Mode);
        let layouts: &[Layout] = &[
            (
                "debian",
                &[
                    ("etc/alternatives/iptables", "/usr/sbin/iptables-legacy"),
                    ("etc/alternatives/ip6tables", "/usr/sbin/ip6tables-legacy"),
                    ("usr/sbin/iptables", "/etc/alternatives/iptables"),
                ],
                Mode::Legacy,
            ),
            (
                "fedora",
                &[
                    ("usr/sbin", "bin"),
                    ("etc/alternatives/iptables", "/usr/bin/iptables-legacy"),
                    ("etc/alternatives/ip6tables", "/usr/bin/ip6tables-legacy"),
                    ("usr/bin/iptables", "/etc/alternatives/iptables"),
                ],
                Mode::Legacy,
            ),
            (
                "flatcar",
                &[
                    ("usr/sbin/iptables", "xtables-nft-multi"),
                    ("usr/sbin/ip6tables", "xtables-nft-multi"),
                ],
                Mode::Nft,
            ),
            (
                "talos",
                &[
                    ("usr/sbin", "bin"),
                    ("sbin", "usr/bin"),
                    ("usr/bin/iptables", "xtables-nft-multi"),
                    ("usr/bin/ip6tables", "xtables-nft-multi"),
                ],
                Mode::Nft,
            ),
            (
                "bottlerocket",
                &[
                    ("usr/sbin/iptables", "xtables-legacy-multi"),
                    ("usr/sbin/ip6tables", "xtables-legacy-multi"),
                ],
                Mode::Legacy,
            ),
            (
                "alpine",
                &[
                    ("sbin/iptables", "xtables-nft-multi"),
                    ("sbin/ip6tables", "xtables-nft-multi"),
                ],
                Mode::Nft,
            ),
            (
                "nixos",
                &[
                    ("run/current-system", "/nix/store/aaa-nixos-system"),
                    ("nix/store/aaa-nixos-system/sw", "/nix/store/bbb-system-path"),
                    (
                        "nix/store/bbb-system-path/bin/iptables",
                        "/nix/store/ccc-iptables-1.8.11/bin/iptables",
                    ),
                    (
                        "nix/store/bbb-system-path/bin/ip6tables",
                        "/nix/store/ccc-iptables-1.8.11/bin/ip6tables",
                    ),
                    ("nix/store/ccc-iptables-1.8.11/bin/iptables", "xtables-nft-multi"),
                    ("nix/store/ccc-iptables-1.8.11/bin/ip6tables", "xtables-nft-multi"),
                ],
                Mode::Nft,
            ),
            (
                "k3s",
                &[
                    ("var/lib/rancher/k3s/data/current", "/var/lib/rancher/k3s/data/0123abcd"),
                    (
                        "var/lib/rancher/k3s/data/0123abcd/bin/aux/iptables",
                        "xtables-legacy-multi",
                    ),
                    (
                        "var/lib/rancher/k3s/data/0123abcd/bin/aux/ip6tables",
                        "xtables-legacy-multi",
                    ),
                ],
                Mode::Legacy,
            ),
        ];
        for (name, links, mode) in layouts {
            let root = host(name, links, &[]);
            for family in Family::BOTH {
                assert_eq!(answer(&root, family), Ok(*mode), "{name} {family:?}");
            }
            std::fs::remove_dir_all(&root).unwrap();
        }
    }

    #[test]
    fn the_first_candidate_that_exists_answers() {
        // k3s's links are relinked by its xtables-set-mode.sh; before its
        // first run they point at its detect script: cannot tell, and the
        // host's own alternatives link (read first) wins over both.
        let root = host(
            "order",
            &[
                (
                    "var/lib/rancher/k3s/data/current/bin/aux/iptables",
                    "iptables-detect.sh",
                ),
                ("sbin/iptables", "xtables-legacy-multi"),
            ],
            &["var/lib/rancher/k3s/data/current/bin/aux/iptables-detect.sh"],
        );
        match read(&root, Family::Ipv4, false) {
            HostLinks::Found { link, missing, later } => {
                assert!(later.is_empty());
                assert_eq!(link.answer, Ok(Mode::Legacy));
                assert_eq!(missing, ["etc/alternatives/iptables", "usr/sbin/iptables"]);
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(root.join("sbin/iptables")).unwrap();
        let why = answer(&root, Family::Ipv4).unwrap_err();
        assert!(why.contains("iptables-detect.sh is not a link"), "{why}");
        std::fs::remove_dir_all(&root).unwrap();
    }

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

    #[test]
    fn nothing_mounted() {
        assert!(matches!(
            read(Path::new("/nonexistent-host-root"), Family::Ipv6, true),
            HostLinks::NoRoot(_)
        ));
        let root = host("empty", &[], &["etc/hostname"]);
        assert_eq!(read(&root, Family::Ipv6, true), HostLinks::NoneExists);
        assert_eq!(
            read(&root.join("etc/hostname"), Family::Ipv4, false),
            HostLinks::NoRoot("not a directory".into())
        );
        // A host root that is itself a link to the mount.
        let linked = root.with_extension("link");
        let _ = std::fs::remove_file(&linked);
        symlink(&root, &linked).unwrap();
        std::fs::create_dir_all(root.join("sbin")).unwrap();
        symlink("xtables-legacy-multi", root.join("sbin/iptables")).unwrap();
        assert_eq!(answer(&linked, Family::Ipv4), Ok(Mode::Legacy));
        std::fs::remove_file(&linked).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
    }
}
