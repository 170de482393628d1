//! How text from outside is shown: every text shown to a person, in the
//! `detect` report, on stderr or in the warnings record, goes through
//! [`printable`], so it stays one line and cannot carry terminal escapes or
//! forged log lines, nor hide or reorder text (format characters such as
//! the byte-order mark and bidirectional controls are escaped as control
//! characters are); bytes that are not UTF-8 are shown as `\xNN` wherever
//! they come from, paths included ([`Shown`], never U+FFFD); JSON strings
//! are escaped by [`string`]; saved rules are shown byte for byte by
//! [`saved_line`]; a path in a command line printed to be run (an undo) is
//! one shell word by [`shell_word`].
//!
//! Each text is escaped once, in one way: reasons, evidence and warnings are
//! kept raw and escaped where they are shown; an error that names a value
//! from outside (an environment variable, a settings file, an argument)
//! escapes that value itself with [`quoted`], and is shown as it is. What it
//! cannot know: whether a text was escaped already (the callers keep texts
//! raw until they show them).

use std::borrow::Cow;
use std::fmt::Write;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// The 256 code points that stand, in a text, for bytes that are not
/// UTF-8 (the last of the Supplementary Private Use Area-B): U+10FF00 plus
/// the byte. [`printable`] shows them as `\xNN`, [`string`] as the text
/// `\xNN` too, so a byte shows one way wherever it goes.
const BYTE_MARKS: u32 = 0x10FF00;

/// `bytes` as text, losing nothing: each byte that is not part of valid
/// UTF-8 becomes its mark (and so does each byte of a character that
/// happens to be a mark), to be shown as `\xNN`.
pub fn lossless(bytes: &[u8]) -> Cow<'_, str> {
    let has_marks = |text: &str| text.chars().any(is_mark);
    match std::str::from_utf8(bytes) {
        Ok(text) if !has_marks(text) => Cow::Borrowed(text),
        _ => {
            let mut out = String::with_capacity(bytes.len() + 8);
            let mark = |out: &mut String, byte: u8| {
                out.push(char::from_u32(BYTE_MARKS + u32::from(byte)).expect("a valid code point"))
            };
            for chunk in bytes.utf8_chunks() {
                for c in chunk.valid().chars() {
                    if is_mark(c) {
                        c.encode_utf8(&mut [0; 4]).bytes().for_each(|byte| mark(&mut out, byte));
                    } else {
                        out.push(c);
                    }
                }
                chunk.invalid().iter().for_each(|byte| mark(&mut out, *byte));
            }
            Cow::Owned(out)
        }
    }
}

/// A path as text, losing nothing (see [`lossless`]): never `U+FFFD`, as
/// `Path::display` would show a byte that is not UTF-8. Every path the
/// wrapper shows goes through it.
pub trait Shown {
    fn shown(&self) -> Cow<'_, str>;
}

impl Shown for Path {
    fn shown(&self) -> Cow<'_, str> {
        lossless(self.as_os_str().as_bytes())
    }
}

/// The byte a mark stands for, if `c` is one.
fn marked_byte(c: char) -> Option<u8> {
    u8::try_from((c as u32).checked_sub(BYTE_MARKS)?).ok()
}

fn is_mark(c: char) -> bool {
    marked_byte(c).is_some()
}

/// Characters that show nothing, or change how what follows shows, yet
/// are not control characters: format characters (the byte-order mark,
/// bidirectional controls, zero-width spaces and joiners, soft hyphen,
/// tags), line and paragraph separators, fillers and variation selectors.
fn is_invisible(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x034F | 0x0600..=0x0605 | 0x061C | 0x06DD | 0x070F | 0x0890..=0x0891 | 0x08E2
        | 0x115F..=0x1160 | 0x17B4..=0x17B5 | 0x180B..=0x180F | 0x200B..=0x200F | 0x2028..=0x202E
        | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFFB
        | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A
        | 0xE0000..=0xE0FFF)
}

/// Whether `c` is shown escaped: a control character, an invisible one
/// ([`is_invisible`]), or a byte's mark.
fn needs_escape(c: char) -> bool {
    c.is_control() || is_invisible(c) || is_mark(c)
}

/// `text` with backslashes, control and invisible characters escaped
/// (`\\`, `\n`, `\t`, `\r`, `\u{1b}`, `\u{feff}`) and bytes that are not
/// UTF-8 shown as `\xNN`: one line, nothing a terminal or a log reader
/// would interpret, nothing hidden.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c == '\\' || needs_escape(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => push_escaped(&mut out, c),
        }
    }
    Cow::Owned(out)
}

/// `c`, or its escape if it needs one: `\xNN` for a byte's mark,
/// `\u{N}` otherwise.
fn push_escaped(out: &mut String, c: char) {
    match marked_byte(c) {
        Some(byte) => {
            let _ = write!(out, "\\x{byte:02x}");
        }
        None if needs_escape(c) => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        None => out.push(c),
    }
}

/// `bytes` as `printable` shows text, each byte that is not part of valid
/// UTF-8 shown as `\xNN`.
pub fn printable_bytes(bytes: &[u8]) -> Cow<'_, str> {
    match lossless(bytes) {
        Cow::Borrowed(text) => printable(text),
        Cow::Owned(text) => Cow::Owned(printable(&text).into_owned()),
    }
}

/// A saved rule (a line of `iptables-save`) byte for byte, as the save
/// tool wrote it: only bytes that are not printable (control and invisible
/// characters, bytes that are not UTF-8) are shown as `\xNN`, each byte of
/// them; a backslash stays one backslash, so the line reads as the save.
pub fn saved_line(bytes: &[u8]) -> Cow<'_, str> {
    let text = lossless(bytes);
    if !text.chars().any(needs_escape) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match marked_byte(c) {
            Some(byte) => {
                let _ = write!(out, "\\x{byte:02x}");
            }
            None if needs_escape(c) => {
                for byte in c.encode_utf8(&mut [0; 4]).bytes() {
                    let _ = write!(out, "\\x{byte:02x}");
                }
            }
            None => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `bytes` as text for a JSON string, which [`string`] escapes in its own
/// way: each byte that is not UTF-8 shown there as the text `\xNN`.
pub fn bytes_shown(bytes: &[u8]) -> Cow<'_, str> {
    lossless(bytes)
}

/// A value from outside, for an error message: in double quotes, escaped
/// as `printable_bytes` does, with `"` as `\"`.
pub fn quoted(bytes: &[u8]) -> String {
    format!("\"{}\"", printable_bytes(bytes).replace('"', "\\\""))
}

/// `text` as one word of a POSIX shell's command line, to be run as
/// printed: as it is when it holds only characters no shell treats
/// specially, else in single quotes (a `'` as `'\''`). A character
/// [`printable`] escapes stays escaped (`\u{a}`, `\xNN`: one line, nothing
/// hidden), and the word then does not run as printed: see [`shell_safe`].
pub fn shell_word(text: &str) -> Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\'' => out.push_str("'\\''"),
            c => push_escaped(&mut out, c),
        }
    }
    out.push('\'');
    Cow::Owned(out)
}

/// Whether [`shell_word`] gives `text` as a word that runs as printed:
/// none of its characters is one [`printable`] escapes.
pub fn shell_safe(text: &str) -> bool {
    !text.chars().any(needs_escape)
}

/// A JSON string literal: control and invisible characters as `\uNNNN`
/// (a surrogate pair above U+FFFF), a byte that is not UTF-8 as the text
/// `\xNN` (its backslash escaped, as JSON has no such escape).
pub fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => match marked_byte(c) {
                Some(byte) => {
                    let _ = write!(out, "\\\\x{byte:02x}");
                }
                None if needs_escape(c) => {
                    for unit in c.encode_utf16(&mut [0; 2]) {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
                None => out.push(c),
            },
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::{lossless, printable, printable_bytes, quoted, saved_line, shell_safe, shell_word, string};

    #[test]
    fn invisible_characters_are_escaped_like_control_characters() {
        assert_eq!(printable("\u{feff}nft"), "\\u{feff}nft");
        assert_eq!(
            printable("a\u{202e}b\u{2066}c\u{200b}d"),
            "a\\u{202e}b\\u{2066}c\\u{200b}d"
        );
        assert_eq!(quoted("\u{feff}nft".as_bytes()), "\"\\u{feff}nft\"");
        assert_eq!(string("\u{feff}\u{e0041}"), "\"\\ufeff\\udb40\\udc41\"");
    }

    #[test]
    fn bytes_that_are_not_utf8_show_one_way_everywhere() {
        assert_eq!(printable_bytes(b"/host\xff/etc"), "/host\\xff/etc");
        assert_eq!(printable(&lossless(b"/host\xff/etc")), "/host\\xff/etc");
        assert_eq!(string(&lossless(b"a\xff")), "\"a\\\\xff\"");
        assert_eq!(saved_line(b"a\xff"), "a\\xff");
        // A character that is itself a byte's mark shows as its bytes.
        assert_eq!(printable_bytes("\u{10ff41}".as_bytes()), "\\xf4\\x8f\\xbd\\x81");
    }

    #[test]
    fn saved_rules_keep_their_backslashes() {
        let line = br#"-A INPUT -m comment --comment "a\\b \"c\"" -j ACCEPT"#;
        assert_eq!(saved_line(line).as_bytes(), line);
        let odd = "-A X --comment \"\x1b[31m\u{feff}\"";
        assert_eq!(
            saved_line(odd.as_bytes()),
            "-A X --comment \"\\x1b[31m\\xef\\xbb\\xbf\""
        );
        assert_eq!(saved_line("\u{202e}".as_bytes()), "\\xe2\\x80\\xae");
    }

    #[test]
    fn json_strings_escape() {
        assert_eq!(string("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        assert_eq!(string("\u{9b}"), "\"\\u009b\"");
    }

    #[test]
    fn printable_is_one_line_without_escapes() {
        assert_eq!(printable("/usr/sbin/iptables-nft"), "/usr/sbin/iptables-nft");
        assert_eq!(
            printable("a\nb\r\tc\u{1b}[31m\u{7f}\u{9b}d\\"),
            "a\\nb\\r\\tc\\u{1b}[31m\\u{7f}\\u{9b}d\\\\"
        );
    }

    #[test]
    fn quoted_escapes_once_and_shows_bytes() {
        assert_eq!(quoted(b"n\x1b[31mft"), "\"n\\u{1b}[31mft\"");
        assert_eq!(quoted(b"legacy\xff"), "\"legacy\\xff\"");
        assert_eq!(quoted(b"a\"b\\c\xc3\xa9\n\xff"), "\"a\\\"b\\\\c\u{e9}\\n\\xff\"");
    }

    #[test]
    fn a_shell_word_runs_as_printed() {
        assert_eq!(
            shell_word("/run/x/iptables-legacy.rules"),
            "/run/x/iptables-legacy.rules"
        );
        assert_eq!(shell_word("/run/my dir/b;x"), "'/run/my dir/b;x'");
        assert_eq!(shell_word("/a'b$c`d\\e"), "'/a'\\''b$c`d\\e'");
        assert_eq!(shell_word(""), "''");
        assert!(shell_safe("/run/my dir/b;x'$"));
        assert!(!shell_safe("/run/a\nb") && !shell_safe(&lossless(b"/run/\xff")));
        assert_eq!(shell_word("/a\nb"), "'/a\\u{a}b'");
    }
}
