"""``python -m service.cli``: the ``taas`` command, as the console script runs it."""

from service.cli import main

main()
