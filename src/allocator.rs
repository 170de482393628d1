//! The binary's memory allocator: a bump arena that never reuses memory,
//! then the system allocator once the arena is full.
//!
//! A wrapped call lives for a fraction of a millisecond and then execs the
//! backend, which discards the whole address space. musl's allocator spends
//! most of that call's user-space instructions keeping memory reusable
//! (measured with callgrind on a wrapped `iptables -V`: 48k instructions with
//! the override, 96k with the host link, 138k in the empty-namespace
//! decision; 22k, 39k and 57k with this arena), and touches pages of its own
//! bookkeeping. Here an allocation is a
//! pointer bump in a zero-filled static array (not in the file, so only the pages
//! actually used are ever faulted in), freeing inside the arena does nothing,
//! and the last allocation grows in place. Memory past the bump pointer has
//! never been handed out, so it is still zero: zeroed allocations need no
//! `memset`, and the receive buffers the kernel readers allocate zeroed cost
//! only the pages a reply fills.
//!
//! Where the arena lies matters as much as what it does, because on the hot
//! path every page first touched costs a page fault (a zeroed page, and a
//! second fault when the first touch was a read), and a call touches only a
//! few: the binary's static `ALLOCATOR` is put in a zero-filled section of
//! its own, `.sbss.arena` (the save tool helper's stack likewise), which
//! the linker places after `.bss` on every target. The few kilobytes of
//! small statics (the C library's, `std`'s, the wrapper's) then lie together
//! on two pages instead of on both sides of 1 MiB of arrays, and the arena's
//! first bytes on the page after them. Its counter comes first and is first
//! touched by a write. Measured on a wrapped `iptables -V`: 3 page faults
//! for all writable memory but the stack, against 5. Large blocks (the
//! netlink receive buffers, 64 KiB of which the replies to a batch of
//! lookups fill a few hundred bytes) are taken from the arena's other end,
//! so the small blocks handed out before and after one lie together instead
//! of on both sides of it: one page fault fewer where the kernel is read
//! (bench/README.md).
//!
//! What does not fit (a large legacy table's GET_ENTRIES copy, or anything
//! once the arena is used up by a long `detect`) comes from the system
//! allocator and is freed there as usual, so a process that keeps allocating
//! is as correct as with the system allocator alone, just no faster.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The arena of the binary: enough for every allocation of a wrapped call,
/// receive buffers included (only the pages used are ever touched).
pub const CALL_ARENA_BYTES: usize = 1024 * 1024;

/// A block this large or larger is taken from the arena's top end.
const LARGE_BLOCK: usize = 16 * 1024;

/// A bump arena of `N` bytes (under 4 GiB) in front of the system allocator.
///
/// `taken` comes first (`repr(C)`): it then shares a page with the first
/// bytes handed out, instead of sitting alone past the end of `bytes`,
/// where its first read and first write each cost a page fault.
#[repr(C)]
pub struct BumpArena<const N: usize> {
    /// How much of `bytes` has been handed out: from its start (the low 32
    /// bits) and from its end (the high 32), in one word, so that one
    /// compare-and-swap reserves a block from either side. Neither ever
    /// decreases; the free middle is still zero.
    taken: AtomicU64,
    bytes: UnsafeCell<Bytes<N>>,
}

/// The two ends of [`BumpArena::taken`].
#[derive(Clone, Copy)]
struct Taken {
    from_start: usize,
    from_end: usize,
}

impl Taken {
    fn unpack(word: u64) -> Taken {
        Taken {
            from_start: (word & u64::from(u32::MAX)) as usize,
            from_end: (word >> 32) as usize,
        }
    }

    fn pack(self) -> u64 {
        self.from_start as u64 | (self.from_end as u64) << 32
    }
}

#[repr(C, align(16))]
struct Bytes<const N: usize>([u8; N]);

// SAFETY: the arena hands out each byte range at most once (the range is
// reserved by a compare-and-swap on `taken` before it is returned), so no
// two holders ever share memory; `bytes` itself is never read or written
// through `&self` except inside a range its caller owns.
unsafe impl<const N: usize> Sync for BumpArena<N> {}

impl<const N: usize> BumpArena<N> {
    pub const fn new() -> Self {
        assert!((N as u64) < 1 << 32, "both ends of `taken` must fit in 32 bits");
        BumpArena {
            taken: AtomicU64::new(0),
            bytes: UnsafeCell::new(Bytes([0; N])),
        }
    }

    fn base(&self) -> *mut u8 {
        self.bytes.get().cast::<u8>()
    }

    /// Whether `ptr` was handed out by the arena.
    fn holds(&self, ptr: *mut u8) -> bool {
        let start = self.base() as usize;
        (start..start + N).contains(&(ptr as usize))
    }

    /// Reserves `layout` from the arena's unused, still zero, memory: at the
    /// start of the free middle, or at its end for a large block.
    fn bump(&self, layout: Layout) -> Option<*mut u8> {
        let start = self.base() as usize;
        // Read by a compare-and-swap, a write access: the arena's first
        // page then faults in once, written, instead of read-only first
        // (the zero page) and again at the write.
        let (Ok(mut word) | Err(mut word)) = self.taken.compare_exchange(0, 0, Ordering::Relaxed, Ordering::Relaxed);
        loop {
            let taken = Taken::unpack(word);
            let free_end = N - taken.from_end;
            let (offset, now) = if layout.size() >= LARGE_BLOCK {
                // The highest aligned offset at which the block ends by free_end.
                let offset = (start + free_end.checked_sub(layout.size())?) / layout.align() * layout.align();
                let offset = offset.checked_sub(start).filter(|&offset| offset >= taken.from_start)?;
                (
                    offset,
                    Taken {
                        from_end: N - offset,
                        ..taken
                    },
                )
            } else {
                let offset = (start + taken.from_start).checked_next_multiple_of(layout.align())? - start;
                let end = offset.checked_add(layout.size()).filter(|&end| end <= free_end)?;
                (
                    offset,
                    Taken {
                        from_start: end,
                        ..taken
                    },
                )
            };
            match self
                .taken
                .compare_exchange_weak(word, now.pack(), Ordering::Relaxed, Ordering::Relaxed)
            {
                // SAFETY: offset + size <= N, so the pointer stays inside
                // `bytes` and keeps its provenance.
                Ok(_) => return Some(unsafe { self.base().add(offset) }),
                Err(changed) => word = changed,
            }
        }
    }

    /// Grows or shrinks `ptr`'s block where it is: shrinking always works;
    /// growing only for the last block handed out from the start, into the
    /// free middle.
    fn resize_in_place(&self, ptr: *mut u8, old_size: usize, new_size: usize) -> bool {
        if new_size <= old_size {
            return true;
        }
        let offset = ptr as usize - self.base() as usize;
        let mut word = self.taken.load(Ordering::Relaxed);
        loop {
            let taken = Taken::unpack(word);
            if taken.from_start != offset + old_size {
                return false;
            }
            let Some(new_end) = offset.checked_add(new_size).filter(|&end| end <= N - taken.from_end) else {
                return false;
            };
            let now = Taken {
                from_start: new_end,
                ..taken
            };
            match self
                .taken
                .compare_exchange_weak(word, now.pack(), Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(changed) => word = changed,
            }
        }
    }
}

impl<const N: usize> Default for BumpArena<N> {
    fn default() -> Self {
        BumpArena::new()
    }
}

// SAFETY: every block is either a fresh, exclusively reserved arena range of
// the requested size and alignment, or comes from `System` and goes back to
// it; `holds` tells the two apart by address.
unsafe impl<const N: usize> GlobalAlloc for BumpArena<N> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.bump(layout) {
            Some(ptr) => ptr,
            // SAFETY: forwarded with the caller's (non-zero-size) layout.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match self.bump(layout) {
            // Never handed out before, so still the static's zeros.
            Some(ptr) => ptr,
            // SAFETY: as in `alloc`.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !self.holds(ptr) {
            // SAFETY: not the arena's, so System allocated it with `layout`.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !self.holds(ptr) {
            // SAFETY: System's block, resized by System.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        if self.resize_in_place(ptr, layout.size(), new_size) {
            return ptr;
        }
        // SAFETY: the caller guarantees that new_size, rounded up to the
        // alignment, does not overflow isize.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: new_layout has a non-zero size (new_size > old size here).
        let moved = unsafe { self.alloc(new_layout) };
        if !moved.is_null() {
            // SAFETY: both blocks are live, distinct and at least
            // layout.size() (< new_size) bytes long.
            unsafe { std::ptr::copy_nonoverlapping(ptr, moved, layout.size()) };
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn allocations_are_aligned_disjoint_and_zeroed() {
        static ARENA: BumpArena<4096> = BumpArena::new();
        unsafe {
            let a = ARENA.alloc(layout(3, 1));
            let b = ARENA.alloc_zeroed(layout(64, 64));
            assert!(ARENA.holds(a) && ARENA.holds(b));
            assert_eq!(b as usize % 64, 0);
            assert!(b as usize >= a as usize + 3);
            assert!(std::slice::from_raw_parts(b, 64).iter().all(|&x| x == 0));
            a.write_bytes(0xff, 3);
            ARENA.dealloc(a, layout(3, 1));
            // Freed memory is never handed out again, so zeroed stays zero.
            let c = ARENA.alloc_zeroed(layout(3, 1));
            assert_ne!(c, a);
            assert!(std::slice::from_raw_parts(c, 3).iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn the_last_block_grows_in_place_others_move_with_their_bytes() {
        static ARENA: BumpArena<4096> = BumpArena::new();
        unsafe {
            let first = ARENA.alloc(layout(8, 8));
            first.copy_from(b"abcdefgh".as_ptr(), 8);
            assert_eq!(ARENA.realloc(first, layout(8, 8), 100), first, "last block: in place");
            let second = ARENA.alloc(layout(8, 8));
            let moved = ARENA.realloc(first, layout(100, 8), 200);
            assert!(moved != first && moved as usize > second as usize);
            assert_eq!(std::slice::from_raw_parts(moved, 8), b"abcdefgh");
            assert_eq!(ARENA.realloc(moved, layout(200, 8), 10), moved, "shrinking stays");
        }
    }

    #[test]
    fn large_blocks_come_from_the_top_and_small_ones_stay_together() {
        static ARENA: BumpArena<{ 3 * LARGE_BLOCK }> = BumpArena::new();
        unsafe {
            let base = ARENA.base() as usize;
            let small = ARENA.alloc(layout(100, 8));
            let large = ARENA.alloc_zeroed(layout(LARGE_BLOCK, 64));
            let top = base + 3 * LARGE_BLOCK;
            assert_eq!(large as usize % 64, 0);
            assert!(
                large as usize + LARGE_BLOCK <= top && large as usize + LARGE_BLOCK + 64 > top,
                "at the top"
            );
            assert!(std::slice::from_raw_parts(large, LARGE_BLOCK).iter().all(|&x| x == 0));
            let next = ARENA.alloc(layout(100, 8));
            assert_eq!(next as usize, small as usize + 104, "right after the first small block");
            // The last small block still grows in place, but not into the large one.
            assert_eq!(ARENA.realloc(next, layout(100, 8), 1000), next);
            let second_large = ARENA.alloc(layout(LARGE_BLOCK, 8));
            assert!(ARENA.holds(second_large) && (second_large as usize) < large as usize);
            assert!(second_large as usize >= next as usize + 1000);
            // The middle is now too small for either kind.
            let third_large = ARENA.alloc(layout(LARGE_BLOCK, 8));
            assert!(!third_large.is_null() && !ARENA.holds(third_large));
            let grown = ARENA.realloc(next, layout(1000, 8), LARGE_BLOCK);
            assert!(!ARENA.holds(grown));
            ARENA.dealloc(third_large, layout(LARGE_BLOCK, 8));
            ARENA.dealloc(grown, layout(LARGE_BLOCK, 8));
        }
    }

    #[test]
    fn what_does_not_fit_goes_to_the_system_allocator() {
        static ARENA: BumpArena<256> = BumpArena::new();
        unsafe {
            let big = ARENA.alloc_zeroed(layout(1000, 8));
            assert!(!big.is_null() && !ARENA.holds(big));
            assert!(std::slice::from_raw_parts(big, 1000).iter().all(|&x| x == 0));
            let small = ARENA.alloc(layout(200, 8));
            assert!(ARENA.holds(small));
            small.copy_from(b"kept".as_ptr(), 4);
            // Full: growing moves the block out, bytes and all.
            let grown = ARENA.realloc(small, layout(200, 8), 300);
            assert!(!ARENA.holds(grown));
            assert_eq!(std::slice::from_raw_parts(grown, 4), b"kept");
            let grown = ARENA.realloc(grown, layout(300, 8), 5000);
            assert_eq!(std::slice::from_raw_parts(grown, 4), b"kept");
            ARENA.dealloc(grown, layout(5000, 8));
            ARENA.dealloc(big, layout(1000, 8));
            assert!(!ARENA.alloc(layout(100, 8)).is_null());
        }
    }
}
