//! v7 compressed sections and flyrecord chunks (zstd, zlib), inflated to exactly the size their header
//! declares, within the limits on inflated sizes (`Limits`): a header field never sizes an allocation
//! beyond them.

/// Largest inflated size a compressed block may claim: `max(ratio x compressed size, floor)`, never more
/// than `absolute` (bytes). The same rule, defaults and settings as abtest's other readers
/// (abtest/trace/limits.py, ABTEST_MAX_INFLATE_*): real chunks inflate ~7x (zstd).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub inflate_ratio: f64,
    pub inflate_floor: u64,
    pub inflated_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { inflate_ratio: 250.0, inflate_floor: 64 << 20, inflated_bytes: 8 << 30 }
    }
}

impl Limits {
    /// Largest inflated size allowed for a block of `compressed` bytes.
    pub fn max_inflated(&self, compressed: usize) -> u64 {
        let by_ratio = (self.inflate_ratio * compressed as f64).min(u64::MAX as f64) as u64;
        by_ratio.max(self.inflate_floor).min(self.inflated_bytes)
    }

    /// Err(message) when a block of `compressed` bytes declares more than its limit.
    pub fn check(&self, declared: u64, compressed: usize) -> Result<(), String> {
        let limit = self.max_inflated(compressed);
        if declared > limit {
            return Err(format!(
                "declares {declared} inflated bytes for {compressed} compressed bytes, more than the limit of \
                 {limit} bytes (max(ratio {} x compressed size, floor {}), at most {}; settings \
                 ABTEST_MAX_INFLATE_RATIO / _FLOOR_BYTES, ABTEST_MAX_INFLATED_BYTES)",
                self.inflate_ratio, self.inflate_floor, self.inflated_bytes
            ));
        }
        Ok(())
    }
}

/// The compression of a v7 file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Zstd,
    Zlib,
}

impl Codec {
    pub fn name(self) -> &'static str {
        match self {
            Codec::Zstd => "zstd",
            Codec::Zlib => "zlib",
        }
    }
}

/// A reusable decompression context of one codec.
pub struct Inflater {
    codec: Codec,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    zlib: flate2::Decompress,
}

impl Inflater {
    pub fn new(codec: Codec) -> Result<Inflater, String> {
        let zstd = match codec {
            Codec::Zstd => Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?),
            Codec::Zlib => None,
        };
        Ok(Inflater { codec, zstd, zlib: flate2::Decompress::new(true) })
    }

    /// Inflate `src` into `out` (cleared first); it must come out exactly `size` bytes. The caller has
    /// checked `size` against the limits.
    pub fn inflate(&mut self, src: &[u8], size: usize, out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        out.reserve(size);
        let name = self.codec.name();
        match (self.codec, self.zstd.as_mut()) {
            (Codec::Zstd, Some(d)) => {
                d.decompress_to_buffer(src, out).map_err(|e| format!("corrupt zstd stream ({e})"))?;
            }
            _ => {
                self.zlib.reset(true);
                let st = self
                    .zlib
                    .decompress_vec(src, out, flate2::FlushDecompress::Finish)
                    .map_err(|e| format!("corrupt zlib stream ({e})"))?;
                if st != flate2::Status::StreamEnd {
                    return Err(format!("corrupt zlib stream (it does not end within the declared {size} bytes)"));
                }
            }
        }
        if out.len() != size {
            return Err(format!("{name} data inflated to {} bytes, header says {size}", out.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_follow_ratio_floor_and_absolute() {
        let l = Limits { inflate_ratio: 10.0, inflate_floor: 100, inflated_bytes: 1000 };
        assert_eq!(l.max_inflated(1), 100);
        assert_eq!(l.max_inflated(50), 500);
        assert_eq!(l.max_inflated(500), 1000);
        assert!(l.check(0xFFFF_FFFF, 8).unwrap_err().contains("limit of 100 bytes"));
        assert!(l.check(100, 8).is_ok());
    }

    #[test]
    fn inflates_exact_sizes_only() {
        let page = vec![7u8; 4096];
        let z = zstd::bulk::compress(&page, 3).unwrap();
        let mut inf = Inflater::new(Codec::Zstd).unwrap();
        let mut out = Vec::new();
        inf.inflate(&z, 4096, &mut out).unwrap();
        assert_eq!(out, page);
        assert!(inf.inflate(&z, 100, &mut out).is_err());
        assert!(inf.inflate(&z[..z.len() / 2], 4096, &mut out).is_err());
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut e, &page).unwrap();
        let zl = e.finish().unwrap();
        let mut inf = Inflater::new(Codec::Zlib).unwrap();
        inf.inflate(&zl, 4096, &mut out).unwrap();
        assert_eq!(out, page);
        assert!(inf.inflate(&zl, 4095, &mut out).is_err());
    }
}
