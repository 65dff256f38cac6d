//! `parquet_write_tables`: write Arrow columns (buffers handed over from Python) as parquet files, one
//! file per table, column chunks encoded in parallel on Rust threads with the GIL released.
//!
//! Layout (see docs/ingest.md "Parquet layout"): every column OPTIONAL (as polars writes them), row
//! groups of at most `row_group_rows` rows, v1 data pages of at most `page_rows` rows, definition
//! levels RLE/bit-packed (taken straight from the validity bitmap), no statistics. Values: PLAIN for
//! integers / floats / booleans / strings / binary, DELTA_BINARY_PACKED for non-decreasing 64-bit
//! integer chunks (the `ts` column), a PLAIN dictionary page + RLE_DICTIONARY indices for
//! Categorical columns (the existing codes, renumbered to the categories the chunk uses), List of
//! numbers with repetition levels. Pages are LZ4_RAW-compressed when asked.
//! The Arrow schema (the `ARROW:schema` key, base64 IPC) is supplied by the caller.
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

#[path = "parquet_encode.rs"]
mod enc;
#[path = "parquet_thrift.rs"]
mod thrift;
#[path = "parquet_column.rs"]
mod column;
#[path = "parquet_ints.rs"]
mod ints;

use column::{write_chunk, Col, IntMode, Kind, Opts, Sink};
use thrift::{ChunkMeta, Logical, RowGroupMeta, SchemaElem};

use crate::tracedat::tracedat_lazy::{RunColumn, RunField};

struct Table {
    path: String,
    arrow_schema: String,
    rows: usize,
    cols: Vec<Col>,
    row_group_rows: usize,
}

impl Table {
    fn groups(&self) -> usize {
        self.rows.div_ceil(self.row_group_rows)
    }

    fn schema(&self) -> Vec<SchemaElem> {
        let mut s = vec![SchemaElem {
            name: "schema".into(),
            physical: None,
            repetition: None,
            num_children: Some(self.cols.len() as i32),
            converted: None,
            logical: Logical::None,
        }];
        for c in &self.cols {
            let (conv, logical) = c.kind.annotation();
            if c.kind == Kind::List {
                let child = c.child.as_ref().unwrap();
                let (cconv, clogical) = child.kind.annotation();
                s.push(SchemaElem { name: c.name.clone(), physical: None, repetition: Some(1), num_children: Some(1),
                                    converted: Some(3), logical: Logical::List });
                s.push(SchemaElem { name: "list".into(), physical: None, repetition: Some(2), num_children: Some(1),
                                    converted: None, logical: Logical::None });
                s.push(SchemaElem { name: "element".into(), physical: Some(child.kind.physical()), repetition: Some(1),
                                    num_children: None, converted: cconv, logical: clogical });
            } else {
                s.push(SchemaElem { name: c.name.clone(), physical: Some(c.kind.physical()), repetition: Some(1),
                                    num_children: None, converted: conv, logical });
            }
        }
        s
    }

    fn path_of(&self, c: &Col) -> Vec<String> {
        if c.kind == Kind::List {
            vec![c.name.clone(), "list".into(), "element".into()]
        } else {
            vec![c.name.clone()]
        }
    }

    /// Write the file: magic, the column chunks (group-major) streamed page by page, footer, footer
    /// length, magic. Returns the file size in bytes.
    fn write(&self, sink: &mut Sink, opts: &Opts) -> Result<u64, String> {
        let err = |e: std::io::Error| format!("{}: {e}", self.path);
        sink.w = Box::new(BufWriter::with_capacity(1 << 16, File::create(&self.path).map_err(err)?));
        sink.pos = 0;
        sink.write(b"PAR1").map_err(err)?;
        let mut groups = Vec::with_capacity(self.groups());
        for g in 0..self.groups() {
            let r0 = g * self.row_group_rows;
            let r1 = (r0 + self.row_group_rows).min(self.rows);
            let mut metas = Vec::with_capacity(self.cols.len());
            for c in &self.cols {
                let st = match &c.runs {
                    None => write_chunk(sink, c, r0, r1, opts),
                    Some(runs) => write_runs_chunk(sink, c, runs, r0, r1, opts),
                }.map_err(|e| format!("{}: {e}", self.path))?;
                metas.push(ChunkMeta {
                    physical: st.physical,
                    encodings: st.encodings,
                    path: self.path_of(c),
                    codec: if opts.lz4 { thrift::CODEC_LZ4_RAW } else { thrift::CODEC_UNCOMPRESSED },
                    num_values: st.num_values,
                    uncompressed: st.uncompressed,
                    compressed: st.compressed,
                    data_page_offset: st.data_page_offset,
                    dictionary_page_offset: st.dictionary_page_offset,
                });
            }
            groups.push(RowGroupMeta { num_rows: (r1 - r0) as i64, chunks: metas });
        }
        let mut footer = Vec::new();
        let kv: Vec<(&[u8], &[u8])> = vec![(b"ARROW:schema", self.arrow_schema.as_bytes())];
        let created = concat!("abtest version ", env!("CARGO_PKG_VERSION"));
        thrift::file_metadata(&mut footer, &self.schema(), self.rows as i64, &groups, &kv, created);
        sink.write(&footer).map_err(err)?;
        sink.write(&(footer.len() as u32).to_le_bytes()).map_err(err)?;
        sink.write(b"PAR1").map_err(err)?;
        sink.w.flush().map_err(err)?;
        sink.w = Box::new(std::io::sink()); // closes the file
        Ok(sink.pos)
    }

    /// Relative cost of writing the table (bytes of input), to start the biggest first.
    fn cost(&self) -> usize {
        self.cols.iter().map(|c| self.rows * c.kind.width().max(1)).sum()
    }
}

/// Column chunk [r0, r1) of a column held as its runs: the rows gathered into the sink's scratch buffer
/// (reused by every such column on this thread), then encoded as an array of those values.
fn write_runs_chunk(sink: &mut Sink, c: &Col, runs: &RunField, r0: usize, r1: usize, opts: &Opts)
    -> Result<column::ChunkStats, String> {
    let mut scratch = std::mem::take(&mut sink.runs);
    let bytes = runs.fill(r0, r1, &mut scratch);
    // SAFETY: `scratch` holds `bytes` initialised bytes and is neither moved nor changed until it is put
    // back below, after the last use of `view`.
    let values: &'static [u8] = unsafe { std::slice::from_raw_parts(scratch.as_ptr() as *const u8, bytes) };
    let child = c.child.as_ref().map(|d| Box::new(Col { name: d.name.clone(), kind: d.kind, len: d.len, offset: 0,
                                                          validity: None, values: d.values, data: d.data, child: None,
                                                          runs: None }));
    let view = Col { name: c.name.clone(), kind: c.kind, len: r1 - r0, offset: 0, validity: None, values, data: &[],
                     child, runs: None };
    let st = write_chunk(sink, &view, 0, r1 - r0, opts);
    drop(view);
    sink.runs = scratch;
    st
}

fn addr_slice(t: &Bound<'_, PyTuple>, i: usize) -> PyResult<Option<&'static [u8]>> {
    let (addr, size): (usize, usize) = t.get_item(i)?.extract()?;
    if addr == 0 {
        return Ok(None);
    }
    // SAFETY: the Python caller passes the address and size of a live Arrow buffer it keeps alive
    // for the duration of `parquet_write_tables` (abtest/trace/parquet_write.py).
    Ok(Some(unsafe { std::slice::from_raw_parts(addr as *const u8, size) }))
}

/// (name, kind, len, offset, (validity addr, size), (values addr, size), (data addr, size), child|None),
/// or (name, RunColumn): a trace.dat column held as its runs (tracedat_lazy).
fn extract_col(obj: &Bound<'_, PyAny>) -> PyResult<Col> {
    let t = obj.downcast::<PyTuple>()?;
    if t.len() == 2 {
        let rc = t.get_item(1)?;
        let field = rc.downcast::<RunColumn>()?.get().field.clone();
        let kind = Kind::parse(field.kind()).expect("a writer kind");
        // SAFETY (both slices): the dictionary lives in the RunField, which the Col keeps alive (`runs`).
        let child = field.dictionary().map(|(offsets, bytes)| Box::new(Col {
            name: String::new(), kind: Kind::Str, len: offsets.len() / 8 - 1, offset: 0, validity: None,
            values: unsafe { std::slice::from_raw_parts(offsets.as_ptr(), offsets.len()) },
            data: unsafe { std::slice::from_raw_parts(bytes.as_ptr(), bytes.len()) }, child: None, runs: None }));
        return Ok(Col { name: t.get_item(0)?.extract()?, kind, len: field.rows(), offset: 0, validity: None,
                        values: &[], data: &[], child, runs: Some(field) });
    }
    let kind_s: String = t.get_item(1)?.extract()?;
    let kind = Kind::parse(&kind_s).ok_or_else(|| PyValueError::new_err(format!("unknown column kind {kind_s:?}")))?;
    let child = t.get_item(7)?;
    Ok(Col {
        name: t.get_item(0)?.extract()?,
        kind,
        len: t.get_item(2)?.extract()?,
        offset: t.get_item(3)?.extract()?,
        validity: addr_slice(t, 4)?,
        values: addr_slice(t, 5)?.unwrap_or(&[]),
        data: addr_slice(t, 6)?.unwrap_or(&[]),
        child: if child.is_none() { None } else { Some(Box::new(extract_col(&child)?)) },
        runs: None,
    })
}

/// Write parquet files. `tables`: list of (path, ARROW:schema base64 text, rows, [column tuples]);
/// column tuple layout in `extract_col`. `compression`: "lz4_raw" or "uncompressed". Returns the file
/// sizes in bytes. Buffers must stay alive and unchanged during the call (the GIL is released).
#[pyfunction]
#[pyo3(signature = (tables, compression="lz4_raw", row_group_rows=1 << 20, page_rows=1 << 17, ints="auto", threads=0))]
fn parquet_write_tables(py: Python<'_>, tables: Vec<Bound<'_, PyTuple>>, compression: &str, row_group_rows: usize,
                        page_rows: usize, ints: &str, threads: usize) -> PyResult<Vec<u64>> {
    let lz4 = match compression {
        "lz4_raw" => true,
        "uncompressed" => false,
        c => return Err(PyValueError::new_err(format!("compression {c:?}: expected lz4_raw or uncompressed"))),
    };
    if row_group_rows == 0 || page_rows == 0 {
        return Err(PyValueError::new_err("row_group_rows and page_rows must be > 0"));
    }
    let mut tabs = Vec::with_capacity(tables.len());
    for t in &tables {
        let cols_obj = t.get_item(3)?;
        let mut cols = Vec::new();
        for c in cols_obj.try_iter()? {
            cols.push(extract_col(&c?)?);
        }
        let tab = Table { path: t.get_item(0)?.extract()?, arrow_schema: t.get_item(1)?.extract()?,
                          rows: t.get_item(2)?.extract()?, cols, row_group_rows };
        for c in &tab.cols {
            if c.len != tab.rows {
                return Err(PyValueError::new_err(format!("{}: column {} has {} rows, table {}", tab.path, c.name, c.len, tab.rows)));
            }
            c.check().map_err(|e| PyValueError::new_err(format!("{}: {e}", tab.path)))?;
            if let Some(ch) = &c.child {
                let ok = match c.kind {
                    Kind::Cat(_) => ch.kind == Kind::Str && ch.validity.is_none(),
                    Kind::List => ch.kind.width() > 0 && !matches!(ch.kind, Kind::Str | Kind::Bin | Kind::List | Kind::Cat(_)),
                    _ => false,
                };
                if !ok {
                    return Err(PyValueError::new_err(format!("{}: column {}: unsupported child", tab.path, c.name)));
                }
            } else if matches!(c.kind, Kind::Cat(_) | Kind::List) {
                return Err(PyValueError::new_err(format!("{}: column {}: child missing", tab.path, c.name)));
            }
        }
        tabs.push(tab);
    }
    let ints = match ints {
        "auto" => IntMode::Auto,
        "delta" => IntMode::Delta,
        "plain" => IntMode::Plain,
        d => return Err(PyValueError::new_err(format!("ints {d:?}: expected auto, delta or plain"))),
    };
    let opts = Opts { lz4, page_rows, ints };
    let threads = if threads == 0 { std::thread::available_parallelism().map_or(2, |n| n.get()) } else { threads };
    let res = py.allow_threads(|| run(&tabs, &opts, threads));
    res.map_err(PyOSError::new_err)
}

static SINKS: Mutex<Vec<Sink>> = Mutex::new(Vec::new());

/// Write the tables on `threads` threads, biggest first; each thread streams whole files.
fn run(tabs: &[Table], opts: &Opts, threads: usize) -> Result<Vec<u64>, String> {
    let mut order: Vec<usize> = (0..tabs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(tabs[i].cost()));
    let sizes: Vec<Mutex<u64>> = tabs.iter().map(|_| Mutex::new(0)).collect();
    let error: Mutex<Option<String>> = Mutex::new(None);
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1).min(tabs.len().max(1)) {
            s.spawn(|| {
                // scratch buffers survive between calls: no page faults on fresh memory each time
                let mut sink = SINKS.lock().unwrap().pop().unwrap_or_else(Sink::new);
                sink.lz4 = opts.lz4;
                loop {
                    let j = next.fetch_add(1, Ordering::Relaxed);
                    if j >= order.len() || error.lock().unwrap().is_some() {
                        break;
                    }
                    let ti = order[j];
                    match tabs[ti].write(&mut sink, opts) {
                        Ok(n) => *sizes[ti].lock().unwrap() = n,
                        Err(e) => {
                            error.lock().unwrap().get_or_insert(e);
                        }
                    }
                }
                sink.shrink();
                SINKS.lock().unwrap().push(sink);
            });
        }
    });
    if let Some(e) = error.into_inner().unwrap() {
        return Err(e);
    }
    Ok(sizes.into_iter().map(|m| m.into_inner().unwrap()).collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(parquet_write_tables, m)?)?;
    Ok(())
}
