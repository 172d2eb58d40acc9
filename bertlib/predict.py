"""`python -m bertlib.predict`: score comments with a fine-tuned classifier (the command: bertlib.finetuning.predict).

A thin entry, so the README's command stays `python -m bertlib.predict` while the code lives with its notebook.
"""

import sys

from bertlib.finetuning.predict import main

if __name__ == "__main__":
    sys.exit(main())
