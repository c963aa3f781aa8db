"""Allow `python -m depthserve`."""

from depthserve.cli import main

main()
