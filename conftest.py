"""pytest runs the tests and every notebook in smoke mode: tiny sizes, seconds per notebook."""

import os

os.environ.setdefault("BERTLIB_SMOKE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("BERTLIB_DOWNLOADS", "0")  # tests and nbval use the shipped sample, never the hub
