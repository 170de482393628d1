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
//!
//! For `stale --remove`, [`LegacyFamily::image`] reads a table whole (its
//! GET_INFO and its blob, counters zeroed) so that two tables can be
//! compared byte for byte.
//!
//! This module holds the table list and the reads; the kernel's
//! structures are in `abi`, the walk of the blob in `walk`.

mod abi;
mod unread;
pub(crate) use unread::ipv4_unread_mask;
mod walk;

use crate::escape::Shown as _;
use crate::family::Family;
use crate::kernel::procfs;
use crate::privilege::noted;
use abi::{
    read_u16, read_u32, GetEntries, GetInfo, IptEntry, Layout, COUNTERS_LEN, NUM_HOOKS, SO_GET_ENTRIES, SO_GET_INFO,
    TABLE_MAXNAMELEN,
};
use nix::sys::socket::{socket, SockFlag, SockProtocol, SockType};
use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use walk::walk;

pub use abi::HOOK_CHAINS;
pub use walk::{ChainContents, Policy, TableContents, TableEntries};

/// How often GET_INFO + GET_ENTRIES is tried while the table keeps changing.
const MAX_TRIES: usize = 5;

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

/// A legacy table as the kernel holds it, without its counters: its
/// GET_INFO (hooks, chain starts and ends, entry count, size) and its entry
/// blob. Two tables with equal images hold the same rules in the same
/// chains with the same policies, byte for byte but for the bytes of a
/// match that the kernel never reads for the table's family (`unread`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyTableImage {
    info: Vec<u8>,
    blob: Vec<u8>,
    /// Where each entry starts in `blob`.
    entry_starts: Vec<usize>,
}

impl LegacyTableImage {
    /// What the image holds, as [`LegacyFamily::contents`] reads it from the
    /// kernel (`name`, of `family`): the same reading, not another one.
    pub fn contents(&self, family: Family, name: &str) -> io::Result<TableContents> {
        let info = info_of(name, &self.info);
        walk(&Layout::of(family), &self.blob, &info)?
            .ok_or_else(|| invalid_data("the image's entries do not add up to its GET_INFO"))
    }

    /// The first difference between this image and `other`, in words (this
    /// one is "the table", the other "the restored one"); None when equal.
    pub fn difference(&self, other: &LegacyTableImage) -> Option<String> {
        if self == other {
            return None;
        }
        fn entry(image: &LegacyTableImage, index: usize) -> Option<&[u8]> {
            let start = *image.entry_starts.get(index)?;
            let end = image.entry_starts.get(index + 1).copied().unwrap_or(image.blob.len());
            Some(&image.blob[start..end])
        }
        let first = (0..self.entry_starts.len().max(other.entry_starts.len()))
            .find(|&index| entry(self, index) != entry(other, index));
        Some(match first {
            Some(index) => format!(
                "entry {} of {} differs (the restored table has {} entries)",
                index + 1,
                self.entry_starts.len(),
                other.entry_starts.len()
            ),
            None => "the chains' starts or ends differ".into(),
        })
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
                // Looked up without opening: a procfs mounted with
                // `subset=pid` lists the file but refuses to open it on
                // Linux 5.10 (6.12 opens it), which is no absent list.
                Ok(_) => match procfs::open(relative, libc::O_PATH) {
                    Ok(_) => Err(cannot(&format!(
                        "{file} is there, but procfs refuses to open it (a procfs mounted with subset=pid, on an older kernel)"
                    ))),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(cannot(&e)),
                },
                Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
                    "/proc/{} is absent (/proc not mounted, or a procfs that does not show this process?): the legacy tables cannot be listed",
                    net.shown()
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
        )
        .map_err(|errno| noted(errno.into()))?;
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

    /// A listed table's image: GET_INFO, then GET_ENTRIES for that size
    /// (again while the table's size changes under it), counters zeroed.
    pub fn image(&self, table: &TableInfo) -> io::Result<LegacyTableImage> {
        let socket = self.listed_socket(table)?;
        let layout = Layout::of(self.family);
        for _ in 0..MAX_TRIES {
            let mut info = [0u8; size_of::<GetInfo>()];
            put_table_name(&mut info[offset_of!(GetInfo, name)..], &table.name)?;
            getsockopt_exact(socket, layout.sockopt_level, SO_GET_INFO, &mut info)?;
            let size = read_u32(&info, offset_of!(GetInfo, size));
            let sized = TableInfo { size, ..table.clone() };
            let mut blob = match get_entries(socket, &layout, &sized) {
                Ok(reply) => reply[layout.get_entries_header..].to_vec(),
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
                Err(e) => return Err(e),
            };
            let mut entry_starts = Vec::new();
            let mut offset = 0;
            while offset < blob.len() {
                let next = usize::from(read_u16(&blob, offset + layout.next_offset_at));
                if next < layout.entry_size || offset + next > blob.len() {
                    return Err(invalid_data("an entry's next_offset leaves the blob"));
                }
                blob[offset + layout.counters_at..offset + layout.counters_at + COUNTERS_LEN].fill(0);
                unread::zero_unread(self.family, &layout, &mut blob[offset..offset + next]);
                entry_starts.push(offset);
                offset += next;
            }
            return Ok(LegacyTableImage {
                info: info.to_vec(),
                blob,
                entry_starts,
            });
        }
        Err(io::Error::other(format!(
            "table {}: its size kept changing in {MAX_TRIES} reads",
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
    Ok(info_of(name, &buf))
}

/// A GET_INFO reply (`buf`) of the table `name`, read.
fn info_of(name: &str, buf: &[u8]) -> TableInfo {
    let valid_hooks = read_u32(buf, offset_of!(GetInfo, valid_hooks));
    let hook_entries = (0..NUM_HOOKS)
        .filter(|hook| valid_hooks & (1 << hook) != 0)
        .map(|hook| read_u32(buf, offset_of!(GetInfo, hook_entry) + hook * size_of::<u32>()))
        .collect();
    TableInfo {
        name: name.to_owned(),
        valid_hooks,
        num_entries: read_u32(buf, offset_of!(GetInfo, num_entries)),
        size: read_u32(buf, offset_of!(GetInfo, size)),
        hook_entries,
    }
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

/// The one system call: getsockopt with an in/out buffer that the kernel must
/// fill exactly (it rejects lengths other than the structure's).
pub(super) fn getsockopt_exact(
    socket: &OwnedFd,
    level: libc::c_int,
    option: libc::c_int,
    buf: &mut [u8],
) -> io::Result<()> {
    let mut len = libc::socklen_t::try_from(buf.len()).map_err(|_| invalid_data("table too large"))?;
    // SAFETY: `buf` is valid for writes of `len` bytes for the whole call and
    // the kernel writes at most `len` bytes; the fd stays open (borrowed).
    let rc = unsafe { libc::getsockopt(socket.as_raw_fd(), level, option, buf.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return Err(noted(io::Error::last_os_error()));
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

fn invalid_data(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("legacy table entries: {what}"))
}
