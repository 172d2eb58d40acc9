"""`python -m bertlib.course`: run every notebook headless, in order (the command: bertlib.course.runner).

A thin entry, so the README's command stays `python -m bertlib.course` while the code lives with its notebook.
"""

import sys

from bertlib.course.runner import main

if __name__ == "__main__":
    sys.exit(main())
