"""Trace ingestion: bytes of any supported format -> canonical polars tables + metadata.

Submodules:
  errors     TraceFormatError / MissingEventsError
  model      TraceData (tables + metadata), the value every reader returns
  schema     the canonical tables, column by column, and `canonicalize()`
  detect     format detection from magic bytes / content
  readers    dispatch: path -> TraceData (handles gzip/zip wrappers)
  tracedat   trace-cmd trace.dat v6/v7 (compiled core in native/src/tracedat.rs)
  ftrace_text  ftrace text, trace-cmd report text, atrace, atrace -z, systrace HTML
  perfetto   perfetto protobuf (compiled core in native/src/perfetto.rs)
  cache      content-keyed parquet cache
  convert    decode once, write parquet tables + meta.json (`abtest trace convert`)
  perfetto_engine / wasm_engine / tp_result  Perfetto trace_processor as a second, independent engine

The user-facing `Trace` (tables + analyses) is abtest.session.Trace, exported as abtest.Trace.
"""
