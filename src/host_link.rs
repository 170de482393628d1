//! The host's own choice, read from its alternatives link through a mount.
//!
//! The host's filesystem may be mounted at `IPTABLES_WRAPPER_HOST_ROOT`
//! (an absolute path; default `/host`). Debian-style hosts record their choice in
//! `/etc/alternatives/iptables`; hosts without alternatives link
//! `/usr/sbin/iptables` straight to `xtables-nft-multi` or
//! `xtables-legacy-multi`. Link targets are only strings to classify, by the
//! exact file name of a backend (`iptables-nft`, `xtables-legacy-multi`,
//! ...; anything else is no hint): nothing on the host is executed, and the
//! final link is never followed.

use crate::family::Family;
use crate::mode::{mode_named_by, Mode};
use crate::settings::{self, HOST_ROOT_VAR};
use std::path::{Component, Path, PathBuf};

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

/// A link found on the host, and what its target says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostLink {
    /// The link as seen from here (under the host root).
    pub path: PathBuf,
    /// Its target, exactly as stored.
    pub target: PathBuf,
    /// The mode the target's file name names exactly, if any.
    pub mode: Option<Mode>,
}

/// The links consulted for a family, in order, relative to the host root.
pub fn candidates(family: Family) -> &'static [&'static str] {
    match family {
        Family::Ipv4 => &["etc/alternatives/iptables", "usr/sbin/iptables", "sbin/iptables"],
        Family::Ipv6 => &[
            "etc/alternatives/ip6tables",
            "etc/alternatives/iptables",
            "usr/sbin/ip6tables",
            "usr/sbin/iptables",
            "sbin/ip6tables",
            "sbin/iptables",
        ],
    }
}

/// Reads the family's candidate links under `root`: every link that exists,
/// in order. The first one whose target names a mode is the host's choice.
/// With `until_deciding`, reading stops at the first link that names a mode
/// (a wrapped call); otherwise every candidate is read (`detect`).
pub fn read(root: &Path, family: Family, until_deciding: bool) -> Vec<HostLink> {
    let mut links = Vec::new();
    for relative in candidates(family) {
        let Some(target) = read_link_within(root, Path::new(relative)) else {
            continue;
        };
        let mode = target.file_name().and_then(|n| n.to_str()).and_then(mode_named_by);
        links.push(HostLink {
            path: root.join(relative),
            target,
            mode,
        });
        if until_deciding && mode.is_some() {
            break;
        }
    }
    links
}

/// The first link whose target names a mode.
pub fn deciding(links: &[HostLink]) -> Option<&HostLink> {
    links.iter().find(|link| link.mode.is_some())
}

/// Reads the link at `relative` under `root` without following it. Symlinked
/// directories on the way (say `sbin -> usr/sbin`, or `/usr/sbin -> /usr/bin`)
/// are resolved inside `root`, so an absolute target never escapes to the
/// wrapper's own filesystem.
fn read_link_within(root: &Path, relative: &Path) -> Option<PathBuf> {
    const MAX_DIRECTORY_LINKS: usize = 8;
    let file_name = relative.file_name()?;
    let mut directory = PathBuf::new(); // relative to root
    let mut pending: Vec<PathBuf> = relative
        .parent()?
        .components()
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect();
    pending.reverse();
    let mut links_followed = 0;
    while let Some(part) = pending.pop() {
        let next = directory.join(&part);
        match std::fs::read_link(root.join(&next)) {
            Ok(target) => {
                links_followed += 1;
                if links_followed > MAX_DIRECTORY_LINKS {
                    return None;
                }
                if target.is_absolute() {
                    directory = PathBuf::new();
                }
                let mut parts: Vec<PathBuf> = target
                    .components()
                    .filter(|c| !matches!(c, Component::RootDir))
                    .map(|c| PathBuf::from(c.as_os_str()))
                    .collect();
                parts.reverse();
                pending.extend(parts);
            }
            // Nothing below a missing directory exists either.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => return None,
            Err(_) if part == Path::new("..") => {
                directory.pop();
            }
            Err(_) if part == Path::new(".") => {}
            Err(_) => directory = next,
        }
    }
    std::fs::read_link(root.join(directory).join(file_name)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn fake_root(name: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("iptw-host-link-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("etc/alternatives")).unwrap();
        std::fs::create_dir_all(root.join("usr/bin")).unwrap();
        root
    }

    #[test]
    fn alternatives_link_decides() {
        let root = fake_root("alt");
        symlink("/usr/sbin/iptables-nft", root.join("etc/alternatives/iptables")).unwrap();
        let links = read(&root, Family::Ipv4, false);
        assert_eq!(deciding(&links).unwrap().mode, Some(Mode::Nft));
        // ip6tables falls back to the iptables group when it has no link of its own.
        assert_eq!(
            deciding(&read(&root, Family::Ipv6, false)).unwrap().mode,
            Some(Mode::Nft)
        );
        symlink("/usr/sbin/ip6tables-legacy", root.join("etc/alternatives/ip6tables")).unwrap();
        assert_eq!(
            deciding(&read(&root, Family::Ipv6, false)).unwrap().mode,
            Some(Mode::Legacy)
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_wrapper_target_is_no_hint() {
        let root = fake_root("wrapper");
        symlink("/usr/sbin/iptables-wrapper", root.join("etc/alternatives/iptables")).unwrap();
        let links = read(&root, Family::Ipv4, false);
        assert_eq!(links.len(), 1);
        assert!(deciding(&links).is_none());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn directory_links_resolve_inside_the_root() {
        // Fedora-style /usr/sbin -> /usr/bin (absolute) and /sbin -> usr/sbin.
        let root = fake_root("usrmerge");
        symlink("/usr/bin", root.join("usr/sbin")).unwrap();
        symlink("usr/sbin", root.join("sbin")).unwrap();
        symlink("xtables-legacy-multi", root.join("usr/bin/iptables")).unwrap();
        let links = read(&root, Family::Ipv4, false);
        assert_eq!(links.len(), 2, "{links:?}");
        assert!(links.iter().all(|l| l.mode == Some(Mode::Legacy)));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn nothing_mounted() {
        assert!(read(Path::new("/nonexistent-host-root"), Family::Ipv6, false).is_empty());
    }
}
