//! Handing memory a closed session freed back to the operating system.
//!
//! glibc's allocator keeps freed memory in its arenas (one per thread that allocated, and the
//! daemon's runtime threads all parse logs) and returns little of it on its own, so a daemon
//! that opened and closed many sessions kept the peak of them all. `malloc_trim` gives back the
//! free pages of every arena. Other allocators (musl, macOS) return memory by themselves.

use std::sync::atomic::{AtomicBool, Ordering};

/// A trim is queued and has not started: frees until it starts are covered by it.
static QUEUED: AtomicBool = AtomicBool::new(false);

/// Give freed heap memory back to the OS, soon, on a blocking thread (trimming large arenas
/// takes milliseconds, and takes the allocator's locks). Closing fifty sessions in a row queues
/// one or two trims, not fifty.
pub fn return_freed_memory() {
    if QUEUED.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        QUEUED.store(false, Ordering::Release);
        trim();
        return;
    };
    runtime.spawn_blocking(|| {
        // Cleared first: what is freed while this trim runs queues the next one.
        QUEUED.store(false, Ordering::Release);
        trim();
    });
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas; it takes the
    // arenas' locks itself and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
