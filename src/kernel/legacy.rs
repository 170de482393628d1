//! Legacy x_tables state, read through getsockopt on a raw socket.
//!
//! Only tables that `/proc/thread-self/net/ip{,6}_tables_names` already lists
//! are ever looked up: looking up any other table creates it. When that list
//! cannot be read, or is not the kernel's own (no `/proc`, a `/proc` that is
//! not procfs, something mounted over part of it: see [`procfs`]), the legacy
//! state is unknown, never "none".
//!
//! Two reads exist. `*_SO_GET_INFO` is one small copy per table and gives the
//! entry count, from which [`TableInfo::rule_upper_bound`] follows.
//! `*_SO_GET_ENTRIES` copies the whole entry blob; walking it gives the exact
//! rule count, the user chains' names and, per chain, its rules and (for a
//! built-in chain) its policy ([`LegacyFamily::contents`]). GET_INFO alone
//! cannot tell a `FORWARD DROP` policy from an `ACCEPT` one: a table it shows
//! empty may still drop traffic.
//!
//! The blob is a sequence of entries (`ipt_entry` / `ip6t_entry`, then the
//! matches, then the target), each `next_offset` bytes long. A builtin chain
//! starts at its `hook_entry` offset and ends with its policy entry; a user
//! chain starts with an `ERROR` entry carrying its name and ends with a
//! `RETURN` entry; the table ends with one more `ERROR` entry. The kernel's
//! structures are mirrored below from `<linux/netfilter_ipv4/ip_tables.h>`,
//! `<linux/netfilter_ipv6/ip6_tables.h>` and `<linux/netfilter/x_tables.h>`.

use crate::family::Family;
use crate::kernel::procfs;
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockProtocol, SockType};
use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

/// `IPT_SO_GET_INFO` and `IP6T_SO_GET_INFO` (`IPT_BASE_CTL`).
const SO_GET_INFO: libc::c_int = 64;
/// `IPT_SO_GET_ENTRIES` and `IP6T_SO_GET_ENTRIES`.
const SO_GET_ENTRIES: libc::c_int = 65;
/// `XT_TABLE_MAXNAMELEN`, including the terminating NUL.
const TABLE_MAXNAMELEN: usize = 32;
/// `XT_EXTENSION_MAXNAMELEN`.
const EXTENSION_MAXNAMELEN: usize = 29;
/// `NF_INET_NUMHOOKS`.
const NUM_HOOKS: usize = 5;
/// `XT_ERROR_TARGET`: the target of user chain heads and of the table's end.
const ERROR_TARGET: &[u8] = b"ERROR";
/// The standard target's verdicts of a policy: `-NF_DROP - 1` and
/// `-NF_ACCEPT - 1` (the kernel accepts no other policy).
const VERDICT_DROP: i32 = -1;
const VERDICT_ACCEPT: i32 = -2;
/// The netfilter hooks' chain names, by hook number (`NF_INET_*`).
pub const HOOK_CHAINS: [&str; NUM_HOOKS] = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];
/// How often GET_INFO + GET_ENTRIES is tried while the table keeps changing.
const MAX_TRIES: usize = 5;

/// `struct ipt_getinfo`, identical to `struct ip6t_getinfo`.
#[repr(C)]
struct GetInfo {
    name: [u8; TABLE_MAXNAMELEN],
    valid_hooks: u32,
    hook_entry: [u32; NUM_HOOKS],
    underflow: [u32; NUM_HOOKS],
    num_entries: u32,
    size: u32,
}

/// `struct ipt_get_entries` / `struct ip6t_get_entries`, generic over the
/// entry type only for its alignment (which places `entrytable`).
#[repr(C)]
struct GetEntries<Entry> {
    name: [u8; TABLE_MAXNAMELEN],
    size: u32,
    entrytable: [Entry; 0],
}

/// `struct xt_counters`.
#[repr(C)]
struct Counters {
    packets: u64,
    bytes: u64,
}

/// `struct ipt_ip`.
#[repr(C)]
struct IptIp {
    src: libc::in_addr,
    dst: libc::in_addr,
    smsk: libc::in_addr,
    dmsk: libc::in_addr,
    iniface: [u8; libc::IFNAMSIZ],
    outiface: [u8; libc::IFNAMSIZ],
    iniface_mask: [u8; libc::IFNAMSIZ],
    outiface_mask: [u8; libc::IFNAMSIZ],
    proto: u16,
    flags: u8,
    invflags: u8,
}

/// `struct ipt_entry` (without the trailing matches and target).
#[repr(C)]
struct IptEntry {
    ip: IptIp,
    nfcache: u32,
    target_offset: u16,
    next_offset: u16,
    comefrom: u32,
    counters: Counters,
}

/// `struct ip6t_ip6`.
#[repr(C)]
struct Ip6tIp6 {
    src: libc::in6_addr,
    dst: libc::in6_addr,
    smsk: libc::in6_addr,
    dmsk: libc::in6_addr,
    iniface: [u8; libc::IFNAMSIZ],
    outiface: [u8; libc::IFNAMSIZ],
    iniface_mask: [u8; libc::IFNAMSIZ],
    outiface_mask: [u8; libc::IFNAMSIZ],
    proto: u16,
    tos: u8,
    flags: u8,
    invflags: u8,
}

/// `struct ip6t_entry` (without the trailing matches and target).
#[repr(C)]
struct Ip6tEntry {
    ipv6: Ip6tIp6,
    nfcache: u32,
    target_offset: u16,
    next_offset: u16,
    comefrom: u32,
    counters: Counters,
}

/// `struct xt_entry_target` as user space sees it (`u.user`); the target's
/// data follows it. The kernel's union with a pointer has the same size.
#[repr(C)]
struct EntryTarget {
    target_size: u16,
    name: [u8; EXTENSION_MAXNAMELEN],
    revision: u8,
}

// The layouts the kernel expects on x86_64 (see the kernel headers).
#[cfg(target_arch = "x86_64")]
const _: () = {
    assert!(size_of::<GetInfo>() == 84);
    assert!(size_of::<GetEntries<IptEntry>>() == 40);
    assert!(size_of::<GetEntries<Ip6tEntry>>() == 40);
    assert!(size_of::<IptEntry>() == 112);
    assert!(offset_of!(IptEntry, target_offset) == 88);
    assert!(offset_of!(IptEntry, next_offset) == 90);
    assert!(size_of::<Ip6tEntry>() == 168);
    assert!(offset_of!(Ip6tEntry, target_offset) == 140);
    assert!(offset_of!(Ip6tEntry, next_offset) == 142);
    assert!(size_of::<EntryTarget>() == 32);
    assert!(offset_of!(EntryTarget, name) == 2);
};

/// Where one family's structures keep what the walk reads.
struct Layout {
    socket_family: AddressFamily,
    sockopt_level: libc::c_int,
    names_file: &'static str,
    /// `sizeof(struct ip{,6}t_get_entries)`: the blob starts here.
    get_entries_header: usize,
    entry_size: usize,
    target_offset_at: usize,
    next_offset_at: usize,
}

impl Layout {
    fn of(family: Family) -> Layout {
        match family {
            Family::Ipv4 => Layout {
                socket_family: AddressFamily::Inet,
                sockopt_level: libc::SOL_IP,
                names_file: "/proc/thread-self/net/ip_tables_names",
                get_entries_header: size_of::<GetEntries<IptEntry>>(),
                entry_size: size_of::<IptEntry>(),
                target_offset_at: offset_of!(IptEntry, target_offset),
                next_offset_at: offset_of!(IptEntry, next_offset),
            },
            Family::Ipv6 => Layout {
                socket_family: AddressFamily::Inet6,
                sockopt_level: libc::SOL_IPV6,
                names_file: "/proc/thread-self/net/ip6_tables_names",
                get_entries_header: size_of::<GetEntries<Ip6tEntry>>(),
                entry_size: size_of::<Ip6tEntry>(),
                target_offset_at: offset_of!(Ip6tEntry, target_offset),
                next_offset_at: offset_of!(Ip6tEntry, next_offset),
            },
        }
    }
}

/// What `*_SO_GET_INFO` says about one listed table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    pub name: String,
    /// Bitmask of the netfilter hooks (builtin chains) the table has.
    pub valid_hooks: u32,
    /// Entries in the blob: rules, policies, user chain heads and tails, end.
    pub num_entries: u32,
    /// Bytes in the blob.
    pub size: u32,
    /// Blob offsets where the builtin chains start (`hook_entry` of the
    /// valid hooks).
    pub hook_entries: Vec<u32>,
}

impl TableInfo {
    /// Most rules the table can hold given its entry count (no user chains).
    ///
    /// Every builtin chain has a policy entry and the table has an end entry;
    /// each user chain would take two more entries. An empty table gives 0.
    pub fn rule_upper_bound(&self) -> u64 {
        u64::from(self.num_entries).saturating_sub(u64::from(self.builtin_chains()) + 1)
    }

    fn builtin_chains(&self) -> u32 {
        self.valid_hooks.count_ones()
    }

    /// True when the table holds only its policies and end: no rules, no user
    /// chains.
    pub fn is_empty(&self) -> bool {
        self.num_entries == self.builtin_chains() + 1
    }
}

/// The result of walking a table's entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableEntries {
    /// Rules as `iptables-legacy-save` prints them (`-A` lines).
    pub rules: u64,
    /// Names of the user-defined chains.
    pub user_chains: Vec<String>,
}

/// A built-in chain's policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Accept,
    Drop,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Accept => "ACCEPT",
            Policy::Drop => "DROP",
        }
    }
}

/// One chain of a table, as the walk found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainContents {
    pub name: String,
    /// The built-in chain's policy; None for a user chain.
    pub policy: Option<Policy>,
    /// Rules as `iptables-legacy-save` prints them (`-A` lines).
    pub rules: u64,
}

/// Every chain of a table, in the blob's order (built-in chains first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableContents {
    pub chains: Vec<ChainContents>,
}

impl TableContents {
    /// Rules in all chains.
    pub fn rules(&self) -> u64 {
        self.chains.iter().map(|chain| chain.rules).sum()
    }

    /// The user chains.
    pub fn user_chains(&self) -> impl Iterator<Item = &ChainContents> {
        self.chains.iter().filter(|chain| chain.policy.is_none())
    }

    /// The built-in chains whose policy is not ACCEPT.
    pub fn non_accept_policies(&self) -> impl Iterator<Item = &ChainContents> {
        self.chains
            .iter()
            .filter(|chain| chain.policy.is_some_and(|policy| policy != Policy::Accept))
    }

    /// Whether the table changes some packet's fate: a rule, or a policy
    /// other than ACCEPT. (An empty user chain does not; neither does a
    /// table as a read-only `iptables-legacy -L` leaves it.)
    pub fn applies_to_packets(&self) -> bool {
        self.rules() > 0 || self.non_accept_policies().next().is_some()
    }

    /// Whether the table holds anything a write left: a rule, a user chain
    /// (an empty hint chain too) or a policy other than ACCEPT.
    pub fn holds_state(&self) -> bool {
        self.applies_to_packets() || self.user_chains().next().is_some()
    }

    fn entries(&self) -> TableEntries {
        TableEntries {
            rules: self.rules(),
            user_chains: self.user_chains().map(|chain| chain.name.clone()).collect(),
        }
    }
}

/// The legacy tables of one family that exist in this network namespace.
pub struct LegacyFamily {
    pub family: Family,
    /// GET_INFO of every listed table, in listing order.
    pub tables: Vec<TableInfo>,
    /// The raw socket the tables were read through; None when none exist.
    socket: Option<OwnedFd>,
}

/// The file listing a family's legacy tables in this thread's network namespace.
pub fn names_file(family: Family) -> &'static str {
    Layout::of(family).names_file
}

/// The legacy tables that exist in this network namespace, from
/// `/proc/thread-self/net/ip{,6}_tables_names`. A file read, no kernel query:
/// it creates nothing.
///
/// Only the kernel's own list is trusted: the file is opened through
/// [`procfs`], so a `/proc` that is not procfs, or a directory mounted over
/// part of it, is no list (looking up what a fake list names would create
/// those tables).
///
/// `Ok(None)`: the file is absent from this namespace's own
/// `/proc/thread-self/net`, so the family's x_tables is not in the kernel and
/// no table exists. An error means the tables cannot be known (no procfs,
/// a mount over part of it, or the file cannot be read): no table may then be
/// looked up, and "none" would be a guess.
pub fn listed_tables(family: Family) -> Result<Option<Vec<String>>, String> {
    let file = Layout::of(family).names_file;
    let relative = file.strip_prefix("/proc/").expect("a procfs path");
    let cannot = |e: &dyn std::fmt::Display| format!("{e}: the legacy tables cannot be listed");
    let names = match procfs::open(relative, libc::O_RDONLY) {
        Ok(fd) => procfs::read_all(fd).map_err(|e| cannot(&format!("{file}: {e}")))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let net = Path::new(relative).parent().expect("a file in a directory");
            return match procfs::open(net.to_str().expect("UTF-8"), libc::O_PATH | libc::O_DIRECTORY) {
                Ok(_) => Ok(None),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
                    "/proc/{} is absent (/proc not mounted, or a procfs that does not show this process?): the legacy tables cannot be listed",
                    net.display()
                )),
                Err(e) => Err(cannot(&e)),
            };
        }
        Err(e) if e.kind() == io::ErrorKind::Other => return Err(cannot(&e)),
        Err(e) => return Err(cannot(&format!("{file}: {e}"))),
    };
    Ok(Some(
        String::from_utf8_lossy(&names)
            .lines()
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect(),
    ))
}

impl LegacyFamily {
    /// Reads the table list and GET_INFO of each listed table; see
    /// [`LegacyFamily::open_listed`].
    pub fn open(family: Family) -> io::Result<LegacyFamily> {
        let names = listed_tables(family).map_err(io::Error::other)?;
        LegacyFamily::open_listed(family, names.unwrap_or_default())
    }

    /// GET_INFO of each table in `names`, which must come from
    /// [`listed_tables`]: looking up any other table would create it.
    ///
    /// No names means no tables, and no socket is opened. Kernel errors
    /// (EPERM without CAP_NET_ADMIN, ...) are returned as they are.
    pub fn open_listed(family: Family, names: Vec<String>) -> io::Result<LegacyFamily> {
        let layout = Layout::of(family);
        if names.is_empty() {
            return Ok(LegacyFamily {
                family,
                tables: Vec::new(),
                socket: None,
            });
        }
        let socket = socket(
            layout.socket_family,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::Raw,
        )?;
        let tables = names
            .iter()
            .map(|name| get_info(&socket, &layout, name))
            .collect::<io::Result<_>>()?;
        Ok(LegacyFamily {
            family,
            tables,
            socket: Some(socket),
        })
    }

    /// The GET_INFO of a listed table, by name.
    pub fn table(&self, name: &str) -> Option<&TableInfo> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// Walks a listed table's entries (GET_ENTRIES) for the exact count.
    ///
    /// An empty table is answered from `table` alone (its policies are not
    /// read: see [`LegacyFamily::contents`]). Otherwise as `contents`.
    pub fn entries(&self, table: &TableInfo) -> io::Result<TableEntries> {
        if table.is_empty() {
            self.listed_socket(table)?;
            return Ok(TableEntries::default());
        }
        Ok(self.contents(table)?.entries())
    }

    /// Walks a listed table's entries (GET_ENTRIES): every chain with its
    /// rule count and, for a built-in chain, its policy. Read even for a
    /// table GET_INFO shows empty, as only the blob holds the policies.
    ///
    /// GET_ENTRIES is read for `table`'s size and checked against it; if
    /// the table changed since (another size, or entries that do not add
    /// up to `table`'s counts), GET_INFO is read afresh and both are retried
    /// a few times before giving up with an error.
    pub fn contents(&self, table: &TableInfo) -> io::Result<TableContents> {
        let socket = self.listed_socket(table)?;
        let layout = Layout::of(self.family);
        let mut info = table.clone();
        for attempt in 0..MAX_TRIES {
            if attempt > 0 {
                info = get_info(socket, &layout, &table.name)?;
            }
            let reply = match get_entries(socket, &layout, &info) {
                Ok(reply) => reply,
                // The table's size changed since GET_INFO.
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
                Err(e) => return Err(e),
            };
            // A same-sized replacement in between shows up as a mismatch.
            let blob = &reply[layout.get_entries_header..];
            if let Some(contents) = walk(&layout, blob, &info)? {
                return Ok(contents);
            }
        }
        Err(io::Error::other(format!(
            "table {}: entries kept changing or did not add up in {MAX_TRIES} reads",
            table.name
        )))
    }

    /// The socket to read a table through, if the table is one of the listed.
    fn listed_socket(&self, table: &TableInfo) -> io::Result<&OwnedFd> {
        match &self.socket {
            Some(socket) if self.table(&table.name).is_some() => Ok(socket),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("table {} is not listed: looking it up would create it", table.name),
            )),
        }
    }
}

/// `*_SO_GET_INFO` of one table (which creates it if it did not exist).
fn get_info(socket: &OwnedFd, layout: &Layout, name: &str) -> io::Result<TableInfo> {
    let mut buf = [0u8; size_of::<GetInfo>()];
    put_table_name(&mut buf[offset_of!(GetInfo, name)..], name)?;
    getsockopt_exact(socket, layout.sockopt_level, SO_GET_INFO, &mut buf)?;
    let valid_hooks = read_u32(&buf, offset_of!(GetInfo, valid_hooks));
    let hook_entries = (0..NUM_HOOKS)
        .filter(|hook| valid_hooks & (1 << hook) != 0)
        .map(|hook| read_u32(&buf, offset_of!(GetInfo, hook_entry) + hook * size_of::<u32>()))
        .collect();
    Ok(TableInfo {
        name: name.to_owned(),
        valid_hooks,
        num_entries: read_u32(&buf, offset_of!(GetInfo, num_entries)),
        size: read_u32(&buf, offset_of!(GetInfo, size)),
        hook_entries,
    })
}

/// `*_SO_GET_ENTRIES` for a blob of `info.size` bytes; the reply holds the
/// header, then the blob. EAGAIN means the table's size is no longer `info.size`.
fn get_entries(socket: &OwnedFd, layout: &Layout, info: &TableInfo) -> io::Result<Vec<u8>> {
    let header = layout.get_entries_header;
    let mut buf = vec![0u8; header + info.size as usize];
    // The header is the same for both families.
    put_table_name(&mut buf[offset_of!(GetEntries<IptEntry>, name)..], &info.name)?;
    let size_at = offset_of!(GetEntries<IptEntry>, size);
    buf[size_at..size_at + size_of::<u32>()].copy_from_slice(&info.size.to_ne_bytes());
    getsockopt_exact(socket, layout.sockopt_level, SO_GET_ENTRIES, &mut buf)?;
    Ok(buf)
}

/// Walks the blob the way libiptc (and so `iptables-legacy-save`) parses it:
/// every entry but the `ERROR` ones is a rule, except the last entry of each
/// chain (a builtin chain's policy or a user chain's `RETURN` tail).
///
/// Returns None if the blob does not match `info` (the table was replaced by
/// one of the same size between the two reads) and an error if it is
/// malformed.
fn walk(layout: &Layout, blob: &[u8], info: &TableInfo) -> io::Result<Option<TableContents>> {
    let mut contents = TableContents::default();
    let mut entries = 0u32;
    // The chain being walked: its name, whether it is built in, its
    // non-ERROR entries so far and the last one's target.
    let mut current: Option<(String, bool, u64, Entry)> = None;
    let mut offset = 0usize;
    let mut reached_end = false;
    // A built-in chain whose last entry is no policy: the blob is not the
    // table `info` describes.
    let mut policies_read = true;
    let mut close = |current: Option<(String, bool, u64, Entry)>, contents: &mut TableContents| {
        if let Some((name, builtin, in_chain_entries, last)) = current {
            let policy = if builtin {
                let policy = last.policy();
                policies_read &= policy.is_some();
                Some(policy.unwrap_or(Policy::Accept))
            } else {
                None
            };
            contents.chains.push(ChainContents {
                name,
                policy,
                rules: in_chain_entries.saturating_sub(1),
            });
        }
    };
    while offset < blob.len() {
        let entry = Entry::parse(layout, blob, offset)?;
        entries += 1;
        let is_error = entry.target_name() == ERROR_TARGET;
        let hook = info.hook_entries.iter().position(|&start| start == offset as u32);
        if is_error || hook.is_some() {
            // The previous chain's last entry was its policy or tail.
            close(current.take(), &mut contents);
        }
        let end = entry.end;
        if is_error {
            if end == blob.len() {
                reached_end = true;
            } else {
                current = Some((entry.error_name(), false, 0, entry));
            }
        } else {
            if let Some(index) = hook {
                current = Some((hook_chain(info.valid_hooks, index).to_string(), true, 0, entry));
            } else {
                match current.as_mut() {
                    Some((_, _, _, last)) => *last = entry,
                    None => return Err(invalid_data("an entry outside any chain")),
                }
            }
            if let Some((_, _, in_chain_entries, _)) = current.as_mut() {
                *in_chain_entries += 1;
            }
        }
        offset = end;
    }
    close(current.take(), &mut contents);
    if !reached_end {
        return Err(invalid_data("the table does not end with an ERROR entry"));
    }
    // The formula from the entry counts: each chain has one policy or tail,
    // each user chain a head, and the table an end.
    let user = contents.user_chains().count() as u64;
    let builtin = contents.chains.len() as u64 - user;
    let expected_rules = u64::from(info.num_entries).checked_sub(u64::from(info.builtin_chains()) + 2 * user + 1);
    let consistent = policies_read
        && entries == info.num_entries
        && builtin == u64::from(info.builtin_chains())
        && expected_rules == Some(contents.rules());
    Ok(consistent.then_some(contents))
}

/// The chain name of the `index`-th valid hook.
fn hook_chain(valid_hooks: u32, index: usize) -> &'static str {
    (0..NUM_HOOKS)
        .filter(|hook| valid_hooks & (1 << hook) != 0)
        .nth(index)
        .map_or("?", |hook| HOOK_CHAINS[hook])
}

/// One entry of the blob, bounds-checked.
struct Entry<'a> {
    target: &'a [u8],
    /// Offset of the next entry.
    end: usize,
}

impl<'a> Entry<'a> {
    fn parse(layout: &Layout, blob: &'a [u8], offset: usize) -> io::Result<Entry<'a>> {
        let fixed = blob
            .get(offset..offset + layout.entry_size)
            .ok_or_else(|| invalid_data("truncated entry"))?;
        let target_offset = usize::from(read_u16(fixed, layout.target_offset_at));
        let next_offset = usize::from(read_u16(fixed, layout.next_offset_at));
        if target_offset < layout.entry_size || target_offset + size_of::<EntryTarget>() > next_offset {
            return Err(invalid_data("bad target or next offset"));
        }
        let target = blob
            .get(offset + target_offset..offset + next_offset)
            .ok_or_else(|| invalid_data("entry runs past the table"))?;
        Ok(Entry {
            target,
            end: offset + next_offset,
        })
    }

    /// The target's name (`""` for the standard verdict target).
    fn target_name(&self) -> &'a [u8] {
        let at = offset_of!(EntryTarget, name);
        until_nul(&self.target[at..at + EXTENSION_MAXNAMELEN])
    }

    /// The policy a built-in chain's last entry carries: a standard target
    /// (no name) whose verdict is ACCEPT or DROP; None for anything else.
    fn policy(&self) -> Option<Policy> {
        if !self.target_name().is_empty() {
            return None;
        }
        let at = size_of::<EntryTarget>();
        let verdict = i32::from_ne_bytes(self.target.get(at..at + size_of::<i32>())?.try_into().ok()?);
        match verdict {
            VERDICT_ACCEPT => Some(Policy::Accept),
            VERDICT_DROP => Some(Policy::Drop),
            _ => None,
        }
    }

    /// An `ERROR` target's data (`xt_error_target.errorname`): a chain name.
    fn error_name(&self) -> String {
        String::from_utf8_lossy(until_nul(&self.target[size_of::<EntryTarget>()..])).into_owned()
    }
}

/// The one system call: getsockopt with an in/out buffer that the kernel must
/// fill exactly (it rejects lengths other than the structure's).
fn getsockopt_exact(socket: &OwnedFd, level: libc::c_int, option: libc::c_int, buf: &mut [u8]) -> io::Result<()> {
    let mut len = libc::socklen_t::try_from(buf.len()).map_err(|_| invalid_data("table too large"))?;
    // SAFETY: `buf` is valid for writes of `len` bytes for the whole call and
    // the kernel writes at most `len` bytes; the fd stays open (borrowed).
    let rc = unsafe { libc::getsockopt(socket.as_raw_fd(), level, option, buf.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != buf.len() {
        return Err(invalid_data("getsockopt returned a short answer"));
    }
    Ok(())
}

/// Writes `name` NUL-terminated into a `XT_TABLE_MAXNAMELEN` field.
fn put_table_name(field: &mut [u8], name: &str) -> io::Result<()> {
    if name.len() >= TABLE_MAXNAMELEN || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad table name {name:?}"),
        ));
    }
    field[..name.len()].copy_from_slice(name.as_bytes());
    field[name.len()] = 0;
    Ok(())
}

fn until_nul(bytes: &[u8]) -> &[u8] {
    bytes.split(|&b| b == 0).next().unwrap_or(bytes)
}

fn read_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([bytes[at], bytes[at + 1]])
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn invalid_data(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("legacy table entries: {what}"))
}
