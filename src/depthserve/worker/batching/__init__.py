"""The worker's dynamic batcher: batch keys, the policy that closes a batch, running it."""
