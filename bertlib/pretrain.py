"""`python -m bertlib.pretrain`: pretrain BERT from a folder of documents (the command: bertlib.pretraining.cli).

A thin entry, so the README's command stays `python -m bertlib.pretrain` while the code lives with its notebook;
it runs the command through bertlib.command.run_command, so a Ctrl-C or SIGTERM at any moment is said.
"""

import sys

from bertlib.command import run_command


def main(argv: list[str] | None = None) -> int:
    """The command from Python (notebook 06 calls `pretrain.main(flags)`); its module is imported only here, so
    that `python -m bertlib.pretrain` sets up its signals before torch loads."""
    from bertlib.pretraining.cli import main as command

    return command(argv)


if __name__ == "__main__":
    sys.exit(run_command("python -m bertlib.pretrain", "bertlib.pretraining.cli"))
