//! Settings that no caller can strip: files in `/etc/iptables-wrapper/`,
//! read on every call, with the environment winning where it gives a value.
//!
//! The settings directory is at a fixed path, so each test runs the wrapper
//! in a private mount namespace (`unshare -m`) where an overlay over `/etc`
//! adds it and a tmpfs covers `/run` (and `/host`, if this machine has one):
//! nothing reaches the machine's own `/etc` or `/run`, and a call whose
//! environment is cleared (`env -i`, as firewalld and conmon do) still finds
//! nothing of the machine's.

mod common;

use common::OutputWithin as _;
use common::{legacy_tables, Node, WRAPPER};
use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Sets up the private mount namespace, then execs its arguments. $1: an
/// empty directory of the test's own (for the overlay's layers), $2: the
/// directory whose files become `/etc/iptables-wrapper/`, $3: `ro` to mount
/// that directory read-only (as kubelet mounts a ConfigMap volume), else `rw`.
const IN_PRIVATE_MOUNTS: &str = r#"
scratch=$1; settings=$2; access=$3; shift 3
mount -t tmpfs tmpfs "$scratch"
mkdir "$scratch/upper" "$scratch/work"
cp -a "$settings" "$scratch/upper/iptables-wrapper"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$scratch/upper,workdir=$scratch/work" /etc
if [ "$access" = ro ]; then
    mount --bind /etc/iptables-wrapper /etc/iptables-wrapper
    mount -o remount,bind,ro /etc/iptables-wrapper
fi
mount -t tmpfs tmpfs /run
if [ -d /host ]; then mount -t tmpfs tmpfs /host; fi
exec "$@"
"#;

/// How the settings directory is mounted, and what the call reads.
#[derive(Clone, Copy, Default)]
struct Call<'a> {
    read_only: bool,
    stdin: Option<&'a [u8]>,
}

/// `command` (program and arguments) run with `files` (name, contents) as
/// the settings directory, in the node's network namespace.
fn with_settings(node: &Node, files: &[(&str, &str)], command: &mut Command) -> Output {
    with_layout(
        node,
        &|settings| {
            for (name, contents) in files {
                std::fs::write(settings.join(name), contents).unwrap();
            }
        },
        command,
    )
}

/// `command` run with the settings directory that `lay_out` makes in the
/// (empty) directory it is given.
fn with_layout(node: &Node, lay_out: &dyn Fn(&Path), command: &mut Command) -> Output {
    with_layout_as(node, lay_out, command, Call::default())
}

/// [`with_layout`], the directory mounted and the call's stdin as `call`
/// says; a call still running after 20 s is killed (exit status 124).
fn with_layout_as(node: &Node, lay_out: &dyn Fn(&Path), command: &mut Command, call: Call) -> Output {
    let settings = node.path("settings");
    let _ = std::fs::remove_dir_all(&settings);
    std::fs::create_dir_all(&settings).unwrap();
    lay_out(&settings);
    let scratch = node.path("mounts");
    std::fs::create_dir_all(&scratch).unwrap();
    let mut unshare = Command::new("timeout");
    unshare
        .args(["20", "unshare", "-m", "sh", "-ec", IN_PRIVATE_MOUNTS, "sh"])
        .arg(&scratch)
        .arg(&settings)
        .arg(if call.read_only { "ro" } else { "rw" })
        .arg(command.get_program())
        .args(command.get_args());
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => unshare.env(name, value),
            None => unshare.env_remove(name),
        };
    }
    let out = match call.stdin {
        None => unshare.output_within_limit().unwrap(),
        Some(input) => {
            let mut child = unshare
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(input).unwrap();
            common::wait_within(child, common::CHILD_LIMIT, "child did not end")
        }
    };
    assert!(
        !Path::new("/etc/iptables-wrapper").exists(),
        "the machine's /etc is untouched"
    );
    out
}

/// A call as firewalld makes it: the environment is `LANG=C` alone.
fn cleared(program: &Path, args: &[&str]) -> Command {
    let mut command = Command::new("env");
    command.args(["-i", "LANG=C"]).arg(program).args(args);
    command
}

/// Legacy holds rules, nft none, no host link: detection says legacy.
fn counts_say_legacy(node: &Node) {
    node.sh("iptables-legacy -A INPUT -j ACCEPT; iptables-legacy -A INPUT -j DROP; iptables-legacy -A FORWARD -j DROP");
    assert_eq!(node.version_mode("iptables"), "legacy");
}

fn mode_of(out: &Output) -> &'static str {
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    if stdout.contains("(nf_tables)") {
        "nft"
    } else if stdout.contains("(legacy)") {
        "legacy"
    } else {
        panic!("unexpected -V output: {stdout}")
    }
}

#[test]
fn a_file_pins_the_mode_for_a_caller_that_clears_the_environment() {
    common::root_or_skip!();
    let node = Node::new("settings-cleared");
    counts_say_legacy(&node);
    let out = with_settings(
        &node,
        &[("IPTABLES_MODE", "nft\n")],
        &mut cleared(&node.bin.join("iptables"), &["-N", "FIREWALLD-TEST"]),
    );
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    let nft = common::sh("iptables-nft -S");
    assert!(nft.contains("-N FIREWALLD-TEST"), "the chain went to nft: {nft}");
    let legacy = common::sh("iptables-legacy-save");
    assert!(!legacy.contains("FIREWALLD-TEST"), "and not to legacy: {legacy}");
    // ip6tables-restore as podman's teardown runs it, with only PATH.
    let out = with_settings(
        &node,
        &[("IPTABLES_MODE", "# pinned for callers without our environment\nnft\n")],
        Command::new("env")
            .args(["-i", "PATH=/usr/sbin:/usr/bin"])
            .arg(node.bin.join("ip6tables"))
            .arg("-V"),
    );
    assert_eq!(mode_of(&out), "nft");
}

#[test]
fn the_environment_wins_where_it_gives_a_value() {
    common::root_or_skip!();
    let node = Node::new("settings-env-wins");
    counts_say_legacy(&node);
    let pinned = [("IPTABLES_MODE", "nft\n")];
    let version = |mode: Option<&str>| {
        let mut command = node.command("iptables");
        command.arg("-V");
        if let Some(mode) = mode {
            command.env("IPTABLES_MODE", mode);
        }
        mode_of(&with_settings(&node, &pinned, &mut command))
    };
    assert_eq!(version(None), "nft", "the file pins nft");
    assert_eq!(version(Some("")), "nft", "an empty variable gives no value");
    assert_eq!(version(Some("legacy")), "legacy", "the environment wins");
    assert_eq!(version(Some("auto")), "legacy", "auto in the environment detects again");
}

#[test]
fn other_settings_come_from_files_too() {
    common::root_or_skip!();
    let node = Node::new("settings-others");
    // The host root from a file: its link decides, for a cleared caller.
    node.set_host_link("iptables", "/usr/sbin/iptables-legacy");
    let host_root = node.host_root.to_str().unwrap().to_string();
    let run_dir = node.path("run-from-file");
    let files = [
        ("IPTABLES_WRAPPER_HOST_ROOT", host_root.as_str()),
        ("IPTABLES_WRAPPER_RUN_DIR", run_dir.to_str().unwrap()),
    ];
    let out = with_settings(&node, &files, &mut cleared(&node.bin.join("iptables"), &["-V"]));
    assert_eq!(mode_of(&out), "legacy");
    assert!(
        run_dir.join("warnings").is_file(),
        "the record is kept in the run directory the file names"
    );
    // The backends' directory from a file, with a relative entry named
    // when nothing is found.
    let empty = trusted_dir("empty-sbin");
    let sbin = format!("{}:relative-sbin\n", empty.display());
    let out = with_settings(
        &node,
        &[("IPTABLES_WRAPPER_SBIN", &sbin), ("IPTABLES_MODE", "nft")],
        &mut cleared(&node.bin.join("iptables"), &["-V"]),
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let tried = empty.join("xtables-nft-multi").display().to_string();
    for expected in [
        tried.as_str(),
        "\"relative-sbin\"",
        "/etc/iptables-wrapper/IPTABLES_WRAPPER_SBIN",
    ] {
        assert!(stderr.contains(expected), "{expected:?} missing from: {stderr}");
    }
    remove_trusted_dir(&empty);
}

#[test]
fn invalid_settings_files_are_one_line_errors_and_nothing_runs() {
    common::root_or_skip!();
    let node = Node::new("settings-invalid");
    // (the settings files, words the error must contain)
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: [Case; 5] = [
        (
            &[("IPTABLES_MODE", "# pinned\nbogus\n")],
            &[
                "/etc/iptables-wrapper/IPTABLES_MODE line 2",
                "\"bogus\"",
                "nft",
                "legacy",
            ],
        ),
        (
            &[("IPTABLES_MODE", "nft\nlegacy\n")],
            &["/etc/iptables-wrapper/IPTABLES_MODE", "line 2", "one value"],
        ),
        (
            &[("IPTABLES_MDOE", "nft\n")],
            &["/etc/iptables-wrapper/IPTABLES_MDOE", "not a setting", "IPTABLES_MODE"],
        ),
        (
            &[("IPTABLES_WRAPPER_LOG", "debug\n")],
            &["/etc/iptables-wrapper/IPTABLES_WRAPPER_LOG", "cannot be set by file"],
        ),
        (
            // Checked even where the environment gives the value.
            &[("IPTABLES_MODE", "n\u{1b}[31mft")],
            &["line 1", "\"n\\u{1b}[31mft\""],
        ),
    ];
    for (files, words) in cases {
        for name in ["iptables", "ip6tables-restore"] {
            let out = with_settings(
                &node,
                files,
                node.command(name)
                    .env("IPTABLES_MODE", "nft")
                    .args(["-A", "INPUT", "-j", "ACCEPT"]),
            );
            assert_eq!(out.status.code(), Some(2), "{files:?}: {out:?}");
            assert!(out.stdout.is_empty());
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(stderr.ends_with("; nothing was run\n"), "{stderr}");
            assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
            for word in words {
                assert!(stderr.contains(word), "{word:?} missing from: {stderr}");
            }
        }
        let detect = with_settings(&node, files, node.wrapper().arg("detect"));
        assert_eq!(detect.status.code(), Some(2), "{detect:?}");
    }
    assert!(legacy_tables("ip_tables_names").is_empty(), "no backend ran");
    let nft = Command::new("nft")
        .args(["list", "ruleset"])
        .output_within_limit()
        .unwrap();
    assert!(nft.stdout.is_empty(), "no backend ran");
}

/// A new directory whose every ancestor only root may write, wherever the
/// checkout is (a clone under /tmp has a world-writable ancestor, and
/// nothing under one is trusted): /var/lib/iptables-wrapper-tests/NAME-PID.
fn trusted_dir(name: &str) -> PathBuf {
    let dir = Path::new(TRUSTED_TEST_ROOT).join(format!("{name}-{}", std::process::id()));
    // Another test may remove the emptied parent between the two mkdirs.
    for _ in 0..5 {
        if std::fs::create_dir_all(&dir).is_ok() && dir.is_dir() {
            break;
        }
    }
    set_mode(Path::new(TRUSTED_TEST_ROOT), 0o755);
    dir
}

/// Where [`trusted_dir`] makes its directories.
const TRUSTED_TEST_ROOT: &str = "/var/lib/iptables-wrapper-tests";

/// Removes a [`trusted_dir`], and its parent once empty.
fn remove_trusted_dir(dir: &Path) {
    std::fs::remove_dir_all(dir).unwrap();
    let _ = std::fs::remove_dir(TRUSTED_TEST_ROOT);
}

#[test]
fn detect_shows_where_each_setting_came_from() {
    common::root_or_skip!();
    let node = Node::new("settings-detect");
    let files = [("IPTABLES_MODE", "legacy\n"), ("IPTABLES_WRAPPER_SBIN", "/usr/sbin\n")];
    let mut json = node.wrapper();
    json.args(["detect", "--json"])
        .env("IPTABLES_WRAPPER_SBIN", "/usr/sbin:/sbin");
    let out = with_settings(&node, &files, &mut json);
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["mode"], "legacy");
    assert_eq!(report["decided_by"], "override");
    assert!(report["reason"]
        .as_str()
        .unwrap()
        .contains("/etc/iptables-wrapper/IPTABLES_MODE"));
    let setting = |name: &str| {
        report["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing from {}", report["settings"]))
            .clone()
    };
    let mode = setting("IPTABLES_MODE");
    assert_eq!(mode["value"], "legacy");
    assert_eq!(mode["source"], "file");
    assert_eq!(mode["file"], "/etc/iptables-wrapper/IPTABLES_MODE");
    assert_eq!(mode["line"], 1);
    let sbin = setting("IPTABLES_WRAPPER_SBIN");
    assert_eq!(sbin["value"], "/usr/sbin:/sbin");
    assert_eq!(sbin["source"], "environment");
    assert_eq!(sbin["unused"][0]["value"], "/usr/sbin");
    assert_eq!(sbin["unused"][0]["source"], "file");
    let host_root = setting("IPTABLES_WRAPPER_HOST_ROOT");
    assert_eq!(host_root["source"], "environment");
    assert_eq!(host_root["value"], node.host_root.to_str().unwrap());
    let run_dir = setting("IPTABLES_WRAPPER_RUN_DIR");
    assert_eq!(run_dir["source"], "environment");
    // Without any: the defaults, said as such.
    let out = with_settings(&node, &[], cleared(Path::new(WRAPPER), &["detect"]).arg("--json"));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for setting in report["settings"].as_array().unwrap() {
        assert_eq!(setting["source"], "default", "{setting}");
        assert!(
            setting["value"].is_null() && setting["default"].is_string(),
            "{setting}"
        );
    }
    // The full text report says the same.
    let out = with_settings(&node, &files, node.wrapper().args(["detect", "-v"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("legacy for iptables: ") && text.lines().next().unwrap().contains("IPTABLES_MODE"),
        "{text}"
    );
    assert!(
        text.contains("IPTABLES_MODE: legacy  (file /etc/iptables-wrapper/IPTABLES_MODE line 1)"),
        "{text}"
    );
    assert!(text.contains("IPTABLES_WRAPPER_SBIN: /usr/sbin  (file"), "{text}");
}

#[test]
fn a_configmap_volume_is_read_as_kubelet_lays_it_out() {
    common::root_or_skip!();
    // kubelet's layout: the keys' files in a timestamped directory, `..data`
    // linked to it, and each key a link through `..data`.
    let node = Node::new("settings-configmap");
    counts_say_legacy(&node);
    let lay_out = |mode: &'static str| {
        move |settings: &Path| {
            let version = settings.join("..2026_12_01_11_40_00.123456789");
            std::fs::create_dir(&version).unwrap();
            std::fs::write(version.join("IPTABLES_MODE"), mode).unwrap();
            std::os::unix::fs::symlink(version.file_name().unwrap(), settings.join("..data")).unwrap();
            std::os::unix::fs::symlink("..data/IPTABLES_MODE", settings.join("IPTABLES_MODE")).unwrap();
        }
    };
    let out = with_layout(
        &node,
        &lay_out("nft"),
        &mut cleared(&node.bin.join("iptables"), &["-V"]),
    );
    assert_eq!(mode_of(&out), "nft");
    let out = with_layout(
        &node,
        &lay_out("bogus"),
        &mut cleared(&node.bin.join("iptables"), &["-V"]),
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("/etc/iptables-wrapper/IPTABLES_MODE line 1"));
}

/// Asserts that `out` is the refusal of bad settings: exit 2, nothing on
/// stdout, one line on stderr holding each of `words`.
fn assert_refused(out: &Output, words: &[&str]) {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.ends_with("; nothing was run\n"), "{stderr}");
    for word in words {
        assert!(stderr.contains(word), "{word:?} missing from: {stderr}");
    }
    eprintln!("refused as expected: {stderr}");
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Gives `path` (not what a link leads to) to uid and gid 65534 (nobody).
fn give_to_nobody(path: &Path) {
    std::os::unix::fs::lchown(path, Some(65534), Some(65534)).unwrap();
}

#[test]
fn a_file_another_user_owns_or_may_write_is_refused() {
    common::root_or_skip!();
    let node = Node::new("settings-untrusted-file");
    // The program another user would have root run: it leaves a mark.
    let sbin = node.path("their-sbin");
    let mark = node.path("their-program-ran");
    std::fs::create_dir_all(&sbin).unwrap();
    std::fs::write(
        sbin.join("iptables-nft"),
        format!("#!/bin/sh\ntouch {}\n", mark.display()),
    )
    .unwrap();
    set_mode(&sbin.join("iptables-nft"), 0o755);
    let sbin_value = format!("{}\n", sbin.display());
    let sbin_value = sbin_value.as_str();
    type LayOut<'a> = Box<dyn Fn(&Path) + 'a>;
    // (how the file is made, words the refusal must hold)
    let cases: [(LayOut, &[&str]); 5] = [
        (
            Box::new(|settings: &Path| {
                let file = settings.join("IPTABLES_WRAPPER_SBIN");
                std::fs::write(&file, sbin_value).unwrap();
                set_mode(&file, 0o666);
                give_to_nobody(&file);
            }),
            &[
                "/etc/iptables-wrapper/IPTABLES_WRAPPER_SBIN",
                "owned by uid 65534",
                "chown root",
            ],
        ),
        (
            Box::new(|settings: &Path| {
                let file = settings.join("IPTABLES_WRAPPER_SBIN");
                std::fs::write(&file, sbin_value).unwrap();
                set_mode(&file, 0o644);
                give_to_nobody(&file);
            }),
            &["owned by uid 65534"],
        ),
        (
            Box::new(|settings: &Path| {
                let file = settings.join("IPTABLES_WRAPPER_SBIN");
                std::fs::write(&file, sbin_value).unwrap();
                set_mode(&file, 0o666);
            }),
            &["(mode 0666) is writable by every user", "chmod go-w"],
        ),
        (
            Box::new(|settings: &Path| {
                let file = settings.join("IPTABLES_WRAPPER_SBIN");
                std::fs::write(&file, sbin_value).unwrap();
                set_mode(&file, 0o620);
            }),
            &["(mode 0620) is writable by its group"],
        ),
        (
            // A root-owned file behind a link another user owns.
            Box::new(|settings: &Path| {
                std::fs::write(settings.join("..value"), sbin_value).unwrap();
                let link = settings.join("IPTABLES_WRAPPER_SBIN");
                symlink("..value", &link).unwrap();
                give_to_nobody(&link);
            }),
            &["/etc/iptables-wrapper/IPTABLES_WRAPPER_SBIN is owned by uid 65534"],
        ),
    ];
    for (lay_out, words) in &cases {
        let mut call = node.command("iptables");
        call.env("IPTABLES_MODE", "nft").args(["-A", "INPUT", "-j", "ACCEPT"]);
        let out = with_layout(&node, lay_out, &mut call);
        assert_refused(&out, words);
        assert!(!mark.exists(), "their program never ran");
    }
    let nft = Command::new("nft")
        .args(["list", "ruleset"])
        .output_within_limit()
        .unwrap();
    assert!(nft.stdout.is_empty(), "no backend ran");
}

#[test]
fn backends_a_trusted_file_chooses_get_the_files_own_checks() {
    common::root_or_skip!();
    let node = Node::new("settings-untrusted-sbin");
    let mark = node.path("their-program-ran");
    let dirs = trusted_dir("sbin");
    let program = format!("#!/bin/sh\necho BACKEND-RAN-AS-$(id -u)\ntouch {}\n", mark.display());
    // A directory of backends, as `lay_out` leaves it, named by the file.
    let call_with = |name: &str, lay_out: &dyn Fn(&Path)| {
        let sbin = dirs.join(name);
        std::fs::create_dir_all(&sbin).unwrap();
        std::fs::write(sbin.join("iptables-nft"), &program).unwrap();
        set_mode(&sbin.join("iptables-nft"), 0o755);
        lay_out(&sbin);
        let value = format!("{}\n", sbin.display());
        let files = [("IPTABLES_WRAPPER_SBIN", value.as_str()), ("IPTABLES_MODE", "nft")];
        with_settings(&node, &files, &mut cleared(&node.bin.join("iptables"), &["-S"]))
    };
    type LayOut = Box<dyn Fn(&Path)>;
    let cases: [(&str, LayOut, &[&str]); 4] = [
        (
            "their-dir",
            Box::new(give_to_nobody),
            &["their-dir is owned by uid 65534"],
        ),
        (
            "their-program",
            Box::new(|sbin| give_to_nobody(&sbin.join("iptables-nft"))),
            &["their-program/iptables-nft is owned by uid 65534"],
        ),
        (
            "open-program",
            Box::new(|sbin| set_mode(&sbin.join("iptables-nft"), 0o777)),
            &["open-program/iptables-nft", "writable by every user"],
        ),
        (
            // A root-owned link leading into a directory another user owns.
            "linked",
            Box::new(|sbin| {
                let theirs = sbin.parent().unwrap().join("linked-theirs");
                std::fs::create_dir_all(&theirs).unwrap();
                std::fs::rename(sbin.join("iptables-nft"), theirs.join("iptables-nft")).unwrap();
                give_to_nobody(&theirs);
                symlink(theirs.join("iptables-nft"), sbin.join("iptables-nft")).unwrap();
            }),
            &["linked-theirs is owned by uid 65534"],
        ),
    ];
    for (name, lay_out, words) in &cases {
        let out = call_with(name, lay_out);
        assert_eq!(out.status.code(), Some(2), "{name}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        for word in words.iter().chain(&["nothing was run"]) {
            assert!(stderr.contains(word), "{word:?} missing from: {stderr}");
        }
        assert!(
            out.stdout.is_empty() && !mark.exists(),
            "{name}: their program never ran"
        );
    }
    // A root-owned directory and program still run.
    let out = call_with("trusted-sbin", &|_| {});
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "BACKEND-RAN-AS-0\n");
    remove_trusted_dir(&dirs);
}

#[test]
fn a_file_in_a_directory_others_may_write_is_refused() {
    common::root_or_skip!();
    let node = Node::new("settings-untrusted-dir");
    counts_say_legacy(&node);
    // (the settings directory's mode, a subdirectory's, words)
    let cases: [(u32, Option<u32>, &[&str]); 4] = [
        (
            0o775,
            None,
            &["/etc/iptables-wrapper (mode 0775) is writable by its group"],
        ),
        (
            0o777,
            None,
            &["/etc/iptables-wrapper (mode 0777) is writable by every user"],
        ),
        (
            0o1777,
            None,
            &["(mode 1777) is writable by every user (the sticky bit does not stop anyone"],
        ),
        // The file is reached through a link into a directory its group may write.
        (
            0o755,
            Some(0o770),
            &["/etc/iptables-wrapper/..values (mode 0770) is writable by its group"],
        ),
    ];
    for (dir_mode, values_mode, words) in cases {
        let lay_out = |settings: &Path| match values_mode {
            None => std::fs::write(settings.join("IPTABLES_MODE"), "nft\n").unwrap(),
            Some(mode) => {
                let values = settings.join("..values");
                std::fs::create_dir(&values).unwrap();
                std::fs::write(values.join("IPTABLES_MODE"), "nft\n").unwrap();
                set_mode(&values, mode);
                symlink("..values/IPTABLES_MODE", settings.join("IPTABLES_MODE")).unwrap();
                set_mode(settings, dir_mode);
            }
        };
        let lay_out = |settings: &Path| {
            lay_out(settings);
            set_mode(settings, dir_mode);
        };
        let out = with_layout(&node, &lay_out, &mut cleared(&node.bin.join("iptables"), &["-V"]));
        assert_refused(&out, words);
        assert!(
            String::from_utf8_lossy(&out.stderr).starts_with("iptables-wrapper: the settings "),
            "{out:?}"
        );
    }
    // A link to a file in a world-writable directory elsewhere.
    let elsewhere = node.path("sticky");
    std::fs::create_dir_all(&elsewhere).unwrap();
    set_mode(&elsewhere, 0o1777);
    std::fs::write(elsewhere.join("mode"), "nft\n").unwrap();
    let out = with_layout(
        &node,
        &|settings: &Path| symlink(elsewhere.join("mode"), settings.join("IPTABLES_MODE")).unwrap(),
        &mut cleared(&node.bin.join("iptables"), &["-V"]),
    );
    assert_refused(
        &out,
        &["/etc/iptables-wrapper/IPTABLES_MODE", "is writable by every user"],
    );
}

#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    common::root_or_skip!();
    let node = Node::new("settings-fifo");
    let lay_out = |settings: &Path| {
        let fifo =
            std::ffi::CString::new(settings.join("IPTABLES_MODE").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    };
    let started = std::time::Instant::now();
    let out = with_layout(&node, &lay_out, &mut cleared(&node.bin.join("iptables"), &["-V"]));
    assert_ne!(
        out.status.code(),
        Some(124),
        "the call waited for a writer until killed"
    );
    assert_refused(
        &out,
        &["/etc/iptables-wrapper/IPTABLES_MODE is a FIFO (named pipe), not a regular file"],
    );
    assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());
}

#[test]
fn a_link_to_the_callers_stdin_is_refused() {
    common::root_or_skip!();
    let node = Node::new("settings-stdin");
    counts_say_legacy(&node);
    let lay_out = |settings: &Path| symlink("/proc/self/fd/0", settings.join("IPTABLES_MODE")).unwrap();
    // A caller whose stdin says nft: its value must not pin anything.
    let call = Call {
        stdin: Some(b"nft\n"),
        ..Call::default()
    };
    let out = with_layout_as(&node, &lay_out, &mut cleared(&node.bin.join("iptables"), &["-V"]), call);
    assert_refused(
        &out,
        &[
            "the settings file /etc/iptables-wrapper/IPTABLES_MODE",
            "/fd/pipe:[",
            "does not exist",
        ],
    );
    // Stdin /dev/null.
    let out = with_layout(&node, &lay_out, &mut cleared(&node.bin.join("iptables"), &["-V"]));
    assert_refused(&out, &["/dev/null is a character device, not a regular file"]);
}

/// Writes `keys` (name, value) as the next version of the ConfigMap volume
/// `dir`, in the steps of kubelet's AtomicWriter: the values into a new
/// timestamped directory, a `..data_tmp` link to it renamed over `..data`
/// (atomic), then (unless `stop_after_swap`) a link for each new key,
/// removal of the links of keys this version no longer has, and removal of
/// the previous version's directory.
fn kubelet_writes(dir: &Path, version: u32, keys: &[(&str, &str)], stop_after_swap: bool) {
    let version_dir = dir.join(format!("..2026_12_01_11_40_{version:02}.123456789"));
    std::fs::create_dir(&version_dir).unwrap();
    set_mode(&version_dir, 0o755);
    for (name, value) in keys {
        std::fs::write(version_dir.join(name), value).unwrap();
        set_mode(&version_dir.join(name), 0o644);
    }
    let previous = std::fs::read_link(dir.join("..data")).ok();
    symlink(version_dir.file_name().unwrap(), dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    if stop_after_swap {
        return;
    }
    for (name, _) in keys {
        if dir.join(name).symlink_metadata().is_err() {
            symlink(Path::new("..data").join(name), dir.join(name)).unwrap();
        }
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name();
        let name = name.to_str().unwrap();
        if !name.starts_with('.') && !keys.iter().any(|(key, _)| *key == name) {
            std::fs::remove_file(dir.join(name)).unwrap();
        }
    }
    if let Some(previous) = previous {
        std::fs::remove_dir_all(dir.join(previous)).unwrap();
    }
}

#[test]
fn a_configmap_volume_as_kubelet_mounts_it_is_trusted_only_read_only() {
    common::root_or_skip!();
    let node = Node::new("settings-configmap-mount");
    counts_say_legacy(&node);
    // kubelet's volume directory is an emptyDir's: mode 0777, root's.
    let lay_out = |settings: &Path| {
        set_mode(settings, 0o777);
        kubelet_writes(settings, 1, &[("IPTABLES_MODE", "nft\n")], false);
    };
    let read_only = Call {
        read_only: true,
        ..Call::default()
    };
    let out = with_layout_as(
        &node,
        &lay_out,
        &mut cleared(&node.bin.join("iptables"), &["-V"]),
        read_only,
    );
    assert_eq!(mode_of(&out), "nft", "mounted read-only, nobody may write it");
    let out = with_layout(&node, &lay_out, &mut cleared(&node.bin.join("iptables"), &["-V"]));
    assert_refused(&out, &["/etc/iptables-wrapper (mode 0777) is writable by every user"]);
}

#[test]
fn a_configmap_key_being_removed_is_absent_not_an_error() {
    common::root_or_skip!();
    let node = Node::new("settings-configmap-removal");
    counts_say_legacy(&node);
    let first = [("IPTABLES_MODE", "nft\n"), ("IPTABLES_WRAPPER_SBIN", "/usr/sbin\n")];
    let next = [("IPTABLES_WRAPPER_SBIN", "/usr/sbin\n")];
    let read_only = Call {
        read_only: true,
        ..Call::default()
    };
    let version = |lay_out: &dyn Fn(&Path)| {
        with_layout_as(
            &node,
            lay_out,
            &mut cleared(&node.bin.join("iptables"), &["-V"]),
            read_only,
        )
    };
    let pinned = |settings: &Path| kubelet_writes(settings, 1, &first, false);
    assert_eq!(mode_of(&version(&pinned)), "nft", "the first version pins nft");
    // The moment after the swap: IPTABLES_MODE's link leads into the new
    // version, which has no such key.
    let swapped = |settings: &Path| {
        pinned(settings);
        kubelet_writes(settings, 2, &next, true);
        assert!(settings.join("IPTABLES_MODE").symlink_metadata().is_ok());
        assert!(!settings.join("IPTABLES_MODE").exists(), "the link dangles");
    };
    let out = version(&swapped);
    assert!(out.stderr.is_empty(), "{out:?}");
    assert_eq!(mode_of(&out), "legacy", "no pin: the rule counts decide");
    let done = |settings: &Path| {
        pinned(settings);
        kubelet_writes(settings, 2, &next, false);
    };
    assert_eq!(mode_of(&version(&done)), "legacy");
    // A link that dangles anywhere else is a mistake, named.
    let dangling = |settings: &Path| symlink("/etc/no-such-mode", settings.join("IPTABLES_MODE")).unwrap();
    assert_refused(
        &version(&dangling),
        &["/etc/no-such-mode does not exist (the link /etc/iptables-wrapper/IPTABLES_MODE leads there)"],
    );
}

#[test]
fn trusted_files_and_links_still_work() {
    common::root_or_skip!();
    let node = Node::new("settings-trusted");
    counts_say_legacy(&node);
    // Root's, writable by root alone, behind links relative (climbing
    // with "..") and absolute; the directory readable by root alone.
    let lay_out = |settings: &Path| {
        let values = settings.join("..values");
        std::fs::create_dir(&values).unwrap();
        std::fs::write(values.join("mode"), "nft\n").unwrap();
        set_mode(&values.join("mode"), 0o600);
        std::fs::write(values.join("sbin"), "/usr/sbin\n").unwrap();
        symlink("../iptables-wrapper/..values/mode", settings.join("IPTABLES_MODE")).unwrap();
        symlink(
            "/etc/iptables-wrapper/..values/sbin",
            settings.join("IPTABLES_WRAPPER_SBIN"),
        )
        .unwrap();
        set_mode(settings, 0o700);
    };
    let out = with_layout(&node, &lay_out, &mut cleared(&node.bin.join("iptables"), &["-V"]));
    assert!(out.stderr.is_empty(), "{out:?}");
    assert_eq!(mode_of(&out), "nft");
    let out = with_layout(&node, &lay_out, node.wrapper().args(["detect", "--json"]));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["decided_by"], "override", "{report}");
}
