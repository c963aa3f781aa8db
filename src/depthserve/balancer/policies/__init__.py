"""One module per policy; each defines a class with NAME and `pick`."""
