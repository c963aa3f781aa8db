"""The gateway: an HTTP/2 front that admits, balances and forwards every request to a worker over gRPC."""
