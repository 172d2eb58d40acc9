"""`python -m bertlib.course`: run every notebook headless, in order, and print notebook / seconds / status.

`--solutions` runs notebooks/solutions/ instead. The notebooks read the data this machine has (Kaggle's
input, the hub, else the shipped sample); with `--inplace`, which writes the outputs that are committed,
they read the shipped sample only, so no third-party text enters the repository. In the executed notebooks
each progress bar is saved as its final line of text (`freeze_progress_bars`), which a static page such as
GitHub's shows as it is. Imports no torch: the kernels do.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from bertlib.basics import shown_path
from bertlib.course import session
from bertlib.course.session import ArtifactsError, artifacts_dir, notebooks_dir

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def notebook_paths(solutions: bool = False) -> list[Path]:
    """The course's notebooks in reading order (or the solutions notebooks)."""
    folder = notebooks_dir() / "solutions" if solutions else notebooks_dir()
    return sorted(folder.glob("[0-9][0-9]_*.ipynb"))


def run_notebook(path: Path, out_path: Path, timeout: int = 1800) -> None:
    """Execute one notebook top to bottom in a fresh kernel (its own folder as working dir) and save it.

    On POSIX the kernel talks over a Unix socket in a private temporary folder rather than TCP, which
    is safer and spares every notebook the kernel's "running over TCP without encryption" warning.
    """
    import nbformat
    from nbclient import NotebookClient
    from traitlets.config import Config

    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="bertlib-kernel-") as sockets:
        config = Config({"KernelManager": {"transport": "ipc", "ip": os.path.join(sockets, "kernel")}}
                        if os.name == "posix" else {})
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", config=config,
                                resources={"metadata": {"path": str(path.parent)}})
        try:
            client.execute()
        finally:
            from bertlib.basics import atomic_write

            freeze_progress_bars(nb)
            atomic_write(out_path, lambda temporary: nbformat.write(nb, temporary))


_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def _bar_line(box: dict, models: dict) -> str | None:
    """The text line of a tqdm notebook bar (an HBox of HTML, progress, HTML) in its saved state, else None."""
    children = [models.get(child.removeprefix("IPY_MODEL_"), {}) for child in box.get("state", {}).get("children", [])]
    if box.get("model_name") != "HBoxModel" or [child.get("model_name") for child in children] != [
            "HTMLModel", "FloatProgressModel", "HTMLModel"]:
        return None
    left, meter, right = (child.get("state", {}) for child in children)
    total = meter.get("max") or 0
    filled = round(10 * min(max((meter.get("value") or 0) / total, 0.0), 1.0)) if total else 0
    text = f"{left.get('value', '')}|{'#' * filled}{' ' * (10 - filled)}|{right.get('value', '')}"
    return html.unescape(text).replace("\u2007", " ").replace("\u200b", "")


def freeze_progress_bars(nb) -> int:
    """Replace each tqdm widget in an executed notebook by its final state as a line of text; returns how many.

    A notebook saved by the runner keeps a widget's first rendering as its plain-text fallback, which is all
    a static page (GitHub, nbviewer) shows: a bar frozen at "0%". nbclient also saves each widget's last
    state in the notebook's metadata; this turns that state into a stdout line such as
    "tokenizing documents: 100%|##########| 60/60 [00:01<00:00, 45.2it/s]" and, once no widget is left,
    drops the saved widget state. Other widgets are left as they are.
    """
    models = nb.metadata.get("widgets", {}).get(_WIDGET_STATE, {}).get("state", {})
    frozen, remaining = 0, 0
    for cell in nb.cells:
        outputs = []
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get(_WIDGET_VIEW) if output.get("output_type") == "display_data" else None
            line = _bar_line(models.get(view.get("model_id"), {}), models) if view else None
            if line is None:
                remaining += view is not None
                outputs.append(output)
                continue
            frozen += 1
            outputs.append(_stream(line + "\n"))
        if cell.get("cell_type") == "code":
            cell.outputs = outputs
    if remaining == 0:
        nb.metadata.pop("widgets", None)
    return frozen


def _stream(text: str):
    """A stdout stream output holding `text`."""
    import nbformat

    return nbformat.v4.new_output("stream", name="stdout", text=text)


def check_headers(paths: list[Path]) -> None:
    """Before a full --inplace run: every notebook can take a header and run_times.json can be read, so that
    recording the run times afterwards cannot fail on either (a ValueError names the file and what to do)."""
    from bertlib.course.setup_cell import set_up_files

    set_up_files(paths)  # in memory only: nothing is written


def record_full_run(path: Path, seconds: float) -> None:
    """Keep a full --inplace run's seconds (and the device the notebook reported) in notebooks/run_times.json,
    and rewrite the notebook's header from it: the header's run time is always the last full run's."""
    import nbformat

    from bertlib.basics import atomic_write
    from bertlib.course import headers

    notebook = nbformat.read(path, as_version=4)
    device = headers.reported_device(notebook) or "a device the notebook did not report"
    times = headers.record_run_time(headers.notebooks_folder(path), path, seconds, device)
    if headers.rewrite_header(notebook, path, times):
        atomic_write(path, lambda tmp: nbformat.write(notebook, tmp))


def failure_status(error: BaseException) -> str:
    """The status column for a notebook that failed: the error's last line, without terminal colour codes."""
    lines = [line.strip() for line in _ANSI.sub("", str(error)).splitlines() if line.strip()]
    return f"FAILED: {type(error).__name__}: {(lines or [''])[-1][:120]}"


def main(argv: list[str] | None = None) -> int:
    """Run every notebook in order, with a progress bar, then print notebook / seconds / status."""
    from tqdm.auto import tqdm

    parser = argparse.ArgumentParser(prog="python -m bertlib.course", description=main.__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (what the tests run)")
    parser.add_argument("--solutions", action="store_true", help="run notebooks/solutions/ instead")
    parser.add_argument("--inplace", action="store_true",
                        help="write outputs into the notebooks themselves (how the committed outputs are made)")
    parser.add_argument("--only", nargs="*", default=None, help="notebook name prefixes, e.g. 03 05")
    args = parser.parse_args(argv)
    if args.smoke:
        os.environ["BERTLIB_SMOKE"] = "1"  # the kernels inherit it
    session.SMOKE = os.environ.get("BERTLIB_SMOKE", "0") == "1"

    available = notebook_paths(solutions=args.solutions)
    unmatched = [prefix for prefix in args.only or [] if not any(p.name.startswith(prefix) for p in available)]
    if unmatched:  # a typo among several prefixes would otherwise be dropped without a word
        print(f"--only {' '.join(unmatched)}: no notebook starts with {'it' if len(unmatched) == 1 else 'them'} "
              f"(there are: {', '.join(p.name for p in available) or 'none'})", file=sys.stderr)
        return 2
    paths = [p for p in available if not args.only or p.name.startswith(tuple(args.only))]
    if not paths:
        wanted = f" matching {' '.join(args.only)}" if args.only else ""
        print(f"no notebooks{wanted} in {notebooks_dir() / 'solutions' if args.solutions else notebooks_dir()} "
              f"(there are: {', '.join(p.name for p in available) or 'none'})", file=sys.stderr)
        return 2
    # The kernels inherit this: the bars of transformers and huggingface_hub (loading weights, downloads) say
    # nothing a reader of the saved notebook needs; bertlib's own bars are kept, as their final line.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if args.inplace and "BERTLIB_DOWNLOADS" not in os.environ:
        # Committed outputs are public: no third-party text (real comments, Wikipedia) may enter them.
        os.environ["BERTLIB_DOWNLOADS"] = "0"
        print("--inplace: the notebooks read the shipped sample (BERTLIB_DOWNLOADS=0), since their outputs are "
              "committed; set BERTLIB_DOWNLOADS=1 to run them on downloaded data")
    try:
        artifacts = artifacts_dir()
    except ArtifactsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    # the kernels write there too
    os.environ["BERTLIB_ARTIFACTS"] = str(artifacts.parent if session.SMOKE else artifacts)
    record_times = args.inplace and not session.SMOKE
    if record_times:
        try:
            check_headers(paths)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    out_dir = paths[0].parent if args.inplace else artifacts / "executed" / ("solutions" if args.solutions else "")
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for path in (bar := tqdm(paths, desc="notebooks", unit="nb")):
        bar.set_postfix_str(path.name)
        start = time.perf_counter()
        try:
            run_notebook(path, out_dir / path.name)
            status = "ok"
        except Exception as error:  # report every notebook, then fail at the end
            status = failure_status(error)
        seconds = time.perf_counter() - start
        if status == "ok" and record_times:
            try:
                record_full_run(path, seconds)
            except (OSError, ValueError) as error:  # the outputs are saved; only the header lags
                status = f"FAILED to record its run time: {error}"
        rows.append((path.name, seconds, status))

    width = max(len(name) for name, _, _ in rows)
    print(f"\n{'notebook':<{width}}  {'seconds':>8}  status")
    for name, seconds, status in rows:
        print(f"{name:<{width}}  {seconds:8.1f}  {status}")
    print(f"{'total':<{width}}  {sum(s for _, s, _ in rows):8.1f}")
    print(f"\nExecuted notebooks are in {shown_path(out_dir)}")
    return 0 if all(status == "ok" for _, _, status in rows) else 1
