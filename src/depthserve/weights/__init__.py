"""Published checkpoints: the cache they live in (`cache`) and the download that fills it (`download`).

Torch-free, so the CLI front can resolve and fetch weights without loading the model.
"""
