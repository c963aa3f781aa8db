"""Open Inference Protocol v2 at the gateway: REST and gRPC, tensors in and out, statistics."""
