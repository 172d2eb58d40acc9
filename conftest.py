"""pytest runs the tests and every notebook in smoke mode: tiny sizes, seconds per notebook.

Also: property tests are derandomized in CI (the hypothesis profile "ci", loaded where CI is set), so that a red
CI run reproduces; every notebook cell is marked `slow` (a notebook runs whole or not at all); tests marked
`shared_data` need the team's real data in ../shared/data, outside the repository, and run only with --shared-data.
"""

import os

import pytest

os.environ.setdefault("BERTLIB_SMOKE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("BERTLIB_DOWNLOADS", "0")  # tests and nbval use the shipped sample, never the hub
# One torch thread per test process, set before torch is imported (it reads this once, at import), and inherited by
# the notebook kernels and commands the tests start: on a 2-core machine two threads per process only wait for each
# other (tests/test_deadline.py with tests/test_compiling.py took 338 s so, 12 s on one thread).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Under pytest-xdist (the README's `-n auto`) each worker keeps its artifacts apart, so that a test never reads what
# a notebook in the other worker is writing; the notebooks themselves run in one worker, in order (below).
if os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get("BERTLIB_ARTIFACTS"):
    os.environ["BERTLIB_ARTIFACTS"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "artifacts",
                                                   f"pytest-{os.environ['PYTEST_XDIST_WORKER']}")

try:
    from hypothesis import settings
except ImportError:  # the test tools are not installed: nothing to configure
    pass
else:
    # The same examples on every run (derived from each test's source), no example database and no deadline, so
    # that a failure seen in CI is the failure seen at home: `HYPOTHESIS_PROFILE=ci python3 -m pytest ...`.
    settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE")
                          or ("ci" if os.environ.get("CI", "").lower() not in {"", "0", "false", "no"} else "default"))

SHARED_DATA = "needs the team's real data in ../shared/data, outside the repository: opt in with --shared-data"


def pytest_addoption(parser):
    parser.addoption("--shared-data", action="store_true",
                     help="also run the tests marked shared_data (they need ../shared/data and fail without it)")


def pytest_collection_modifyitems(config, items):
    opted_in = config.getoption("--shared-data")
    for item in items:
        if item.path.suffix == ".ipynb":  # an nbval cell: its notebook runs in seconds to minutes
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("shared_data") and not opted_in:
            item.add_marker(pytest.mark.skip(reason=SHARED_DATA))
    if hasattr(config, "workerinput"):  # a worker of `-n`: the longest scopes are handed out first, so that the
        # last ones to start are short (the notebooks, then every file holding a slow test, then the rest)
        slow_files = {item.path for item in items if item.get_closest_marker("slow")}
        items.sort(key=lambda item: (item.path.suffix != ".ipynb", item.path not in slow_files))


def pytest_xdist_make_scheduler(config, log):
    """Under `-n`, each test file runs whole in one worker (its module fixtures set up once), and each chain of
    notebooks, the course's and the solutions', runs together in one worker, in order: each notebook hands its
    artifacts to the next (02's vocabulary to 06). The two chains share nothing, so two workers run them at once."""
    from xdist.scheduler import LoadScopeScheduling

    class NotebooksTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path.endswith(".ipynb"):
                return "solutions" if "/solutions/" in path else "notebooks"
            return path

    return NotebooksTogether(config, log)
