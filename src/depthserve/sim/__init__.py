"""A discrete-event simulator that drives the real gateway core on a virtual clock in front of simulated GPUs."""
