"""Tools for working on runstore, shipped in neither distribution.

``devtools.pg_cluster`` starts private PostgreSQL clusters: the test suite's
(``tests/postgres.py``, ``tests/pg_cluster.py``) and the benchmarks'
(``bench/postgres.py``). It lives here, not under ``tests/`` or ``bench/``, so
that neither imports the other: the benchmarks do not load the suite (or
pytest), and the suite does not depend on the benchmarks.
"""
