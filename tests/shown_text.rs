//! One escape for everything the wrapper shows: invisible and format
//! characters (a byte-order mark, bidirectional controls) escaped as
//! control characters are, bytes that are not UTF-8 shown as `\xNN` in
//! every place (values, host-root and link paths alike, never U+FFFD), and
//! `stale -v`'s rules byte for byte as the save tool wrote them. Each test
//! in a network namespace of its own, against the real backends.

mod common;

use common::OutputWithin as _;

use common::Node;
use iptables_wrapper::save_text;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// No raw invisible character, no replacement character.
fn hides_nothing(text: &str) -> bool {
    !text
        .chars()
        .any(|c| matches!(c as u32, 0xFEFF | 0x202A..=0x202E | 0x2066..=0x2069 | 0x200B..=0x200F | 0xFFFD))
}

#[test]
fn a_byte_order_mark_or_bidi_control_in_a_setting_is_shown_escaped() {
    common::root_or_skip!();
    let node = Node::new("shown-bom");
    for (value, shown) in [
        ("\u{feff}nft", "\"\\u{feff}nft\""),
        ("n\u{202e}tf", "\"n\\u{202e}tf\""),
        ("nft\u{200b}", "\"nft\\u{200b}\""),
    ] {
        let out = node
            .command("iptables")
            .env("IPTABLES_MODE", value)
            .arg("-V")
            .output_within_limit()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(shown), "{value:?}: {stderr}");
        assert!(hides_nothing(&stderr), "{stderr:?}");
    }
}

#[test]
fn bytes_that_are_not_utf8_in_host_paths_show_as_in_values() {
    common::root_or_skip!();
    let node = Node::new("shown-bytes");
    // A host root whose name holds the byte 0xff, with an alternatives
    // link whose target holds it too.
    let mut root = node.dir.clone().into_os_string();
    root.push(OsStr::from_bytes(b"/ro\xffot"));
    std::fs::create_dir_all(std::path::Path::new(&root).join("etc/alternatives")).unwrap();
    std::os::unix::fs::symlink(
        OsStr::from_bytes(b"/usr/sbin/iptables-n\xfft"),
        std::path::Path::new(&root).join("etc/alternatives/iptables"),
    )
    .unwrap();
    for args in [&["detect", "-v"][..], &["detect", "--json"]] {
        let out = node
            .wrapper()
            .env("IPTABLES_WRAPPER_HOST_ROOT", &root)
            .args(args)
            .output_within_limit()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(hides_nothing(&stdout), "{args:?}: {stdout}");
        let escape = if args[1] == "--json" { "\\\\x" } else { "\\x" };
        for shown in [format!("ro{escape}ffot"), format!("iptables-n{escape}fft")] {
            assert!(stdout.contains(&shown), "{args:?}: {shown} not in {stdout}");
        }
    }
}

#[test]
fn stale_v_shows_the_saved_rules_byte_for_byte() {
    common::root_or_skip!();
    let node = Node::new("shown-save");
    node.sh(r#"iptables-legacy -A INPUT -s 192.0.2.7/32 -m comment --comment 'a\b "quoted" \\ c' -j DROP"#);
    node.set_host_link("iptables", "/usr/sbin/iptables-nft");
    node.set_host_link("ip6tables", "/usr/sbin/ip6tables-nft");
    let save = common::sh("iptables-legacy-save -t filter");
    let saved: Vec<String> = save_text::lines(save.as_bytes())
        .filter_map(|line| match line {
            save_text::Line::Rule { rule, .. } => Some(String::from_utf8_lossy(rule).into_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(saved.len(), 1, "{save}");
    assert!(saved[0].contains('\\'), "the save escapes the comment: {save}");
    let out = node.wrapper().args(["stale", "-v"]).output_within_limit().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let shown: Vec<&str> = stdout
        .lines()
        .map(str::trim_start)
        .filter(|line| line.starts_with("-A INPUT -s 192.0.2.7"))
        .collect();
    assert_eq!(shown, saved, "{stdout}");
}
