"""gRPC servicers: translate messages, call the store core, map errors."""
