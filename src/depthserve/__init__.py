"""depthserve: serve LingBot-Depth from many workers behind one gateway."""

__version__ = "0.1.0"
