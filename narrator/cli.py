"""`narrator`: serve, api, worker, migrate, keys (server side); say, submit, retry, lexicon
(client side). Each group of commands lives in its own module, registered on one app."""

from narrator import admin, commands, server  # noqa: F401  (their commands register on cli)
from narrator.app import cli


def main() -> None:
    """Entry point of the console script."""
    cli()
