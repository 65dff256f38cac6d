"""CLI command groups, one module each (trace, analyze, compare, collect, interop).

Each module exports COMMANDS: the click commands/groups it adds to `abtest`; abtest.cli.COMMAND_MODULES
names the module of each command, imported when that command runs.
"""
