//! The x_tables ABI of getsockopt, mirrored from
//! `<linux/netfilter_ipv4/ip_tables.h>`, `<linux/netfilter_ipv6/ip6_tables.h>`
//! and `<linux/netfilter/x_tables.h>`: the request and entry structures,
//! their constants, and per family the [`Layout`] that says where the walk
//! finds what it reads.
//!
//! Only the layout is checked here, at compile time for every target built
//! (the kernel headers' sizes and offsets); nothing is read from the kernel,
//! and nothing here knows what a table holds. Fields are in the machine's
//! byte order.

use crate::family::Family;
use nix::sys::socket::AddressFamily;
use std::mem::{offset_of, size_of};

/// `IPT_SO_GET_INFO` and `IP6T_SO_GET_INFO` (`IPT_BASE_CTL`).
pub(super) const SO_GET_INFO: libc::c_int = 64;
/// `IPT_SO_GET_ENTRIES` and `IP6T_SO_GET_ENTRIES`.
pub(super) const SO_GET_ENTRIES: libc::c_int = 65;
/// `XT_TABLE_MAXNAMELEN`, including the terminating NUL.
pub(super) const TABLE_MAXNAMELEN: usize = 32;
/// `XT_EXTENSION_MAXNAMELEN`.
pub(super) const EXTENSION_MAXNAMELEN: usize = 29;
/// `NF_INET_NUMHOOKS`.
pub(super) const NUM_HOOKS: usize = 5;
/// `XT_ERROR_TARGET`: the target of user chain heads and of the table's end.
pub(super) const ERROR_TARGET: &[u8] = b"ERROR";
/// The standard target's verdicts of a policy: `-NF_DROP - 1` and
/// `-NF_ACCEPT - 1` (the kernel accepts no other policy).
pub(super) const VERDICT_DROP: i32 = -1;
pub(super) const VERDICT_ACCEPT: i32 = -2;
/// The netfilter hooks' chain names, by hook number (`NF_INET_*`).
pub const HOOK_CHAINS: [&str; NUM_HOOKS] = ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"];

/// `struct ipt_getinfo`, identical to `struct ip6t_getinfo`.
#[repr(C)]
pub(super) struct GetInfo {
    pub(super) name: [u8; TABLE_MAXNAMELEN],
    pub(super) valid_hooks: u32,
    pub(super) hook_entry: [u32; NUM_HOOKS],
    underflow: [u32; NUM_HOOKS],
    pub(super) num_entries: u32,
    pub(super) size: u32,
}

/// `struct ipt_get_entries` / `struct ip6t_get_entries`, generic over the
/// entry type only for its alignment (which places `entrytable`).
#[repr(C)]
pub(super) struct GetEntries<Entry> {
    pub(super) name: [u8; TABLE_MAXNAMELEN],
    pub(super) size: u32,
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
pub(super) struct IptEntry {
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
pub(super) struct EntryTarget {
    target_size: u16,
    pub(super) name: [u8; EXTENSION_MAXNAMELEN],
    revision: u8,
}

// The layouts the kernel's headers give, the same on all six targets the
// wrapper is built for: x86_64, aarch64, ppc64le, riscv64 and s390x are LP64
// with 8-byte-aligned u64; on armv7 (EABI) `usize` is 4 bytes but u64 is
// 8-byte aligned too, so `struct xt_counters` and with it `ipt_entry`,
// `ip6t_entry` and the `entrytable` of `ipt_get_entries` land where they do
// on the 64-bit targets. (i686 aligns u64 to 4 bytes: `ip6t_entry` is 164
// bytes there and these checks stop its build, as they should, since
// nothing else here knows that layout.) The only pointer in the structures,
// in `xt_entry_target`'s kernel half, never reaches user space: its union
// is 32 bytes either way. An armv7 process on an arm64 kernel is answered
// through the kernel's compat layer in this same layout: arm64 does not
// select COMPAT_FOR_U64_ALIGNMENT, so its `compat_u64`, and with it
// `compat_xt_counters` and COMPAT_XT_ALIGN, is 8-byte aligned
// (docs/building.md).
const _: () = {
    assert!(size_of::<GetInfo>() == 84);
    assert!(offset_of!(GetInfo, size) == 80);
    assert!(size_of::<GetEntries<IptEntry>>() == 40);
    assert!(size_of::<GetEntries<Ip6tEntry>>() == 40);
    assert!(size_of::<IptEntry>() == 112);
    assert!(offset_of!(IptEntry, target_offset) == 88);
    assert!(offset_of!(IptEntry, next_offset) == 90);
    assert!(offset_of!(IptEntry, counters) == 96);
    assert!(size_of::<Ip6tEntry>() == 168);
    assert!(offset_of!(Ip6tEntry, target_offset) == 140);
    assert!(offset_of!(Ip6tEntry, next_offset) == 142);
    assert!(offset_of!(Ip6tEntry, counters) == 152);
    assert!(size_of::<EntryTarget>() == 32);
    assert!(offset_of!(EntryTarget, name) == 2);
};

/// Where one family's structures keep what the walk reads.
pub(super) struct Layout {
    pub(super) socket_family: AddressFamily,
    pub(super) sockopt_level: libc::c_int,
    pub(super) names_file: &'static str,
    /// `sizeof(struct ip{,6}t_get_entries)`: the blob starts here.
    pub(super) get_entries_header: usize,
    pub(super) entry_size: usize,
    pub(super) target_offset_at: usize,
    pub(super) next_offset_at: usize,
    /// Where an entry's `struct xt_counters` is.
    pub(super) counters_at: usize,
}

/// `sizeof(struct xt_counters)`.
pub(super) const COUNTERS_LEN: usize = size_of::<Counters>();

impl Layout {
    pub(super) fn of(family: Family) -> Layout {
        match family {
            Family::Ipv4 => Layout {
                socket_family: AddressFamily::Inet,
                sockopt_level: libc::SOL_IP,
                names_file: "/proc/thread-self/net/ip_tables_names",
                get_entries_header: size_of::<GetEntries<IptEntry>>(),
                entry_size: size_of::<IptEntry>(),
                target_offset_at: offset_of!(IptEntry, target_offset),
                next_offset_at: offset_of!(IptEntry, next_offset),
                counters_at: offset_of!(IptEntry, counters),
            },
            Family::Ipv6 => Layout {
                socket_family: AddressFamily::Inet6,
                sockopt_level: libc::SOL_IPV6,
                names_file: "/proc/thread-self/net/ip6_tables_names",
                get_entries_header: size_of::<GetEntries<Ip6tEntry>>(),
                entry_size: size_of::<Ip6tEntry>(),
                target_offset_at: offset_of!(Ip6tEntry, target_offset),
                next_offset_at: offset_of!(Ip6tEntry, next_offset),
                counters_at: offset_of!(Ip6tEntry, counters),
            },
        }
    }
}

pub(super) fn read_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([bytes[at], bytes[at + 1]])
}

pub(super) fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}
