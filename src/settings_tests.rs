//! The settings' unit tests: files, environment and their precedence.

use super::*;

fn file(name: &'static str, value: &str) -> FileValue {
    FileValue {
        name,
        path: Path::new(SETTINGS_DIR).join(name),
        line: 1,
        value: value.as_bytes().to_vec(),
    }
}

fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
    move |name| {
        pairs
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, value)| OsString::from(value))
    }
}

#[test]
fn file_values() {
    assert_eq!(parse_file(b"nft\n"), Ok(Some((1, &b"nft"[..]))));
    assert_eq!(
        parse_file(b"# pinned for firewalld\n\n  legacy \r\n"),
        Ok(Some((3, &b"legacy"[..])))
    );
    assert_eq!(parse_file(b""), Ok(None));
    assert_eq!(parse_file(b"# nothing\n"), Ok(None));
    assert!(parse_file(b"nft\nlegacy\n")
        .unwrap_err()
        .starts_with("line 2: a second value \"legacy\""));
    assert!(parse_file(b"n\0ft").unwrap_err().starts_with("line 1: a NUL byte"));
}

#[test]
fn environment_wins_where_set_and_not_empty() {
    let files = [file(OVERRIDE_VAR, "nft"), file(HOST_ROOT_VAR, "/mnt/host")];
    let settings = resolve(&env(&[(OVERRIDE_VAR, "legacy")]), &files);
    assert_eq!(settings.mode, Some(Mode::Legacy));
    assert_eq!(settings.get(OVERRIDE_VAR).origin, Origin::Environment);
    assert_eq!(
        settings.get(OVERRIDE_VAR).unused[0].why,
        "the environment wins over the file"
    );
    assert_eq!(settings.value(HOST_ROOT_VAR), Some(OsStr::new("/mnt/host")));
    // An empty variable is no value: the file's applies.
    let settings = resolve(&env(&[(OVERRIDE_VAR, "")]), &files);
    assert_eq!(settings.mode, Some(Mode::Nft));
    assert!(matches!(
        settings.get(OVERRIDE_VAR).origin,
        Origin::File { line: 1, .. }
    ));
    // "auto" is a value: it overrides the file's pin.
    let settings = resolve(&env(&[(OVERRIDE_VAR, "auto")]), &files);
    assert_eq!(settings.mode, None);
    assert_eq!(settings.get(OVERRIDE_VAR).origin, Origin::Environment);
    assert_eq!(settings.get(SBIN_VAR).origin, Origin::Default);
    assert!(settings.invalid.is_none());
}

#[test]
fn a_relative_host_root_is_ignored_and_an_invalid_file_is_an_error() {
    let files = [file(HOST_ROOT_VAR, "/mnt/host"), file(OVERRIDE_VAR, "bogus")];
    let settings = resolve(&env(&[(HOST_ROOT_VAR, "host"), (OVERRIDE_VAR, "nft")]), &files);
    assert_eq!(settings.value(HOST_ROOT_VAR), Some(OsStr::new("/mnt/host")));
    assert_eq!(settings.get(HOST_ROOT_VAR).unused[0].value, "host");
    assert_eq!(
        settings.invalid.unwrap().0,
        "/etc/iptables-wrapper/IPTABLES_MODE line 1: invalid IPTABLES_MODE=\"bogus\": expected nft, nf_tables, legacy, auto or empty (case-insensitive)"
    );
}
