//! The counting global allocator shared by the allocation tests (`core/tests/*alloc*.rs`).
//! Declaring `mod alloc_support;` installs it for that test binary.
//!
//! It counts the heap allocations (`alloc` and `realloc`) made by the calling thread, so a
//! test measures only its own work, whatever the harness's other threads do.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call unchanged to the system allocator; the counter is a
// const-initialised thread-local Cell, which never allocates (and `try_with` skips
// counting while the thread's locals are being torn down).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap allocations this thread has made so far; tests compare two readings.
pub fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}
