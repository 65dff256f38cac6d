//! The table step of the streaming decode (tracedat_fused): every event type's per-CPU runs merged into
//! one table in timestamp order (tracedat_merge), on all cores; or, for tables written straight to
//! parquet (`lazy`), only their timestamps and Categorical dictionaries merged, the other columns left
//! as their runs (tracedat_lazy).
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;

use super::tracedat_columns::{Builder, Col};
use super::tracedat_lazy::{RunColumn, RunField};
use super::tracedat_merge::{cat_dictionary, cpu_column, gather_builder, plan_merge, Plan};
use super::tracedat_pages::worker_count;
use super::tracedat_split::join_pieces;
use super::TypeColumns;

/// One event type's per-CPU columns, in job order: (CPU, columns).
pub type Runs = Vec<(i32, TypeColumns)>;

/// One table: timestamps, ring-buffer CPU, field columns, in time order.
pub struct Merged {
    pub ty: u16,
    pub ts: Vec<i64>,
    pub cpu: Column,
    pub builders: Vec<Column>,
}

/// A merged column: its arrays, or (lazy merge) its runs and the table's plan (tracedat_lazy).
pub enum Column {
    Built(Builder),
    Cpu(Vec<i32>),
    Runs(RunField),
}

/// One table being merged: its runs as decoded (a CPU's pieces not yet joined); once planned, its runs'
/// field columns, field-major ([field][run]), its merged timestamps / CPUs and the plan moving every field.
struct Table {
    ty: u16,
    rows: usize,
    parts: Runs,
    cpus: Vec<i32>,
    fields: Vec<Vec<Builder>>,
    merged: Option<(Vec<i64>, Option<Vec<i32>>, Option<Arc<Plan>>)>,
}

impl Table {
    fn new(ty: u16, parts: Runs) -> Table {
        let rows = parts.iter().map(|p| p.1.ts.len()).sum();
        Table { ty, rows, parts, cpus: Vec::new(), fields: Vec::new(), merged: None }
    }

    /// Join each CPU's pieces into one run, split the runs into timestamps and field columns, merge the
    /// timestamps (ties go to the earlier run, i.e. CPU in file order) and derive the plan. `lazy`: the
    /// CPU column of a table of several runs is left to the plan (no array).
    fn plan(&mut self, lazy: bool) {
        let parts = join_pieces(std::mem::take(&mut self.parts));
        let nfields = parts[0].1.builders.len();
        self.fields = (0..nfields).map(|_| Vec::with_capacity(parts.len())).collect();
        let mut ts_runs = Vec::with_capacity(parts.len());
        for (cpu, tc) in parts {
            self.cpus.push(cpu);
            ts_runs.push(tc.ts);
            assert!(tc.builders.len() == nfields, "same fields per CPU");
            for (f, b) in self.fields.iter_mut().zip(tc.builders) {
                f.push(b);
            }
        }
        self.merged = Some(if ts_runs.len() == 1 {
            let ts = ts_runs.into_iter().next().unwrap();
            let cpu = vec![self.cpus[0]; ts.len()];
            (ts, Some(cpu), None)
        } else {
            let (ts, plan) = plan_merge(ts_runs);
            let cpu = (!lazy).then(|| cpu_column(&plan, &self.cpus));
            (ts, cpu, Some(Arc::new(plan)))
        });
    }
}

/// Whether a field of a table of several runs stays as its runs under the lazy merge (numeric and
/// Categorical fields; text and list fields are merged into arrays).
fn stays_runs(b: &Builder) -> bool {
    matches!(b.col, Col::Num(_) | Col::Cat { .. })
}

/// Merge every event type's per-CPU runs into its table, on min(types, cores) threads: first each
/// table's timestamps (which fixes its row order), then its fields, every (table, field) a separate
/// piece of work, biggest first, so that the threads stay busy until the end. `lazy`: the numeric,
/// Categorical and CPU columns of tables of several runs stay as their runs (tracedat_lazy; only a
/// Categorical field's dictionary is merged), for the parquet writer to gather row group by row group.
pub fn merge_tables(by_type: HashMap<u16, Runs>, lazy: bool) -> Vec<Merged> {
    let mut tables: Vec<Table> = by_type.into_iter().map(|(ty, parts)| Table::new(ty, parts)).collect();
    tables.sort_by_key(|t| (std::cmp::Reverse(t.rows), t.ty));
    let nthreads = worker_count().max(1);
    {
        let slots: Vec<Mutex<&mut Table>> = tables.iter_mut().map(Mutex::new).collect();
        let next = AtomicUsize::new(0);
        std::thread::scope(|sc| {
            for _ in 0..nthreads.min(slots.len()) {
                sc.spawn(|| {
                    let _unmap = unmap_frees();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= slots.len() {
                            break;
                        }
                        slots[k].lock().unwrap().plan(lazy);
                    }
                });
            }
        });
    }
    // fields: (table, field, element bytes x rows) for the merged tables, biggest first
    let mut work: Vec<(usize, usize, usize)> = Vec::new();
    for (t, tab) in tables.iter().enumerate() {
        if tab.cpus.len() > 1 {
            for (f, parts) in tab.fields.iter().enumerate() {
                if lazy && matches!(parts[0].col, Col::Num(_)) {
                    continue; // nothing to merge: the runs are the column
                }
                work.push((t, f, tab.rows * parts[0].elem_bytes()));
            }
        }
    }
    work.sort_by_key(|w| std::cmp::Reverse(w.2));
    let inputs: Vec<Mutex<Vec<Builder>>> = work.iter()
        .map(|&(t, f, _)| Mutex::new(std::mem::take(&mut tables[t].fields[f]))).collect();
    let outputs: Vec<Mutex<Option<Column>>> = work.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|sc| {
        let (tables, work, inputs, outputs, next) = (&tables, &work, &inputs, &outputs, &next);
        for _ in 0..nthreads.min(work.len()) {
            sc.spawn(move || {
                let _unmap = unmap_frees();
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= work.len() {
                        break;
                    }
                    let parts = std::mem::take(&mut *inputs[k].lock().unwrap());
                    let plan = tables[work[k].0].merged.as_ref().unwrap().2.as_ref().unwrap();
                    let out = if lazy && stays_runs(&parts[0]) {
                        Column::Runs(cat_runs(parts, plan.clone()))
                    } else {
                        Column::Built(gather_builder(parts, plan))
                    };
                    *outputs[k].lock().unwrap() = Some(out);
                }
            });
        }
    });
    let mut done: Vec<Vec<Option<Column>>> = tables.iter().map(|t| t.fields.iter().map(|_| None).collect()).collect();
    for (&(t, f, _), out) in work.iter().zip(outputs) {
        done[t][f] = out.into_inner().unwrap();
    }
    tables.into_iter().zip(done).map(|(tab, done)| {
        let (ts, cpu, plan) = tab.merged.unwrap();
        let cpu = match cpu {
            Some(c) => Column::Cpu(c),
            None => Column::Runs(RunField::cpu(tab.cpus.clone(), plan.clone().expect("a plan"))),
        };
        let builders = tab.fields.into_iter().zip(done).map(|(mut f, d)| match d {
            Some(c) => c,
            None if f.len() == 1 => Column::Built(f.pop().unwrap()),
            // a numeric field left as its runs (lazy)
            None => Column::Runs(num_runs(f, plan.clone().expect("a plan"))),
        }).collect();
        Merged { ty: tab.ty, ts, cpu, builders }
    }).collect()
}

/// A numeric field's runs as a run column.
fn num_runs(parts: Vec<Builder>, plan: Arc<Plan>) -> RunField {
    let spec = parts[0].spec.clone();
    let nums = parts.into_iter().map(|b| match b.col {
        Col::Num(n) => n,
        _ => unreachable!("a numeric field"),
    }).collect();
    RunField::num(spec, nums, plan)
}

/// A Categorical field's runs as a run column: its merged dictionary computed, the codes left as they are.
fn cat_runs(parts: Vec<Builder>, plan: Arc<Plan>) -> RunField {
    let spec = parts[0].spec.clone();
    let runs: Vec<(Vec<u32>, Vec<i64>, Vec<u8>)> = parts.into_iter().map(|b| match b.col {
        Col::Cat { codes, offsets, bytes, .. } => (codes, offsets, bytes),
        _ => unreachable!("a Categorical field"),
    }).collect();
    let dictionary = cat_dictionary(&runs, &plan);
    let codes = runs.into_iter().map(|r| r.0).collect();
    RunField::cat(spec, codes, dictionary, plan)
}

/// Blocks freed on this merge thread are unmapped at once (the runs it consumed; see alloc_reuse).
#[cfg(target_os = "linux")]
fn unmap_frees() -> crate::alloc_reuse::UnmapFrees {
    crate::alloc_reuse::UnmapFrees::enter()
}

#[cfg(not(target_os = "linux"))]
fn unmap_frees() {}

/// A merged column's Python value: a numpy array, a ("cat" | "utf8" | ..., ...) tuple, or a RunColumn.
pub fn column_py(py: Python<'_>, c: Column) -> PyResult<PyObject> {
    Ok(match c {
        Column::Built(b) => b.into_py(py)?,
        Column::Cpu(v) => numpy::IntoPyArray::into_pyarray(v, py).into_any().unbind(),
        Column::Runs(f) => Py::new(py, RunColumn { field: Arc::new(f) })?.into_any(),
    })
}

