"""`python -m bertlib.finetune`: fine-tune a BERT checkpoint on toxic comments (the command: bertlib.finetuning.run).

A thin entry, so the README's command stays `python -m bertlib.finetune` while the code lives with its notebook;
it runs the command through bertlib.command.run_command, so a Ctrl-C or SIGTERM at any moment is said.
"""

import sys

from bertlib.command import run_command


def main(argv: list[str] | None = None) -> int:
    """The command from Python (as notebook 06 calls pretrain's); its module is imported only here, so
    that `python -m bertlib.finetune` sets up its signals before torch loads."""
    from bertlib.finetuning.run import main as command

    return command(argv)


if __name__ == "__main__":
    sys.exit(run_command("python -m bertlib.finetune", "bertlib.finetuning.run"))
