"""Where backends come from: a static list, a YAML file, a Redis registry, DNS; combinable behind one interface."""
