"""Bisect a regression to the commit (`abtest bisect`; docs/bisect.md).

posterior   the culprit posterior from continuous runs, the next revision to measure, classic halving
state       the bisection's state in the run store (resumable), the git range
build       the user's --build command per revision (cached)
boot        the revision's build booted on the target (QEMU image/cmdline, install hooks for ssh/adb/local)
measure     runs collected into the store as labels, read back through compare's evaluation path
confirm     the culprit's sequential confirmation against its parent, on new runs
search      endpoints, search, confirmation, the `git bisect run` oracle
report      text/JSON views
"""
