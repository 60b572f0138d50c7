"""Test support: crafted hostile inputs (`crafted_*`, gathered as cases in `hostile_cases`)
and synthetic datasets (`synthetic_data`), shared by the tests and `benchmarks/`; the
package never imports it, and the wheel does not ship it.
"""
