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
use common::{legacy_tables, Node, WRAPPER};
use std::path::Path;
use std::process::{Command, Output};

/// Sets up the private mount namespace, then execs its arguments. $1: an
/// empty directory of the test's own (for the overlay's layers), $2: the
/// directory whose files become `/etc/iptables-wrapper/`.
const IN_PRIVATE_MOUNTS: &str = r#"
scratch=$1; settings=$2; shift 2
mount -t tmpfs tmpfs "$scratch"
mkdir "$scratch/upper" "$scratch/work"
cp -a "$settings" "$scratch/upper/iptables-wrapper"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$scratch/upper,workdir=$scratch/work" /etc
mount -t tmpfs tmpfs /run
if [ -d /host ]; then mount -t tmpfs tmpfs /host; fi
exec "$@"
"#;

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
    let settings = node.path("settings");
    let _ = std::fs::remove_dir_all(&settings);
    std::fs::create_dir_all(&settings).unwrap();
    lay_out(&settings);
    let scratch = node.path("mounts");
    std::fs::create_dir_all(&scratch).unwrap();
    let mut unshare = Command::new("unshare");
    unshare
        .args(["-m", "sh", "-ec", IN_PRIVATE_MOUNTS, "sh"])
        .arg(&scratch)
        .arg(&settings)
        .arg(command.get_program())
        .args(command.get_args());
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => unshare.env(name, value),
            None => unshare.env_remove(name),
        };
    }
    let out = unshare.output().unwrap();
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
    let empty = node.path("empty-sbin");
    std::fs::create_dir_all(&empty).unwrap();
    let sbin = format!("{}:relative-sbin\n", empty.display());
    let out = with_settings(
        &node,
        &[("IPTABLES_WRAPPER_SBIN", &sbin), ("IPTABLES_MODE", "nft")],
        &mut cleared(&node.bin.join("iptables"), &["-V"]),
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for expected in [
        "empty-sbin/xtables-nft-multi",
        "\"relative-sbin\"",
        "/etc/iptables-wrapper/IPTABLES_WRAPPER_SBIN",
    ] {
        assert!(stderr.contains(expected), "{expected:?} missing from: {stderr}");
    }
}

#[test]
fn invalid_settings_files_are_one_line_errors_and_nothing_runs() {
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
    let nft = Command::new("nft").args(["list", "ruleset"]).output().unwrap();
    assert!(nft.stdout.is_empty(), "no backend ran");
}

#[test]
fn detect_shows_where_each_setting_came_from() {
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
