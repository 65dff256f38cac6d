"""CLI command groups, one module each (trace, analyze, compare, collect, interop).

Each optional module exports COMMANDS: a list of click commands/groups added to `abtest`.
"""
