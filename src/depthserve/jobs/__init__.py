"""Async jobs: accept now, compute when a worker has room, keep the result by id (Redis Streams, RabbitMQ)."""
