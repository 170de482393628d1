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
//!
//! This module holds which links are read, per node OS, and what a reading
//! found; following one candidate's links inside the root is `walk`'s.

mod walk;

use crate::escape::Shown as _;
use crate::family::Family;
use crate::mode::Mode;
use crate::settings::{self, HOST_ROOT_VAR};
use std::io;
use std::path::{Path, PathBuf};
use walk::Walk;

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
        .map(|t| format!("-> {}", t.shown()))
        .collect::<Vec<_>>()
        .join(" ")
}

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
    let mut walk = Walk::new(root);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fake host root: `links` are (path, target) pairs, `files` empty
    /// regular files, both relative to the root.
    pub(super) fn host(name: &str, links: &[(&str, &str)], files: &[&str]) -> PathBuf {
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

    pub(super) fn answer(root: &Path, family: Family) -> Result<Mode, String> {
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
