"""What a process can tell about itself and its accelerator: probes, and later metrics and logs."""
