"""The model worker: an OIP v2 gRPC server that runs one model on one device."""
