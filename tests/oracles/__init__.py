"""Readable polars-frame implementations of the hot paths the product runs compiled (abtest/analysis/sim_native.py,
native/sim): the oracles tests/test_sim_native.py compares the compiled code with on every shared trace.

One module per product module, each function named and shaped as the product function it checks
(``oracles.boost.df_boost_requests`` is ``abtest.analysis.boost.df_boost_requests`` written with frames). They
are not part of abtest: the product has one implementation of each, and no ``backend=`` argument (issue 39).
bench/analyze.py --reference times them beside the compiled ones.
"""
