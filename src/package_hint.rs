//! The package that provides a backend, named in the missing-backend
//! error: by the image's distribution (`/etc/os-release`'s `ID`, then
//! `ID_LIKE`) and, in the RHEL family, its package manager (`dnf`, or
//! `microdnf` alone in UBI's minimal images). Read only on that error's
//! path, never by a call that runs its backend.

use crate::mode::Mode;
use std::path::Path;

/// The package that provides `mode`'s backend on this image's distribution,
/// by the `ID` and `ID_LIKE` of `/etc/os-release` (read only here, on the
/// error's path); every distribution's, when it names none known.
pub fn providing_package(mode: Mode) -> String {
    let release = std::fs::read_to_string(OS_RELEASE).unwrap_or_default();
    // UBI's minimal images have microdnf alone.
    let minimal = !Path::new(DNF).exists() && Path::new(MICRODNF).exists();
    package_for(&release, mode, if minimal { "microdnf" } else { "dnf" })
}

const OS_RELEASE: &str = "/etc/os-release";
const DNF: &str = "/usr/bin/dnf";
const MICRODNF: &str = "/usr/bin/microdnf";

/// Which distributions' packages to name: the first known one among `ID`,
/// then `ID_LIKE`'s (a derivative names its parent there); `dnf` is the
/// RHEL family's package manager in this image (`dnf` or `microdnf`).
fn package_for(os_release: &str, mode: Mode, dnf: &str) -> String {
    let field = |key: &str| -> Vec<String> {
        os_release
            .lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
            .map(|value| {
                value
                    .trim()
                    .trim_matches(['"', '\''])
                    .split_whitespace()
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let ids: Vec<String> = field("ID").into_iter().chain(field("ID_LIKE")).collect();
    let rhel_nft = format!("RHEL/UBI: {dnf} install iptables-nft");
    // EPEL's release package is not in UBI's or RHEL's own repositories
    // (only CentOS Stream's, Rocky's and Alma's carry it), and microdnf
    // installs only from repositories: the rpm itself comes from EPEL.
    let rhel_legacy = if dnf == "microdnf" {
        "RHEL/UBI 9 minimal: iptables-legacy is not in RHEL, only in EPEL (rpm -i EPEL's epel-release-latest-9 rpm, then microdnf install iptables-legacy); or pin nft".to_string()
    } else {
        "RHEL/UBI 9: iptables-legacy is not in RHEL, only in EPEL (dnf install epel-release, or EPEL's epel-release-latest-9 rpm on RHEL/UBI, then dnf install iptables-legacy); or pin nft".to_string()
    };
    let known = ids.iter().find_map(|id| match (id.as_str(), mode) {
        ("debian" | "ubuntu", _) => Some("Debian/Ubuntu: apt-get install iptables (both backends)"),
        ("alpine", Mode::Nft) => Some("Alpine: apk add iptables"),
        ("alpine", Mode::Legacy) => Some("Alpine: apk add iptables-legacy (a package of its own since 3.19)"),
        ("wolfi" | "chainguard", _) => {
            Some("Wolfi: apk add iptables (both backends; not iptables-wrappers, another wrapper)")
        }
        ("rhel" | "centos" | "rocky" | "almalinux", Mode::Nft) => Some(rhel_nft.as_str()),
        ("rhel" | "centos" | "rocky" | "almalinux", Mode::Legacy) => Some(rhel_legacy.as_str()),
        ("fedora", Mode::Nft) => Some("Fedora: dnf install iptables-nft"),
        ("fedora", Mode::Legacy) => Some("Fedora: dnf install iptables-legacy"),
        _ => None,
    });
    match (known, mode) {
        (Some(package), _) => package.to_string(),
        (None, Mode::Nft) => "Debian/Ubuntu/Alpine/Wolfi: iptables; Fedora/RHEL/UBI: iptables-nft".to_string(),
        (None, Mode::Legacy) => {
            "Debian/Ubuntu/Wolfi: iptables; Alpine/Fedora: iptables-legacy; RHEL/UBI 9: iptables-legacy from EPEL"
                .to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::package_for;
    use crate::mode::Mode;

    #[test]
    fn the_package_follows_os_release() {
        let ubi = "NAME=\"Red Hat Enterprise Linux\"\nID=\"rhel\"\nID_LIKE=\"fedora\"\nVERSION_ID=\"9.4\"\n";
        assert!(package_for(ubi, Mode::Legacy, "dnf").contains("EPEL"));
        assert!(package_for(ubi, Mode::Nft, "dnf").contains("iptables-nft"));
        assert!(package_for("ID=rocky\nID_LIKE=\"rhel centos fedora\"\n", Mode::Legacy, "dnf").contains("EPEL"));
        assert!(package_for("ID=wolfi\n", Mode::Legacy, "dnf").starts_with("Wolfi: apk add iptables "));
        assert!(package_for("ID=alpine\nVERSION_ID=3.22.0\n", Mode::Legacy, "dnf").contains("iptables-legacy"));
        assert!(package_for("ID=fedora\n", Mode::Nft, "dnf").contains("iptables-nft"));
        assert!(
            package_for("ID=linuxmint\nID_LIKE=\"ubuntu debian\"\n", Mode::Legacy, "dnf").starts_with("Debian/Ubuntu")
        );
        assert!(package_for("VERSION_ID=1\n", Mode::Legacy, "dnf").contains("EPEL"));
        // ubi9-minimal: microdnf only, and no epel-release in its repositories.
        let minimal = package_for(ubi, Mode::Legacy, "microdnf");
        assert!(minimal.contains("microdnf install iptables-legacy"), "{minimal}");
        assert!(!minimal.contains("dnf install epel-release"), "{minimal}");
        assert!(package_for(ubi, Mode::Nft, "microdnf").contains("microdnf install iptables-nft"));
    }
}
