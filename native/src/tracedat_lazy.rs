//! Columns of a merged table kept as their per-CPU runs plus the merge plan ("run columns").
//!
//! `abtest trace convert` writes most tables straight to parquet. Merging such a table's fields into
//! whole time-ordered arrays first (tracedat_merge) writes every value once more into fresh memory that
//! the parquet writer then reads once and drops. A run column skips that: the decode merges only the
//! timestamps (which fixes the row order: the Plan) and, for a Categorical field, the dictionary; the
//! parquet writer then gathers each row group's values from the runs along the plan into one scratch
//! buffer that it reuses for every column (`RunField::fill`), and encodes them from there. The values,
//! and so the files, are the same as from the merged arrays. A table that is not written that way (it
//! becomes a polars frame) gets its run columns merged into arrays by `tracedat_materialize`.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use super::tracedat_columns::{Builder, Col, FieldSpec, Num};
use super::tracedat_merge::Plan;

/// The values of a run column, per run.
enum Vals {
    /// a numeric field: one vector per run, all of the same variant
    Num(Vec<Num>),
    /// a Categorical field: each run's codes and their translation onto the merged dictionary
    Cat { codes: Vec<Vec<u32>>, remap: Vec<Vec<u32>>, offsets: Vec<i64>, bytes: Vec<u8> },
    /// the ring-buffer CPU: one value per run
    Cpu(Vec<i32>),
}

/// One field of a merged table as its runs and the table's merge plan.
pub struct RunField {
    spec: Option<FieldSpec>,
    vals: Vals,
    plan: Arc<Plan>,
}

/// A numeric field's runs as slices of element type `$t` (`$var` the Num variant).
macro_rules! num_slices {
    ($runs:expr, $var:ident) => {
        $runs.iter().map(|n| match n {
            Num::$var(v) => v.as_slice(),
            _ => unreachable!("runs of one field share its type"),
        }).collect::<Vec<_>>()
    };
}

impl RunField {
    /// A numeric field (runs of one Num variant, in the plan's run order).
    pub fn num(spec: FieldSpec, runs: Vec<Num>, plan: Arc<Plan>) -> RunField {
        assert!(runs.iter().map(|r| r.len()).eq(plan.lens.iter().copied()), "runs do not fit the merge plan");
        RunField { spec: Some(spec), vals: Vals::Num(runs), plan }
    }

    /// A Categorical field: runs' codes, their translation (cat_dictionary) and the merged dictionary.
    pub fn cat(spec: FieldSpec, codes: Vec<Vec<u32>>, dictionary: (Vec<Vec<u32>>, Vec<i64>, Vec<u8>),
               plan: Arc<Plan>) -> RunField {
        let (remap, offsets, bytes) = dictionary;
        assert!(codes.iter().map(|r| r.len()).eq(plan.lens.iter().copied()), "runs do not fit the merge plan");
        RunField { spec: Some(spec), vals: Vals::Cat { codes, remap, offsets, bytes }, plan }
    }

    /// The ring-buffer CPU column: `cpus[r]` on every row of run r.
    pub fn cpu(cpus: Vec<i32>, plan: Arc<Plan>) -> RunField {
        assert!(cpus.len() == plan.lens.len(), "one CPU per run");
        RunField { spec: None, vals: Vals::Cpu(cpus), plan }
    }

    /// Column name (the CPU column: `__buffer_cpu`, as the decoder names it).
    pub fn name(&self) -> &str {
        self.spec.as_ref().map_or("__buffer_cpu", |s| s.0.as_str())
    }

    pub fn rows(&self) -> usize {
        self.plan.rows
    }

    /// The parquet writer's column kind (parquet_column::Kind::parse) of the merged column.
    pub fn kind(&self) -> &'static str {
        match &self.vals {
            Vals::Num(runs) => match runs[0] {
                Num::U8(_) => "u8",
                Num::I8(_) => "i8",
                Num::U16(_) => "u16",
                Num::I16(_) => "i16",
                Num::U32(_) => "u32",
                Num::I32(_) => "i32",
                Num::U64(_) => "u64",
                Num::I64(_) => "i64",
            },
            Vals::Cat { .. } => "cat32",
            Vals::Cpu(_) => "i32",
        }
    }

    /// (offsets as i64 bytes, text bytes) of a Categorical field's merged dictionary.
    pub fn dictionary(&self) -> Option<(&[u8], &[u8])> {
        match &self.vals {
            // SAFETY: i64 has no padding; the bytes view covers exactly the vector's elements.
            Vals::Cat { offsets, bytes, .. } => Some((unsafe {
                std::slice::from_raw_parts(offsets.as_ptr() as *const u8, offsets.len() * 8)
            }, bytes)),
            _ => None,
        }
    }

    /// Largest value (numeric and CPU columns; None when empty or Categorical).
    pub fn max(&self) -> Option<i64> {
        match &self.vals {
            Vals::Num(runs) => runs.iter().filter_map(num_max).max(),
            Vals::Cpu(cpus) => cpus.iter().zip(&self.plan.lens).filter(|(_, &n)| n > 0).map(|(&c, _)| c as i64).max(),
            Vals::Cat { .. } => None,
        }
    }

    /// Bytes per value of the merged column (Categorical: u32 codes).
    pub fn width(&self) -> usize {
        match self.kind() {
            "u8" | "i8" => 1,
            "u16" | "i16" => 2,
            "u32" | "i32" | "cat32" => 4,
            _ => 8,
        }
    }

    /// The merged column's rows [r0, r1) written into `out` (replacing its contents) as little-endian
    /// values of `width()` bytes (Categorical: u32 codes into `dictionary()`); returns their size in
    /// bytes.
    pub fn fill(&self, r0: usize, r1: usize, out: &mut Vec<u64>) -> usize {
        let bytes = (r1 - r0) * self.width();
        out.clear();
        out.reserve(bytes.div_ceil(8));
        // SAFETY: `out` has room for `bytes` bytes, 8-byte aligned.
        unsafe {
            self.fill_into(r0, r1, out.as_mut_ptr() as *mut u8);
            out.set_len(bytes.div_ceil(8));
        }
        bytes
    }

    /// `fill` into raw memory.
    ///
    /// SAFETY: dst has room for r1 - r0 values of `width()` bytes, aligned for them.
    unsafe fn fill_into(&self, r0: usize, r1: usize, dst: *mut u8) {
        assert!(r0 <= r1 && r1 <= self.plan.rows, "rows outside the table");
        let plan = &self.plan;
        match &self.vals {
            Vals::Num(runs) => match runs[0] {
                Num::U8(_) => fill_rows(&num_slices!(runs, U8), plan, r0, r1, dst, |_, v| v),
                Num::I8(_) => fill_rows(&num_slices!(runs, I8), plan, r0, r1, dst as *mut i8, |_, v| v),
                Num::U16(_) => fill_rows(&num_slices!(runs, U16), plan, r0, r1, dst as *mut u16, |_, v| v),
                Num::I16(_) => fill_rows(&num_slices!(runs, I16), plan, r0, r1, dst as *mut i16, |_, v| v),
                Num::U32(_) => fill_rows(&num_slices!(runs, U32), plan, r0, r1, dst as *mut u32, |_, v| v),
                Num::I32(_) => fill_rows(&num_slices!(runs, I32), plan, r0, r1, dst as *mut i32, |_, v| v),
                Num::U64(_) => fill_rows(&num_slices!(runs, U64), plan, r0, r1, dst as *mut u64, |_, v| v),
                Num::I64(_) => fill_rows(&num_slices!(runs, I64), plan, r0, r1, dst as *mut i64, |_, v| v),
            },
            Vals::Cat { codes, remap, .. } => {
                let runs: Vec<&[u32]> = codes.iter().map(|c| c.as_slice()).collect();
                let maps: Vec<&[u32]> = remap.iter().map(|m| m.as_slice()).collect();
                // every code of run s is below the size of its dictionary, the length of remap[s]
                // (the decoder made both), as merge_cat relies on too
                fill_rows(&runs, plan, r0, r1, dst as *mut u32, |s, c| *maps.get_unchecked(s).get_unchecked(c as usize));
            }
            Vals::Cpu(cpus) => fill_cpu(cpus, plan, r0, r1, dst as *mut i32),
        }
    }

    /// The whole merged column as a vector of T (T of `width()` bytes).
    fn merged<T: Copy>(&self) -> Vec<T> {
        assert!(std::mem::size_of::<T>() == self.width(), "element type of the column");
        let rows = self.plan.rows;
        let mut v: Vec<T> = Vec::with_capacity(rows);
        // SAFETY: room for `rows` values of T, aligned; fill_into writes all of them.
        unsafe {
            self.fill_into(0, rows, v.as_mut_ptr() as *mut u8);
            v.set_len(rows);
        }
        v
    }

    /// The merged column, gathered (no GIL needed), ready for `MergedCol::into_py`.
    fn merge(&self) -> MergedCol {
        let col = match (&self.vals, self.kind()) {
            (Vals::Cpu(_), _) => return MergedCol::Cpu(self.merged::<i32>()),
            (Vals::Cat { offsets, bytes, .. }, _) => Col::Cat {
                codes: self.merged::<u32>(), map: Default::default(), small: Default::default(), cache: Box::default(),
                offsets: offsets.clone(), bytes: bytes.clone() },
            (_, "u8") => Col::Num(Num::U8(self.merged())),
            (_, "i8") => Col::Num(Num::I8(self.merged())),
            (_, "u16") => Col::Num(Num::U16(self.merged())),
            (_, "i16") => Col::Num(Num::I16(self.merged())),
            (_, "u32") => Col::Num(Num::U32(self.merged())),
            (_, "i32") => Col::Num(Num::I32(self.merged())),
            (_, "u64") => Col::Num(Num::U64(self.merged())),
            _ => Col::Num(Num::I64(self.merged())),
        };
        MergedCol::Field(Builder { spec: self.spec.clone().expect("a field column has its spec"), col })
    }
}

/// A run column merged into arrays.
enum MergedCol {
    Field(Builder),
    Cpu(Vec<i32>),
}

impl MergedCol {
    /// The decoder's Python value: a numpy array, or ("cat", codes, offsets, bytes).
    fn into_py(self, py: Python<'_>) -> PyResult<PyObject> {
        match self {
            MergedCol::Field(b) => b.into_py(py),
            MergedCol::Cpu(v) => Ok(numpy::IntoPyArray::into_pyarray(v, py).into_any().unbind()),
        }
    }
}

fn num_max(n: &Num) -> Option<i64> {
    match n {
        Num::U8(v) => v.iter().max().map(|&x| x as i64),
        Num::I8(v) => v.iter().max().map(|&x| x as i64),
        Num::U16(v) => v.iter().max().map(|&x| x as i64),
        Num::I16(v) => v.iter().max().map(|&x| x as i64),
        Num::U32(v) => v.iter().max().map(|&x| x as i64),
        Num::I32(v) => v.iter().max().map(|&x| x as i64),
        Num::U64(v) => v.iter().max().map(|&x| x.min(i64::MAX as u64) as i64),
        Num::I64(v) => v.iter().max().copied(),
    }
}

/// Rows [r0, r1) of the merge of `runs` along `plan`, each value passed through `f(run, value)`,
/// written to `dst[0..r1 - r0]`.
///
/// SAFETY: dst has room for r1 - r0 values; the runs are the ones the plan was made from.
unsafe fn fill_rows<T: Copy, F: Fn(usize, T) -> T>(runs: &[&[T]], plan: &Plan, r0: usize, r1: usize, dst: *mut T, f: F) {
    if plan.sel.is_empty() {
        let mut row = 0usize; // first merged row of the segment
        let mut w = 0usize;
        for &(p, a, n) in &plan.segs {
            let (p, a, n) = (p as usize, a as usize, n as usize);
            let (lo, hi) = (row.max(r0), (row + n).min(r1));
            if lo < hi {
                let src = &runs[p][a + (lo - row)..a + (hi - row)];
                for (j, &v) in src.iter().enumerate() {
                    *dst.add(w + j) = f(p, v);
                }
                w += hi - lo;
            }
            row += n;
            if row >= r1 {
                break;
            }
        }
        assert!(w == r1 - r0, "merge plan does not cover the rows");
        return;
    }
    let sel = &plan.sel;
    assert!(sel.len() == plan.rows && runs.iter().map(|r| r.len()).eq(plan.lens.iter().copied()),
            "merge plan does not fit the runs");
    // each run's position at row r0: how many of the rows before it it holds
    let mut pos = vec![0usize; runs.len()];
    if runs.len() == 2 {
        // in bounds throughout: sel holds exactly lens[p] entries p (Plan), so no prefix of it takes more
        let before: usize = sel[..r0].iter().map(|&s| s as usize).sum();
        let (mut ia, mut ib) = (r0 - before, before);
        let (a, b) = (runs[0].as_ptr(), runs[1].as_ptr());
        for (w, &s) in sel[r0..r1].iter().enumerate() {
            let s = s as usize;
            // the source chosen by pointer (a conditional move), not by a branch: CPUs interleave every
            // few rows, which a branch predictor cannot follow
            let src = if s != 0 { b.add(ib) } else { a.add(ia) };
            ib += s;
            ia += 1 - s;
            *dst.add(w) = f(s, *src);
        }
        return;
    }
    for &s in &sel[..r0] {
        pos[s as usize] += 1;
    }
    for (w, &s) in sel[r0..r1].iter().enumerate() {
        let s = s as usize;
        let v = *runs[s].get(pos[s]).expect("merge plan does not fit the runs");
        pos[s] += 1;
        *dst.add(w) = f(s, v);
    }
}

/// Rows [r0, r1) of the CPU column: `cpus[run]` on every row of each run.
///
/// SAFETY: dst has room for r1 - r0 values.
unsafe fn fill_cpu(cpus: &[i32], plan: &Plan, r0: usize, r1: usize, dst: *mut i32) {
    if plan.sel.is_empty() {
        let mut row = 0usize;
        let mut w = 0usize;
        for &(p, _, n) in &plan.segs {
            let (lo, hi) = (row.max(r0), (row + n as usize).min(r1));
            for j in lo..hi {
                *dst.add(w + j - lo) = cpus[p as usize];
            }
            w += hi.saturating_sub(lo);
            row += n as usize;
            if row >= r1 {
                break;
            }
        }
        assert!(w == r1 - r0, "merge plan does not cover the rows");
        return;
    }
    for (w, &s) in plan.sel[r0..r1].iter().enumerate() {
        *dst.add(w) = cpus[s as usize];
    }
}

/// A merged table's column held as its runs (see the module docs): what `tracedat_fused(..., lazy=True)`
/// returns for the numeric, Categorical and CPU columns of tables it merged from several runs.
/// `abtest.trace.decoded` hands it to the parquet writer, or merges it with `tracedat_materialize`.
#[pyclass(frozen, module = "abtest._native")]
pub struct RunColumn {
    pub field: Arc<RunField>,
}

#[pymethods]
impl RunColumn {
    /// The parquet writer's column kind: "i8" ... "u64", or "cat32" (Categorical, u32 codes).
    #[getter]
    fn kind(&self) -> &'static str {
        self.field.kind()
    }

    fn __len__(&self) -> usize {
        self.field.rows()
    }

    /// Largest value of a numeric column (None when empty or Categorical).
    fn max(&self) -> Option<i64> {
        self.field.max()
    }
}

/// Merge run columns into the decoder's arrays (numpy, or ("cat", codes, offsets, bytes)), on
/// min(columns, cores) threads with the GIL released.
#[pyfunction]
pub fn tracedat_materialize(py: Python<'_>, columns: Vec<Py<RunColumn>>) -> PyResult<Vec<PyObject>> {
    let fields: Vec<Arc<RunField>> = columns.iter().map(|c| c.get().field.clone()).collect();
    let merged: Vec<Mutex<Option<MergedCol>>> = fields.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    py.allow_threads(|| {
        let threads = super::tracedat_pages::worker_count().min(fields.len()).max(1);
        std::thread::scope(|sc| {
            for _ in 0..threads {
                sc.spawn(|| loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= fields.len() {
                        break;
                    }
                    let m = fields[k].merge();
                    *merged[k].lock().unwrap() = Some(m);
                });
            }
        });
    });
    merged.into_iter().map(|m| m.into_inner().unwrap().expect("merged").into_py(py)).collect()
}
