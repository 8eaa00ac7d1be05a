"""Generated protobuf messages and gRPC stubs of the runstore.v1 API.

Regenerate with ``make proto``; never edit the ``*_pb2*`` modules by hand.
"""
