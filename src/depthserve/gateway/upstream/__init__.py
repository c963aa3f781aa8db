"""The backends: state, health checks, outlier ejection, membership, version split, pool."""
