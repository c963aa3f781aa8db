"""Where backends come from: a static list, a YAML file, a Redis or etcd registry, DNS; combinable behind one
interface."""
