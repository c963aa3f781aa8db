"""A gateway of several processes: what they share, and how one answers for all."""
