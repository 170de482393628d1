//! Remembers nf_tables rule counts between calls, so that a call on an
//! unchanged ruleset does not pay for the same dump again.
//!
//! A count belongs to exactly one ruleset generation of one network
//! namespace, and is only ever reused for that: the key is the boot id
//! (`/proc/sys/kernel/random/boot_id`), the namespace's cookie
//! (`SO_NETNS_COOKIE`, Linux 5.14+, never reused within a boot, unlike the
//! namespace's inode number) and the nf_tables generation id (GETGEN, bumped
//! by every commit). Without a boot id or a cookie there is no cache. The
//! counts stored come from dumps of one generation ([`super::nft`]; a count
//! read while the generation moved is not stored), so each is the count of
//! exactly the generation it is stored under, but for what the checks there
//! cannot see (an aborted transaction's entries leaving the kernel's lists
//! mid-dump). So a count is stored *pending* and is served only once a
//! second count of the same namespace and generation agreed with it
//! (*confirmed*): a wrong count would otherwise be reused for as long as the
//! ruleset stays unchanged, which on a quiet node is hours. Each generation
//! is counted twice, then never again.
//!
//! Trust: the file is believed as far as the runtime directory is private.
//! Whoever can write it (root, or the wrapper's user) can make wrapped calls
//! believe any count; a caller drops one that contradicts the bounds it
//! reads anyway ([`super::KernelReader::compare_rule_counts`]), and `detect`
//! never serves one, it counts and says where the file disagrees.
//!
//! The file is `counts` in the wrapper's runtime directory
//! ([`crate::run_dir`]: private to the effective user, never followed
//! through symlinks, replaced whole by a rename), at most [`MAX_FILE_LEN`]
//! bytes. Anything unexpected in it (another format, a damaged or truncated
//! line, bounds out of order) makes the whole file count as empty; the next
//! store replaces it.
//!
//! One entry per network namespace, at most [`MAX_ENTRIES`], the oldest
//! dropped first: several namespaces share one runtime directory (a test
//! node, CNI plugins, a pod without host networking that mounts the host's
//! `/run`), and with a single entry their interleaved calls would evict each
//! other's counts on every call, exactly where calls are frequent. Entries
//! of another boot are dropped on the next store.
//!
//! Legacy counts are not cached: `*_SO_GET_INFO`, the only cheap read, gives
//! per table the entry count, the blob size and the hook and underflow
//! offsets, and none of them says how entries divide into rules and user
//! chains. A user chain with two rules (`-j LOG` of 176 bytes and `-j
//! ACCEPT` of 152 bytes on x86_64) and two empty user chains (each a
//! 176-byte head and a 152-byte tail) both take four entries and 656 bytes
//! after the built-in chains, so their tables report identical `GET_INFO`
//! while holding 2 and 0 rules (the test
//! `legacy_get_info_cannot_tell_rules_from_user_chains`). No key from
//! `GET_INFO` is exact, and the walk that would make one is the count itself.

use crate::escape::Shown as _;
use std::fmt::Write as _;

use super::RuleBounds;
use crate::run_dir::RunDir;

/// The cache file's name in the runtime directory.
pub const FILE_NAME: &str = "counts";
/// Most namespaces remembered.
pub const MAX_ENTRIES: usize = 16;
/// Most bytes read: the header and `MAX_ENTRIES` entries fit with room.
pub const MAX_FILE_LEN: usize = 4096;

const HEADER: &str = "iptables-wrapper nft rule counts v2";
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";
/// `8-4-4-4-12` hex digits.
const BOOT_ID_LEN: usize = 36;

/// Which network namespace, in which boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    pub boot_id: String,
    pub netns_cookie: u64,
}

impl Namespace {
    /// This boot and the given namespace cookie; None without a readable,
    /// well-formed boot id (no `/proc`).
    pub fn with_cookie(netns_cookie: u64) -> Option<Namespace> {
        let boot_id = std::fs::read_to_string(BOOT_ID_PATH).ok()?;
        let boot_id = boot_id.trim_end();
        is_boot_id(boot_id).then(|| Namespace {
            boot_id: boot_id.to_string(),
            netns_cookie,
        })
    }
}

/// One remembered count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub generation: u32,
    /// Both families together; `high == u64::MAX` for "at least `low`".
    pub rules: RuleBounds,
    /// A second count of this generation agreed with it.
    pub confirmed: bool,
}

/// The confirmed count stored for `namespace` at `generation`, if any.
pub fn lookup(namespace: &Namespace, generation: u32) -> Option<RuleBounds> {
    let dir = RunDir::open()?;
    let entries = parse(&dir.read(FILE_NAME, MAX_FILE_LEN)?)?;
    entries
        .into_iter()
        .find(|(ns, entry)| ns == namespace && entry.generation == generation && entry.confirmed)
        .map(|(_, entry)| entry.rules)
}

/// Remembers `rules`, counted at `generation`, as `namespace`'s count,
/// replacing its earlier one: confirmed if that earlier one was the same
/// count of the same generation, pending otherwise. Failing to store costs
/// only speed: it is logged at debug level.
pub fn store(namespace: &Namespace, generation: u32, rules: RuleBounds) {
    let Some(dir) = RunDir::open_or_create() else {
        return;
    };
    let mut entries = dir
        .read(FILE_NAME, MAX_FILE_LEN)
        .and_then(|contents| parse(&contents))
        .unwrap_or_default();
    let confirmed = entries
        .iter()
        .any(|(ns, earlier)| ns == namespace && earlier.generation == generation && earlier.rules == rules);
    let entry = Entry {
        generation,
        rules,
        confirmed,
    };
    entries.retain(|(ns, _)| ns.boot_id == namespace.boot_id && ns.netns_cookie != namespace.netns_cookie);
    entries.push((namespace.clone(), entry));
    let keep_from = entries.len().saturating_sub(MAX_ENTRIES);
    if let Err(e) = dir.replace(FILE_NAME, format(&entries[keep_from..]).as_bytes()) {
        log::debug!("count cache not stored in {}: {e}", dir.path().shown());
    }
}

/// The file's text for `entries`, oldest first.
pub fn format(entries: &[(Namespace, Entry)]) -> String {
    let mut text = format!("{HEADER}\n");
    for (ns, entry) in entries {
        let high = match entry.rules.high {
            u64::MAX => "-".to_string(),
            high => high.to_string(),
        };
        let state = if entry.confirmed { "confirmed" } else { "pending" };
        let _ = writeln!(
            text,
            "{} {} {} {} {high} {state}",
            ns.boot_id, ns.netns_cookie, entry.generation, entry.rules.low
        );
    }
    text
}

/// The entries of a cache file; None if anything in it is not as
/// [`format()`] writes it.
pub fn parse(contents: &[u8]) -> Option<Vec<(Namespace, Entry)>> {
    let text = std::str::from_utf8(contents).ok()?;
    let body = text.strip_prefix(HEADER)?.strip_prefix('\n')?;
    if !body.is_empty() && !body.ends_with('\n') {
        return None; // truncated
    }
    let entries: Option<Vec<_>> = body.lines().map(parse_line).collect();
    entries.filter(|entries| entries.len() <= MAX_ENTRIES)
}

fn parse_line(line: &str) -> Option<(Namespace, Entry)> {
    let fields: Vec<&str> = line.split(' ').collect();
    let [boot_id, cookie, generation, low, high, state] = fields[..] else {
        return None;
    };
    let confirmed = match state {
        "confirmed" => true,
        "pending" => false,
        _ => return None,
    };
    let low: u64 = parse_number(low)?;
    let high = match high {
        "-" => u64::MAX,
        high => parse_number(high)?,
    };
    (is_boot_id(boot_id) && low <= high).then_some(())?;
    Some((
        Namespace {
            boot_id: boot_id.to_string(),
            netns_cookie: parse_number(cookie)?,
        },
        Entry {
            generation: parse_number(generation)?,
            rules: RuleBounds { low, high },
            confirmed,
        },
    ))
}

/// Plain decimal digits only (no sign, no spaces).
fn parse_number<T: std::str::FromStr>(text: &str) -> Option<T> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn is_boot_id(text: &str) -> bool {
    text.len() == BOOT_ID_LEN
        && text.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(cookie: u64) -> Namespace {
        Namespace {
            boot_id: "0123abcd-0123-4567-89ab-0123456789ab".into(),
            netns_cookie: cookie,
        }
    }

    fn entry(generation: u32, low: u64, high: u64) -> Entry {
        Entry {
            generation,
            rules: RuleBounds { low, high },
            confirmed: low % 2 == 1,
        }
    }

    #[test]
    fn round_trips() {
        let entries = vec![(ns(1), entry(7, 5, 5)), (ns(2), entry(9, 101, u64::MAX))];
        let text = format(&entries);
        assert_eq!(parse(text.as_bytes()), Some(entries));
        assert_eq!(parse(format(&[]).as_bytes()), Some(Vec::new()));
    }

    #[test]
    fn damage_makes_it_empty() {
        let good = format(&[(ns(1), entry(7, 5, 5)), (ns(2), entry(9, 3, 3))]);
        let damaged = [
            good.replacen("v2", "v3", 1),
            good.replacen("confirmed", "sure", 1),
            good[..good.len() - 1].to_string(),
            good[..good.len() - 4].to_string(),
            good.replace(" 5 5", " 5 4"),
            good.replace(" 5 5", " +5 5"),
            good.replace(" 5 5", " 5 5 5"),
            good.replace(" 7 ", " 99999999999 "),
            good.replace("0123abcd", "0123abcg"),
            good.replace('\n', "\r\n"),
            format!("{good}\n"),
            String::new(),
        ];
        for text in damaged {
            assert_eq!(parse(text.as_bytes()), None, "{text:?}");
        }
        assert_eq!(parse(b"\xff"), None);
        let too_many: Vec<_> = (0..=MAX_ENTRIES as u64).map(|i| (ns(i), entry(1, 1, 1))).collect();
        assert_eq!(parse(format(&too_many).as_bytes()), None);
        assert!(format(&too_many).len() <= MAX_FILE_LEN, "the limit leaves room");
    }

    #[test]
    fn a_file_reads_as_its_digits_on_every_machine() {
        // Text, so the same bytes on every byte order and word size: the
        // largest cookie and generation included (u64 and u32 on armv7 too).
        let text =
            format!("{HEADER}\n0123abcd-0123-4567-89ab-0123456789ab 18446744073709551615 4294967295 3 - pending\n");
        let entries = parse(text.as_bytes()).unwrap();
        assert_eq!(entries.len(), 1);
        let (ns, entry) = &entries[0];
        assert_eq!((ns.netns_cookie, entry.generation), (u64::MAX, u32::MAX));
        assert_eq!(
            (entry.rules.low, entry.rules.high, entry.confirmed),
            (3, u64::MAX, false)
        );
        assert_eq!(format(&entries), text);
    }
}
