//! The cache's Arrow IPC files read as views of a memory mapping: `ipc_map(path)` returns the file's record
//! batches whose buffers point into the mapping (no copy; a page is read from the page cache when something
//! touches it), kept alive by the arrays that use it. The file format is Arrow's (arrow-ipc decodes it,
//! validation included); only the mapping is done here. Entries of the cache are written to a temporary
//! directory and renamed, never rewritten in place, so a mapping stays valid while it is held.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_buffer::Buffer;
use arrow_ipc::convert::fb_to_schema;
use arrow_ipc::reader::{read_footer_length, FileDecoder};
use arrow_ipc::root_as_footer;
use arrow_schema::{ArrowError, SchemaRef};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3_arrow::PyTable;

/// Why a file could not be read: it could not be opened or mapped (`Io`), or it is not a valid Arrow IPC
/// file (`Format`).
#[derive(Debug)]
pub enum MapError {
    Io(std::io::Error),
    Format(String),
}

impl From<ArrowError> for MapError {
    fn from(e: ArrowError) -> Self {
        MapError::Format(e.to_string())
    }
}

/// The file (still open) and its bytes as an Arrow buffer over a read-only mapping of it.
fn open_mapped(path: &Path) -> Result<(File, Buffer), MapError> {
    let file = File::open(path).map_err(MapError::Io)?;
    if file.metadata().map_err(MapError::Io)?.len() == 0 {
        return Ok((file, Buffer::from_vec(Vec::<u8>::new())));
    }
    // SAFETY: cache files are never modified once written (entries are renamed into place, see module doc)
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(MapError::Io)?;
    let (ptr, len) = (NonNull::new(map.as_ptr() as *mut u8).expect("mapping is not null"), map.len());
    // SAFETY: ptr is valid for len bytes as long as `map` lives; the buffer owns `map`
    Ok((file, unsafe { Buffer::from_custom_allocation(ptr, len, Arc::new(map)) }))
}

/// The schema and record batches of the Arrow IPC file at `path`, their buffers views of its mapping:
/// with `lo` / `hi`, only the rows whose ts lies in [lo, hi) (slice_by_ts); with `columns`, only these (by
/// name, in this order; absent ones left out). Only the rows and columns handed out are validated in full
/// (checking every dictionary key of a 1 GB table would read its pages for nothing).
pub fn read_mapped(
    path: &Path,
    lo: Option<i64>,
    hi: Option<i64>,
    columns: Option<&[String]>,
) -> Result<(SchemaRef, Vec<RecordBatch>), MapError> {
    let (file, bytes) = open_mapped(path)?;
    let (schema, mut batches) = decode(&bytes)?;
    if lo.is_some() || hi.is_some() {
        let probe = FileProbe { file, base: bytes.as_ptr() as usize, len: bytes.len() };
        batches = slice_by_ts(&batches, lo, hi, &|ts: &Int64Array, i: usize| probe.at(ts, i))?;
    }
    let (schema, batches) = project((schema, batches), columns)?;
    validate_values(&batches)?;
    Ok((schema, batches))
}

/// The columns named in `columns` (those the schema has, in that order) of the schema and batches; all of
/// them for None.
fn project(
    (schema, batches): (SchemaRef, Vec<RecordBatch>),
    columns: Option<&[String]>,
) -> Result<(SchemaRef, Vec<RecordBatch>), MapError> {
    let Some(names) = columns else {
        return Ok((schema, batches));
    };
    let keep: Vec<usize> = names.iter().filter_map(|n| schema.index_of(n).ok()).collect();
    let batches = batches.iter().map(|b| b.project(&keep)).collect::<Result<Vec<_>, _>>()?;
    Ok((Arc::new(schema.project(&keep)?), batches))
}

/// Every value of the arrays checked (dictionary keys in range, offsets, UTF-8): decode() checks only their
/// layout.
fn validate_values(batches: &[RecordBatch]) -> Result<(), MapError> {
    for b in batches {
        for c in b.columns() {
            c.to_data().validate_full()?;
        }
    }
    Ok(())
}

/// Decode a whole Arrow IPC file held in `buf` (its dictionaries first, then its record batches). The arrays'
/// layout is checked (buffer sizes, so that reading them stays in bounds), not their values: see
/// validate_values.
pub fn decode(buf: &Buffer) -> Result<(SchemaRef, Vec<RecordBatch>), MapError> {
    let bad = |what: &str| MapError::Format(format!("not an Arrow IPC file: {what}"));
    if buf.len() < 10 + 8 {
        return Err(bad("too short"));
    }
    let trailer = buf.len() - 10;
    let footer_len = read_footer_length(buf[trailer..].try_into().expect("10 bytes"))?;
    let footer_start = trailer.checked_sub(footer_len).ok_or_else(|| bad("footer larger than the file"))?;
    let footer = root_as_footer(&buf[footer_start..trailer]).map_err(|e| bad(&e.to_string()))?;
    let schema = Arc::new(fb_to_schema(footer.schema().ok_or_else(|| bad("no schema"))?));
    // SAFETY: the values are not trusted: every array's layout is validated below before anything reads it,
    // and its values (validate_values) before it leaves this module
    let mut decoder = unsafe { FileDecoder::new(schema.clone(), footer.version()).with_skip_validation(true) };
    let block_bytes = |b: &arrow_ipc::Block| -> Result<Buffer, MapError> {
        let start = usize::try_from(b.offset()).map_err(|_| bad("negative block offset"))?;
        let len =
            usize::try_from(b.metaDataLength() as i64 + b.bodyLength()).map_err(|_| bad("negative block length"))?;
        if start.checked_add(len).is_none_or(|end| end > footer_start) {
            return Err(bad("block beyond the data"));
        }
        Ok(buf.slice_with_length(start, len))
    };
    for block in footer.dictionaries().iter().flatten() {
        decoder.read_dictionary(block, &block_bytes(block)?)?;
    }
    let mut batches = Vec::new();
    for block in footer.recordBatches().iter().flatten() {
        if let Some(batch) = decoder.read_record_batch(block, &block_bytes(block)?)? {
            for c in batch.columns() {
                c.to_data().validate()?;
            }
            batches.push(batch);
        }
    }
    Ok((schema, batches))
}

/// Reads a ts value of a mapped array with pread, not through the mapping: a page read through a mapping
/// stays resident while the mapping lives, and with the page cache's large folios a probe brings in a whole
/// folio (binary searches over the 9 batches of a 1.1 GB table made ~70 MB resident, whatever the range).
struct FileProbe {
    file: File,
    base: usize,
    len: usize,
}

impl FileProbe {
    fn at(&self, ts: &Int64Array, i: usize) -> i64 {
        let p = ts.values().as_ptr() as usize + i * 8;
        let mut b = [0u8; 8];
        if p >= self.base
            && p + 8 <= self.base + self.len
            && self.file.read_exact_at(&mut b, (p - self.base) as u64).is_ok()
        {
            return i64::from_ne_bytes(b);
        }
        ts.value(i) // a buffer decode() copied (misaligned), or a read that failed: from memory
    }
}

/// The first index in 0..n where `past(i)` holds (`past` false then true along 0..n).
fn first_past(n: usize, past: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if past(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The rows of `batches` whose `ts` (an Int64 column without nulls, sorted across the batches) lies in
/// [lo, hi) (None: open end), as slices of the batches (nothing copied); `value(ts, i)` reads ts[i]. Format
/// error when there is no such column.
pub fn slice_by_ts(
    batches: &[RecordBatch],
    lo: Option<i64>,
    hi: Option<i64>,
    value: &dyn Fn(&Int64Array, usize) -> i64,
) -> Result<Vec<RecordBatch>, MapError> {
    let mut out = Vec::new();
    for b in batches {
        let ts = b
            .column_by_name("ts")
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .filter(|c| c.null_count() == 0)
            .ok_or_else(|| MapError::Format("no ts column of Int64 without nulls".into()))?;
        let n = ts.len();
        let start = lo.map_or(0, |lo| first_past(n, |i| value(ts, i) >= lo));
        let end = hi.map_or(n, |hi| first_past(n, |i| value(ts, i) >= hi));
        if end > start {
            out.push(b.slice(start, end - start));
        }
    }
    Ok(out)
}

/// The Arrow IPC file at `path` as an Arrow table (PyCapsule stream: `polars.DataFrame(table)`) whose
/// buffers are views of the file's mapping; with `ts_from` / `ts_to`, only the rows whose ts is in
/// [ts_from, ts_to) (binary search: ts must be sorted, as the cache's ts_sorted.json says); with `columns`,
/// only those (by name; absent ones left out), the others never read. OSError when the
/// file cannot be opened or mapped (the caller reads it instead), ValueError when it is not a valid Arrow IPC
/// file (or has no ts column to cut by).
#[pyfunction]
#[pyo3(signature = (path, ts_from=None, ts_to=None, columns=None))]
fn ipc_map(
    py: Python<'_>,
    path: std::path::PathBuf,
    ts_from: Option<i64>,
    ts_to: Option<i64>,
    columns: Option<Vec<String>>,
) -> PyResult<PyTable> {
    // a file damaged in a way arrow-ipc's checks miss must not end the process: a panic is a ValueError too
    let read = py.detach(|| std::panic::catch_unwind(|| read_mapped(&path, ts_from, ts_to, columns.as_deref())));
    match read {
        Ok(Ok((schema, batches))) => PyTable::try_new(batches, schema),
        Ok(Err(MapError::Io(e))) => Err(PyOSError::new_err(format!("{}: {e}", path.display()))),
        Ok(Err(MapError::Format(e))) => Err(PyValueError::new_err(format!("{}: {e}", path.display()))),
        Err(_) => Err(PyValueError::new_err(format!("{}: not a valid Arrow IPC file", path.display()))),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ipc_map, m)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::types::Int32Type;
    use arrow_array::{ArrayRef, DictionaryArray, Int64Array};
    use arrow_ipc::writer::FileWriter;

    fn sample(rows: i64, offset: i64) -> RecordBatch {
        let ts: ArrayRef = Arc::new(Int64Array::from_iter_values(offset..offset + rows));
        let comm: ArrayRef = Arc::new(
            (0..rows).map(|i| ["sh", "kworker/0:1"][(i % 2) as usize]).collect::<DictionaryArray<Int32Type>>(),
        );
        RecordBatch::try_from_iter([("ts", ts), ("comm", comm)]).unwrap()
    }

    fn ipc_bytes(batches: &[RecordBatch]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = FileWriter::try_new(&mut out, &batches[0].schema()).unwrap();
        for b in batches {
            w.write(b).unwrap();
        }
        w.finish().unwrap();
        drop(w);
        out
    }

    #[test]
    fn reads_back_what_was_written_with_its_dictionaries() {
        let batches = [sample(1000, 0), sample(10, 5000)];
        let (schema, back) = decode(&Buffer::from_vec(ipc_bytes(&batches))).unwrap();
        assert_eq!(schema, batches[0].schema());
        assert_eq!(back, batches);
    }

    #[test]
    fn maps_a_file_without_copying_its_columns() {
        let dir = std::env::temp_dir().join(format!("abtest-cache-ipc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.arrow");
        std::fs::write(&path, ipc_bytes(&[sample(4096, 7)])).unwrap();
        // a time range read with pread probes: the same rows as from memory
        let (_, cut) = read_mapped(&path, Some(10), Some(20), None).unwrap();
        assert_eq!(cut, [sample(4096, 7).slice(3, 10)]);
        let (_, mapped) = open_mapped(&path).unwrap();
        let (_, back) = decode(&mapped).unwrap();
        validate_values(&back).unwrap();
        std::fs::remove_dir_all(&dir).unwrap(); // the mapping outlives the file's name
        assert_eq!(back, [sample(4096, 7)]);
        // the ts values are read where the mapping holds them, not from a copy
        let ts = back[0].column(0).to_data().buffers()[0].as_ptr() as usize;
        let map = mapped.as_ptr() as usize;
        assert!(ts >= map && ts + 4096 * 8 <= map + mapped.len());
    }

    #[test]
    fn refuses_what_is_not_an_ipc_file() {
        for bytes in [&b""[..], &b"ARROW1"[..], &[0u8; 64][..]] {
            assert!(matches!(
                decode(&Buffer::from_vec(bytes.to_vec())),
                Err(MapError::Format(_)) | Err(MapError::Io(_))
            ));
        }
        let mut good = ipc_bytes(&[sample(100, 0)]);
        let n = good.len();
        good[n - 10..n - 6].copy_from_slice(&u32::MAX.to_le_bytes()); // footer length beyond the file
        assert!(matches!(decode(&Buffer::from_vec(good)), Err(MapError::Format(_))));
    }

    #[test]
    fn projects_columns_by_name() {
        let batches = vec![sample(10, 0)];
        let schema = batches[0].schema();
        let pick = |names: &[&str]| {
            let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
            let (s, b) = project((schema.clone(), batches.clone()), Some(&names)).unwrap();
            (s.fields().iter().map(|f| f.name().clone()).collect::<Vec<_>>(), b[0].num_columns())
        };
        assert_eq!(pick(&["comm", "ts"]), (vec!["comm".to_string(), "ts".to_string()], 2));
        assert_eq!(pick(&["ts", "absent"]), (vec!["ts".to_string()], 1));
        assert_eq!(project((schema.clone(), batches.clone()), None).unwrap().1, batches);
    }

    #[test]
    fn slices_by_time_across_batches() {
        // ts 0..1000 then 5000..5010, in two batches
        let batches = [sample(1000, 0), sample(10, 5000)];
        let rows = |lo, hi| -> Vec<i64> {
            let cut = slice_by_ts(&batches, lo, hi, &|ts: &Int64Array, i: usize| ts.value(i)).unwrap();
            cut.iter()
                .flat_map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec())
                .collect()
        };
        assert_eq!(rows(Some(998), Some(5002)), [998, 999, 5000, 5001]);
        assert_eq!(rows(None, Some(2)), [0, 1]);
        assert_eq!(rows(Some(5008), None), [5008, 5009]);
        assert!(rows(Some(2000), Some(3000)).is_empty());
        assert_eq!(rows(None, None).len(), 1010);
        let no_ts = RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from(vec![1])) as ArrayRef)]).unwrap();
        assert!(matches!(
            slice_by_ts(&[no_ts], Some(0), None, &|t: &Int64Array, i: usize| t.value(i)),
            Err(MapError::Format(_))
        ));
    }

    #[test]
    fn a_missing_file_is_an_io_error() {
        assert!(matches!(read_mapped(Path::new("/nonexistent/abtest.arrow"), None, None, None), Err(MapError::Io(_))));
    }
}
