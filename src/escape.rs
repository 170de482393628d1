//! How text from outside is shown: every text shown to a person, in the
//! `detect` report, on stderr or in the warnings record, goes through
//! [`printable`], so it stays one line and cannot carry terminal escapes or
//! forged log lines; bytes that are not UTF-8 are shown as `\xNN`; JSON
//! strings are escaped by [`string`].
//!
//! Each text is escaped once, in one way: reasons, evidence and warnings are
//! kept raw and escaped where they are shown; an error that names a value
//! from outside (an environment variable, a settings file, an argument)
//! escapes that value itself with [`quoted`], and is shown as it is. What it
//! cannot know: whether a text was escaped already (the callers keep texts
//! raw until they show them).

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with backslashes and control characters escaped (`\\`, `\n`,
/// `\t`, `\r`, `\u{1b}`): one line, nothing a terminal or a log reader
/// would interpret.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c == '\\' || c.is_control()) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `bytes` as `printable` shows text, each byte that is not part of valid
/// UTF-8 shown as `\xNN`.
pub fn printable_bytes(bytes: &[u8]) -> Cow<'_, str> {
    with_bytes_shown(bytes, printable)
}

/// `bytes` as text, each byte that is not part of valid UTF-8 shown as
/// `\xNN` and nothing else escaped: for a JSON string, which [`string`]
/// escapes in its own way.
pub fn bytes_shown(bytes: &[u8]) -> Cow<'_, str> {
    with_bytes_shown(bytes, |text| Cow::Borrowed(text))
}

/// `bytes` as text, each byte that is not part of valid UTF-8 shown as
/// `\xNN` and the valid parts passed through `show`.
fn with_bytes_shown<'a>(bytes: &'a [u8], show: fn(&str) -> Cow<'_, str>) -> Cow<'a, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => show(text),
        Err(_) => {
            let mut out = String::with_capacity(bytes.len() + 8);
            for chunk in bytes.utf8_chunks() {
                out.push_str(&show(chunk.valid()));
                for byte in chunk.invalid() {
                    let _ = write!(out, "\\x{byte:02x}");
                }
            }
            Cow::Owned(out)
        }
    }
}

/// A value from outside, for an error message: in double quotes, escaped
/// as `printable_bytes` does, with `"` as `\"`.
pub fn quoted(bytes: &[u8]) -> String {
    format!("\"{}\"", printable_bytes(bytes).replace('"', "\\\""))
}

/// A JSON string literal.
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
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::{printable, quoted, string};

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
}
