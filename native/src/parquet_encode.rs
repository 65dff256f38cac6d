//! Parquet value and level encoders used by `parquet_write`: PLAIN, the RLE / bit-packing hybrid
//! (definition and repetition levels, dictionary indices) and DELTA_BINARY_PACKED.
//!
//! Facts used (parquet format spec): bit packing is LSB first; a hybrid bit-packed run header is the
//! ULEB128 varint `(groups of 8 values << 1) | 1`, an RLE run header `(count << 1)` followed by the
//! value in ceil(width / 8) bytes; PLAIN BYTE_ARRAY is a 4-byte little-endian length then the bytes;
//! PLAIN BOOLEAN is one bit per value, LSB first. DELTA_BINARY_PACKED: header = block size, miniblocks
//! per block, total value count (varints), first value (zigzag varint); each block = min delta (zigzag
//! varint), one bit-width byte per miniblock, then the non-empty miniblocks bit-packed.

pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(out: &mut Vec<u8>, v: i64) {
    varint(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// Bits needed to store `v` (0 for 0).
pub fn bit_width(v: u64) -> u32 {
    64 - v.leading_zeros()
}

/// Append `vals` bit-packed at `width` bits each, LSB first; the total bit count must be a multiple of 8
/// (callers pad to groups of 8 values).
fn pack(out: &mut Vec<u8>, vals: impl Iterator<Item = u64>, width: u32) {
    if width == 0 {
        return;
    }
    let mut acc: u128 = 0;
    let mut nbits = 0u32;
    for v in vals {
        acc |= (v as u128) << nbits;
        nbits += width;
        if nbits >= 64 {
            out.extend_from_slice(&(acc as u64).to_le_bytes());
            acc >>= 64;
            nbits -= 64;
        }
    }
    let bytes = nbits.div_ceil(8) as usize;
    out.extend_from_slice(&(acc as u64).to_le_bytes()[..bytes]);
}

/// Bit-pack `vals` LSB first, zero-padded to a multiple of 8 values (whole bytes).
pub fn pack_slice<T: Copy + Into<u64>>(out: &mut Vec<u8>, vals: &[T], width: u32) {
    if width == 0 {
        return;
    }
    let mut rest = vals;
    if width <= PACK32_MAX_WIDTH {
        let mut blocks = vals.chunks_exact(32);
        for b in &mut blocks {
            pack32(out, b.try_into().unwrap(), width);
        }
        rest = blocks.remainder();
    }
    let n = rest.len().div_ceil(8) * width as usize; // bytes
    let start = out.len();
    out.resize(start + n + 8, 0);
    let dst = &mut out[start..];
    if width <= 32 {
        // accumulate in a u64, spill 32 bits at a time (v < 2^32 and < 32 bits pending: no overflow)
        let (mut acc, mut nbits, mut at) = (0u64, 0u32, 0usize);
        for &v in rest {
            acc |= v.into() << nbits;
            nbits += width;
            if nbits >= 32 {
                dst[at..at + 4].copy_from_slice(&(acc as u32).to_le_bytes());
                at += 4;
                acc >>= 32;
                nbits -= 32;
            }
        }
        dst[at..at + 8].copy_from_slice(&acc.to_le_bytes());
        out.truncate(start + n);
    } else {
        out.truncate(start);
        let pad = rest.len().next_multiple_of(8) - rest.len();
        pack(out, rest.iter().map(|&v| v.into()).chain(std::iter::repeat_n(0, pad)), width);
    }
}

/// Hybrid encoding of `vals` as one bit-packed run (padded with zeros to a multiple of 8 values;
/// readers stop at the count in the page header), or one RLE run when all values are equal.
pub fn hybrid<T: Copy + Into<u64> + PartialEq>(out: &mut Vec<u8>, vals: &[T], width: u32) {
    let Some(&first) = vals.first() else { return };
    if vals.iter().all(|&v| v == first) {
        rle_run(out, vals.len(), first.into(), width);
        return;
    }
    varint(out, ((vals.len().div_ceil(8) as u64) << 1) | 1);
    pack_slice(out, vals, width);
}

/// One RLE run: `n` times `value` (stored in ceil(width / 8) bytes).
pub fn rle_run(out: &mut Vec<u8>, n: usize, value: u64, width: u32) {
    varint(out, (n as u64) << 1);
    out.extend_from_slice(&value.to_le_bytes()[..width.div_ceil(8) as usize]);
}

/// Definition levels (width 1) of `n` rows straight from an Arrow validity bitmap starting at bit `bit0`.
pub fn def_levels_from_bitmap(out: &mut Vec<u8>, bitmap: &[u8], bit0: usize, n: usize) {
    if n == 0 {
        return;
    }
    let groups = n.div_ceil(8);
    varint(out, ((groups as u64) << 1) | 1);
    let start = out.len();
    copy_bits(out, bitmap, bit0, n);
    out.resize(start + groups, 0);
}

/// Append bits [bit0, bit0 + n) of `bitmap` LSB first, the last byte zero-padded.
pub fn copy_bits(out: &mut Vec<u8>, bitmap: &[u8], bit0: usize, n: usize) {
    let nbytes = n.div_ceil(8);
    if bit0 % 8 == 0 {
        let b = bit0 / 8;
        out.extend_from_slice(&bitmap[b..b + nbytes]);
    } else {
        let shift = bit0 % 8;
        let b = bit0 / 8;
        for i in 0..nbytes {
            let lo = bitmap[b + i] >> shift;
            let hi = if b + i + 1 < bitmap.len() { bitmap[b + i + 1] << (8 - shift) } else { 0 };
            out.push(lo | hi);
        }
    }
    let rem = n % 8;
    if rem != 0 {
        *out.last_mut().unwrap() &= (1u8 << rem) - 1;
    }
}

/// PLAIN BOOLEAN: `vals` as bits, LSB first.
pub fn plain_bools(out: &mut Vec<u8>, vals: impl Iterator<Item = bool>) {
    let mut byte = 0u8;
    let mut k = 0;
    for v in vals {
        byte |= (v as u8) << k;
        k += 1;
        if k == 8 {
            out.push(byte);
            byte = 0;
            k = 0;
        }
    }
    if k > 0 {
        out.push(byte);
    }
}

/// PLAIN BYTE_ARRAY of one value.
#[inline]
pub fn plain_bytes(out: &mut Vec<u8>, v: &[u8]) {
    out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    out.extend_from_slice(v);
}

const DELTA_BLOCK: usize = 128;
const DELTA_MINIBLOCKS: usize = 4;
const DELTA_MINI: usize = DELTA_BLOCK / DELTA_MINIBLOCKS;

/// Bit-pack exactly 32 values at `W` <= 32 bits (4 * W bytes). Each value's bit position is
/// `i * W`, a constant once the loop is unrolled (`W` is a compile-time constant), so every shift
/// and word index is fixed.
#[inline(always)]
fn pack32_w<T: Copy + Into<u64>, const W: u32>(out: &mut Vec<u8>, vals: &[T; 32]) {
    let mut words = [0u64; 17];
    macro_rules! put {
        ($($i:literal)*) => {$(
            let v = vals[$i].into();
            let bit = $i * W;
            let (w, off) = ((bit >> 6) as usize, bit & 63);
            words[w] |= v << off;
            if off + W > 64 {
                words[w + 1] |= v >> (64 - off);
            }
        )*};
    }
    put!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
    let n = 4 * W as usize;
    let start = out.len();
    out.resize(start + n, 0);
    for (k, chunk) in out[start..].chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&words[k].to_le_bytes()[..chunk.len()]);
    }
}

macro_rules! pack32_dispatch {
    ($out:expr, $vals:expr, $w:expr, $($n:literal)*) => {
        match $w {
            0 => {}
            $($n => pack32_w::<_, $n>($out, $vals),)*
            w => {
                let pad = 32usize.saturating_sub($vals.len());
                pack($out, $vals.iter().map(|&v| v.into()).chain(std::iter::repeat_n(0, pad)), w)
            }
        }
    };
}

const PACK32_MAX_WIDTH: u32 = 32;

/// Bit-pack one block of 32 values.
fn pack32<T: Copy + Into<u64>>(out: &mut Vec<u8>, vals: &[T; 32], w: u32) {
    pack32_dispatch!(out, vals, w, 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32);
}

macro_rules! delta_impl {
    ($name:ident, $t:ty, $u:ty) => {
        /// DELTA_BINARY_PACKED of values of the column's physical width (deltas wrap modulo 2^bits,
        /// as readers add them back).
        pub fn $name(out: &mut Vec<u8>, vals: &[$t]) {
            varint(out, DELTA_BLOCK as u64);
            varint(out, DELTA_MINIBLOCKS as u64);
            varint(out, vals.len() as u64);
            zigzag(out, vals.first().copied().unwrap_or(0) as i64);
            if vals.len() < 2 {
                return;
            }
            let mut deltas = [0 as $u; DELTA_BLOCK];
            let mut i = 1;
            while i < vals.len() {
                let m = (vals.len() - i).min(DELTA_BLOCK);
                let mut min = <$t>::MAX;
                for k in 0..m {
                    let d = vals[i + k].wrapping_sub(vals[i + k - 1]);
                    deltas[k] = d as $u;
                    min = min.min(d);
                }
                zigzag(out, min as i64);
                let mut widths = [0u8; DELTA_MINIBLOCKS];
                for k in 0..m {
                    deltas[k] = deltas[k].wrapping_sub(min as $u);
                }
                for (mb, w) in widths.iter_mut().enumerate() {
                    let lo = mb * DELTA_MINI;
                    if lo < m {
                        let or = deltas[lo..(lo + DELTA_MINI).min(m)].iter().fold(0 as $u, |a, &d| a | d);
                        *w = bit_width(or as u64) as u8;
                    }
                }
                for k in m..DELTA_BLOCK {
                    deltas[k] = 0;
                }
                out.extend_from_slice(&widths);
                for (mb, &w) in widths.iter().enumerate() {
                    let lo = mb * DELTA_MINI;
                    if lo < m {
                        let mini: &[$u; DELTA_MINI] = deltas[lo..lo + DELTA_MINI].try_into().unwrap();
                        pack32(out, mini, w as u32);
                    }
                }
                i += m;
            }
        }
    };
}

delta_impl!(delta_i64, i64, u64);
delta_impl!(delta_i32, i32, u32);
