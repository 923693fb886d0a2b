//! A counting global allocator: the heap this process holds, for
//! `store-memory`. Two counters: the bytes asked for, and those bytes as
//! glibc's malloc lays them out on 64-bit Linux (8 bytes of header, a
//! 16-byte alignment, 32 bytes at least), which is what RSS sees.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

pub struct Counting;

static ASKED: AtomicIsize = AtomicIsize::new(0);
static CHUNKS: AtomicIsize = AtomicIsize::new(0);

/// The size of the chunk glibc's malloc hands out for `size` bytes.
fn chunk(size: usize) -> isize {
    ((size + 8).div_ceil(16) * 16).max(32) as isize
}

fn count(size: usize, sign: isize) {
    ASKED.fetch_add(sign * size as isize, Ordering::Relaxed);
    CHUNKS.fetch_add(sign * chunk(size), Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size(), 1);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size(), 1);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(layout.size(), -1);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(layout.size(), -1);
        count(new_size, 1);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// (bytes asked for, bytes in malloc chunks) held now.
pub fn held() -> (isize, isize) {
    (
        ASKED.load(Ordering::Relaxed),
        CHUNKS.load(Ordering::Relaxed),
    )
}
