"""runstore benchmarks: ``make bench`` (or ``python -m bench --help``).

The harness (``bench.harness``) starts a real ``runstore serve`` process per
backend and drives it from a separate client process (``bench.driver``) over
loopback. Every figure is reported with the ceiling, an empty unary RPC
(``grpc.health.v1.Health/Check``) served by the same server process in the
same run, so ratios hold on a shared, noisy machine.
"""
