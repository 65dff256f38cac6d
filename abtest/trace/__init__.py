"""Trace ingestion: bytes of any supported format -> canonical polars tables + metadata.

Submodules:
  errors     TraceFormatError / MissingEventsError
  model      TraceData (tables + metadata), the value every reader returns
  schema     the canonical tables, column by column, and `canonicalize()`
  detect     format detection from magic bytes / content
  readers    dispatch: path -> TraceData (containers); Ingest, the one ingestion driver (canonical tables,
             accounting, quality checks) of the whole-file and the streamed paths
  archive    zip / tar / gzip / zstd / bzip2 / xz containers opened by content, member by member
  inflate, limits  bounded decompression; reader limits (inflate ratio/size, line length, fields)
  import_log the import accounting: meta["import_errors"] / meta["non_event_content"], import_warnings()
  quality    data-quality checks on every trace (inferred_gaps, cpus_with_data)
  tracedat   trace-cmd trace.dat v6/v7 (the compiled decoder native/tracedat; Arrow tables out)
  ftrace_text  ftrace text, trace-cmd report text, atrace, atrace -z, systrace HTML
  text_lines, text_fields, text_flags, text_process, funcgraph_text  the text family's lines, payloads,
             flags column, ps listings (table process) and function_graph tracer text
  battor     BattOr power-monitor logs -> power_rail samples, clock alignment to a trace
  perfetto   perfetto protobuf (the compiled decoder native/perfetto; Arrow tables out)
  cache      directories of tables: the content-keyed Arrow IPC cache, parquet for convert
  convert    decode once, write parquet tables + meta.json (`abtest trace convert`)
  perfetto_engine / wasm_engine / tp_result  Perfetto trace_processor as a second, independent engine

The user-facing `Trace` (tables + analyses) is abtest.session.Trace, exported as abtest.Trace.
"""
