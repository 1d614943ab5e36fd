//! Handing memory a closed session freed back to the operating system.
//!
//! glibc's allocator keeps freed memory in its arenas (one per thread that allocated, and the
//! daemon's runtime threads all parse logs) and returns little of it on its own, so a daemon
//! that opened and closed many sessions kept the peak of them all. `malloc_trim` gives back the
//! free pages of every arena. Other allocators (musl, macOS) return memory by themselves.

/// Give freed heap memory back to the OS; runs on a blocking thread, since trimming large
/// arenas takes a few milliseconds.
pub async fn return_freed_memory() {
    let _ = tokio::task::spawn_blocking(trim).await;
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
