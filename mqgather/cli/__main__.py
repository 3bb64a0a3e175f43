"""``python -m mqgather.cli``: how the dev stack starts its children."""

from mqgather.cli.main import main

main()
