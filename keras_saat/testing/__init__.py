"""Test support: crafted hostile inputs (`crafted_*`, gathered as cases in `hostile_cases`)
and synthetic datasets (`synthetic_data`), shared by the tests, `keras-saat bench` and
`benchmarks/`. Nothing else in the package imports it.
"""
