//! The extension's global allocator: large blocks, once freed, are kept mapped for reuse.
//!
//! On the VMs abtest is measured on, a fresh anonymous 4 KiB page costs microseconds to map in (fault,
//! zeroing, memory-cgroup charge), and a trace.dat convert of 2.6 M events allocated ~51,000 of them.
//! Within one decode, column vectors grow by doubling and leave the smaller block behind; a process
//! that decodes one trace after another (a comparison of N runs of kernel A and B, a notebook) frees the
//! previous trace's columns and maps the same sizes again. Reusing them took ~24,000 page allocations
//! and 9 % of the CPU time off each such convert (docs/ingest.md, "Memory reuse").
//!
//! So blocks of at least `LARGE` bytes (column vectors, parquet pages) are mapped directly (mmap; the
//! first page of each mapping holds its length) and a freed one is kept in a small cache of mapped
//! blocks, up to `ABTEST_NATIVE_CACHE_MB` (default 256 MiB; 0 turns the reuse off), instead of being
//! unmapped. A large allocation takes the smallest cached block that fits (a much longer one is split,
//! its tail staying cached); a growing vector moves into one (one copy instead of page faults) or is
//! remapped (mremap: no copy, the new pages are fresh). Only the merge threads of the trace.dat decode
//! unmap what they free at once (`UnmapFrees`): those are the per-CPU runs a merge has consumed, which
//! nothing later in the decode needs, and keeping them mapped would raise a decode's peak memory by
//! their size (~50 MB on the benchmark trace). Smaller blocks go to the system allocator (malloc).
//!
//! `abtest._native.release_cached_memory()` unmaps the cached blocks; `cached_memory()` counts them.
//! When no mapping can be made (vm.max_map_count reached), or with `ABTEST_NATIVE_MAP=0`, a large
//! block comes from the system allocator instead, with the same header page (marked SYSTEM_BLOCK).
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Blocks of at least this many bytes are mapped directly (and may be reused).
const LARGE: usize = 256 << 10;
const PAGE: usize = 4096;
/// Bytes in front of the data of a mapped block: its first page holds the mapping's length.
const HEADER: usize = PAGE;
/// Cached blocks at most (a freed block that finds no slot is unmapped).
const SLOTS: usize = 256;

/// Mapped blocks kept for reuse: (address of the mapping, its length), unordered.
struct Cache {
    blocks: [(usize, usize); SLOTS],
    n: usize,
    bytes: usize,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache { blocks: [(0, 0); SLOTS], n: 0, bytes: 0 });
/// Bytes the cache may hold (0: no reuse); set by `configure`.
static CAP: AtomicUsize = AtomicUsize::new(0);
/// Large blocks are mapped (1) or all taken from the system allocator (0, ABTEST_NATIVE_MAP=0); set by
/// `configure`.
static MAP: AtomicUsize = AtomicUsize::new(1);

extern "C" {
    fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut u8;
    fn munmap(addr: *mut u8, len: usize) -> i32;
    fn mremap(old: *mut u8, old_len: usize, new_len: usize, flags: i32, ...) -> *mut u8;
}
const PROT_READ_WRITE: i32 = 0x1 | 0x2;
const MAP_PRIVATE_ANONYMOUS: i32 = 0x02 | 0x20;
const MREMAP_MAYMOVE: i32 = 1;
const MAP_FAILED: *mut u8 = !0usize as *mut u8;

/// The allocator (installed as the extension's #[global_allocator] in lib.rs).
pub struct ReuseAlloc;

thread_local! {
    /// Blocks freed on this thread are unmapped at once (see `UnmapFrees`).
    static UNMAP_FREES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// While it lives, blocks freed on this thread are unmapped, not cached (see the module docs).
pub struct UnmapFrees;

impl UnmapFrees {
    pub fn enter() -> UnmapFrees {
        UNMAP_FREES.with(|c| c.set(true));
        UnmapFrees
    }
}

impl Drop for UnmapFrees {
    fn drop(&mut self) {
        UNMAP_FREES.with(|c| c.set(false));
    }
}

/// Set the cache cap from ABTEST_NATIVE_CACHE_MB (MiB; default 256), when the module is loaded.
pub fn configure() {
    let mb = std::env::var("ABTEST_NATIVE_CACHE_MB").ok().and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(256);
    CAP.store(mb.saturating_mul(1 << 20), Ordering::SeqCst);
    let map = std::env::var("ABTEST_NATIVE_MAP").map(|v| v.trim() != "0").unwrap_or(true);
    MAP.store(map as usize, Ordering::SeqCst);
}

/// Unmap every cached block; returns the bytes given back.
pub fn release_cached() -> usize {
    let blocks: Vec<(usize, usize)> = {
        let mut c = lock();
        let v = c.blocks[..c.n].to_vec();
        c.n = 0;
        c.bytes = 0;
        v
    };
    blocks.iter().map(|&(base, len)| {
        // SAFETY: a cached block is a whole mapping of `len` bytes that nothing references any more.
        unsafe { munmap(base as *mut u8, len) };
        len
    }).sum()
}

/// (blocks, bytes) held by the cache.
pub fn cached() -> (usize, usize) {
    let c = lock();
    (c.n, c.bytes)
}

/// The cache, locked (a panic while it was held cannot leave it inconsistent: its updates do not panic).
fn lock() -> std::sync::MutexGuard<'static, Cache> {
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

fn mapping_len(size: usize) -> Option<usize> {
    size.checked_add(HEADER + PAGE - 1).map(|n| n / PAGE * PAGE)
}

fn is_large(layout: &Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= PAGE
}

/// The smallest cached block of at least `len` bytes, taken out; a block much longer than that is split
/// and its tail (whole pages, a mapping of its own from then on) stays in the cache.
fn take_cached(len: usize) -> Option<(usize, usize)> {
    if CAP.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let mut c = lock();
    let n = c.n;
    let best = (0..n).filter(|&i| c.blocks[i].1 >= len).min_by_key(|&i| c.blocks[i].1)?;
    let (base, blen) = c.blocks[best];
    if blen - len >= LARGE + HEADER {
        c.blocks[best] = (base + len, blen - len);
        c.bytes -= len;
        return Some((base, len));
    }
    c.blocks[best] = c.blocks[n - 1];
    c.n -= 1;
    c.bytes -= blen;
    Some((base, blen))
}

/// Keep a freed mapping for reuse, or unmap it (a merge thread, the cache is full).
///
/// SAFETY: (base, len) is a whole mapping made by this allocator that nothing references any more.
unsafe fn give_back(base: usize, len: usize) {
    if !UNMAP_FREES.try_with(|c| c.get()).unwrap_or(true) {
        let cap = CAP.load(Ordering::Relaxed);
        let mut c = lock();
        if c.n < SLOTS && c.bytes + len <= cap {
            let n = c.n;
            c.blocks[n] = (base, len);
            c.n += 1;
            c.bytes += len;
            return;
        }
    }
    munmap(base as *mut u8, len);
}

/// Data pointer of a block at `base`: a mapping of `len` bytes, or SYSTEM_BLOCK (stored in the header).
///
/// SAFETY: base is a live block of at least HEADER bytes.
unsafe fn publish(base: *mut u8, len: usize) -> *mut u8 {
    *(base as *mut usize) = len;
    base.add(HEADER)
}

/// (base, length) of the mapping whose data starts at `ptr`.
///
/// SAFETY: ptr came from `publish`.
unsafe fn mapping_of(ptr: *mut u8) -> (usize, usize) {
    let base = ptr.sub(HEADER);
    (base as usize, *(base as *const usize))
}

/// Header value of a large block that lives in the system allocator (no mapping could be made, e.g.
/// the process has reached vm.max_map_count): freed and grown through malloc.
const SYSTEM_BLOCK: usize = 0;

/// Layout of a large block of `size` bytes held by the system allocator (header page included).
fn system_layout(size: usize) -> Option<Layout> {
    Layout::from_size_align(size.checked_add(HEADER)?, PAGE).ok()
}

/// A large block: a cached mapping that fits, else a fresh one (zero-filled by the kernel), else (no
/// mapping could be made) one from the system allocator. `zeroed`: a reused block is cleared first.
unsafe fn alloc_large(size: usize, zeroed: bool) -> *mut u8 {
    let Some(len) = mapping_len(size) else { return std::ptr::null_mut() };
    if let Some((base, blen)) = take_cached(len) {
        let p = publish(base as *mut u8, blen);
        if zeroed {
            std::ptr::write_bytes(p, 0, size);
        }
        return p;
    }
    if MAP.load(Ordering::Relaxed) != 0 {
        let base = mmap(std::ptr::null_mut(), len, PROT_READ_WRITE, MAP_PRIVATE_ANONYMOUS, -1, 0);
        if base != MAP_FAILED {
            return publish(base, len);
        }
    }
    let Some(sys) = system_layout(size) else { return std::ptr::null_mut() };
    let base = if zeroed { System.alloc_zeroed(sys) } else { System.alloc(sys) };
    if base.is_null() {
        return base;
    }
    publish(base, SYSTEM_BLOCK)
}

/// Free a large block (a mapping, or a system-allocator block of `size` bytes).
unsafe fn free_large(ptr: *mut u8, size: usize) {
    let (base, len) = mapping_of(ptr);
    if len == SYSTEM_BLOCK {
        if let Some(sys) = system_layout(size) {
            System.dealloc(base as *mut u8, sys);
        }
    } else {
        give_back(base, len);
    }
}

/// Grow a large block to `new_size` bytes: in place when its mapping is long enough, into a cached
/// block that fits (one copy), by mremap (no copy), else into any new large block (one copy).
unsafe fn grow_large(ptr: *mut u8, size: usize, new_size: usize) -> *mut u8 {
    let (base, len) = mapping_of(ptr);
    let Some(need) = mapping_len(new_size) else { return std::ptr::null_mut() };
    if len != SYSTEM_BLOCK {
        if need <= len {
            return ptr; // fits the mapping (a reused block larger than asked, or shrinking)
        }
        if let Some((nb, nlen)) = take_cached(need) {
            let p = publish(nb as *mut u8, nlen);
            std::ptr::copy_nonoverlapping(ptr, p, size);
            give_back(base, len);
            return p;
        }
        let nb = mremap(base as *mut u8, len, need, MREMAP_MAYMOVE);
        if nb != MAP_FAILED {
            return publish(nb, need);
        }
    }
    // a system block, or mremap refused (a range that madvise split into several VMAs:
    // tracedat_merge::prefault marks parts of a vector MADV_HUGEPAGE; or no mapping to be had)
    let p = alloc_large(new_size, false);
    if !p.is_null() {
        std::ptr::copy_nonoverlapping(ptr, p, size.min(new_size));
        free_large(ptr, size);
    }
    p
}

unsafe impl GlobalAlloc for ReuseAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_large(&layout) {
            alloc_large(layout.size(), false)
        } else {
            System.alloc(layout)
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_large(&layout) {
            alloc_large(layout.size(), true)
        } else {
            System.alloc_zeroed(layout)
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_large(&layout) {
            free_large(ptr, layout.size());
        } else {
            System.dealloc(ptr, layout)
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        match (is_large(&layout), is_large(&new_layout)) {
            (false, false) => System.realloc(ptr, layout, new_size),
            (true, true) => grow_large(ptr, layout.size(), new_size),
            _ => {
                // one side small: allocate the other kind, copy the common prefix, free the old block
                let p = self.alloc(new_layout);
                if !p.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                p
            }
        }
    }
}
