"""Sending one inference to backends: deadline, retries, hedging, retry budget."""
