//! Build script: records what `iptables-wrapper --version` reports besides the
//! package version, the git commit the binary is built from (`unknown` outside
//! a git checkout of this package) and the target triple. It also warns when
//! the default target of `.cargo/config.toml` (x86_64 musl) would not run on
//! the machine building it, the usual slip on an aarch64 machine. And for the
//! x86_64 musl binary linked by lld, it has the linker put the functions a
//! wrapped call runs first in `.text`, in the order `link/hot-path.symbols`
//! lists them (see `scripts/hot-path-symbols.sh`, which writes it).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The target `.cargo/config.toml` builds for when no `--target` is given.
const DEFAULT_TARGET: &str = "x86_64-unknown-linux-musl";

fn main() {
    let target = env::var("TARGET").expect("cargo sets TARGET");
    let host = env::var("HOST").expect("cargo sets HOST");
    let package_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));

    println!("cargo:rerun-if-changed=build.rs");
    let commit = match git_commit(&package_dir) {
        Some((commit, watched)) => {
            for file in watched {
                println!("cargo:rerun-if-changed={}", file.display());
            }
            commit
        }
        None => "unknown".to_owned(),
    };
    println!("cargo:rustc-env=IPTW_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=IPTW_BUILD_TARGET={target}");

    // The hot path together: a call then maps its code in two or three page
    // faults instead of ten (bench/README.md). Names the build lacks are
    // skipped in silence; other linkers than lld do not take the option.
    let linker = env::var("RUSTC_LINKER").unwrap_or_default();
    let lld = Path::new(&linker)
        .file_name()
        .is_some_and(|name| name == "rust-lld" || name == "ld.lld");
    if target == DEFAULT_TARGET && lld {
        let symbols = package_dir.join("link/hot-path.symbols");
        println!("cargo:rerun-if-changed={}", symbols.display());
        println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
        println!(
            "cargo:rustc-link-arg-bin=iptables-wrapper=--symbol-ordering-file={}",
            symbols.display()
        );
        println!("cargo:rustc-link-arg-bin=iptables-wrapper=--no-warn-symbol-ordering");
    }

    let host_arch = host.split('-').next().unwrap_or(&host);
    if target == DEFAULT_TARGET && !host.starts_with("x86_64-") {
        println!(
            "cargo:warning=building for {target} (the default in .cargo/config.toml) on a {host} machine: \
             the binary will not run here; for this machine pass --target {host_arch}-unknown-linux-musl \
             (scripts/build-static.sh does)"
        );
    }
}

/// The commit HEAD names, and the files whose change moves HEAD (so that the
/// next build runs this script again), when this package is the top of a git
/// work tree; `None` otherwise (no git, not a checkout, or this package
/// unpacked inside some other repository, whose commit would be a lie).
fn git_commit(package_dir: &Path) -> Option<(String, Vec<PathBuf>)> {
    let top = PathBuf::from(git(package_dir, &["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != package_dir.canonicalize().ok()? {
        return None;
    }
    let commit = git(package_dir, &["rev-parse", "--short=12", "HEAD"])?;
    // HEAD (moves when detached, or names the branch), the branch heads
    // (a directory: cargo notices a ref file created by the first commit of
    // a fresh clone, whose refs start out packed) and the packed refs.
    let watched = ["HEAD", "refs/heads", "packed-refs"]
        .iter()
        .filter_map(|name| git(package_dir, &["rev-parse", "--git-path", name]))
        .map(|path| package_dir.join(path))
        // A missing file would make cargo run this script on every build.
        .filter(|path| path.exists())
        .collect();
    Some((commit, watched))
}

/// The trimmed stdout of a successful `git -C dir ARGS`, if not empty.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}
