"""`python -m bertlib.pretrain`: pretrain BERT from a folder of documents (the command: bertlib.pretraining.cli).

A thin entry, so the README's command stays `python -m bertlib.pretrain` while the code lives with its notebook.
"""

import sys

from bertlib.pretraining.cli import main

if __name__ == "__main__":
    sys.exit(main())
