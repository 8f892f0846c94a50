//! Handing memory the daemon freed back to the operating system. glibc's allocator keeps freed
//! pages in its arenas: a heap that many small allocations fragmented cannot shrink from its top,
//! so after a large release (sessions unloaded) the daemon asks it to return its whole free pages.

/// Asks the allocator to return the free pages it holds; answers whether it returned any.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn release_free_pages() -> bool {
    // SAFETY: malloc_trim takes no pointer from us; it walks the allocator's own free lists under
    // the allocator's locks and may be called from any thread at any time.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Other allocators return memory on their own; nothing to ask.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_pages() -> bool {
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn freed_memory_can_be_handed_back() {
        let blocks: Vec<Vec<u8>> = (0..1000).map(|i| vec![1u8; 4096 + i]).collect();
        drop(blocks);
        // Whether pages come back depends on the heap's state; the call must simply be safe.
        let _ = super::release_free_pages();
    }
}
