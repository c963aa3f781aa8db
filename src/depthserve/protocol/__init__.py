"""The wire contract between gateway, worker and clients: OIP v2 tensors plus metadata."""
