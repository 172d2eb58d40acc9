"""`python -m bertlib.finetune`: fine-tune a BERT checkpoint on toxic comments (the command: bertlib.finetuning.run).

A thin entry, so the README's command stays `python -m bertlib.finetune` while the code lives with its notebook.
"""

import sys

from bertlib.finetuning.run import main

if __name__ == "__main__":
    sys.exit(main())
