"""Allow `python -m depthserve`."""

from depthserve.parent_death import end_with_parent

end_with_parent()  # before anything else, so a launcher killed during start-up leaves nothing behind

from depthserve.cli import main  # noqa: E402 - after the parent-death signal is armed

main()
