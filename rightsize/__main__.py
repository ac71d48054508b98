"""``python -m rightsize`` runs the CLI."""

from rightsize.cli import main

main()
