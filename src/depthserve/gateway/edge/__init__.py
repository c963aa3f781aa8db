"""What every request passes before a backend sees it: keys, rate limits, buffers, admission."""
