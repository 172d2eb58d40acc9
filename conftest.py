"""pytest runs the tests and every notebook in smoke mode: tiny sizes, seconds per notebook."""

import os

os.environ.setdefault("BERTLIB_SMOKE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
