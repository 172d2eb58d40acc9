"""A tiny stand-in for the Hugging Face hub: serves dataset files at the hub's URL layout on 127.0.0.1.

huggingface_hub's `hf_hub_download` (and `get_hf_file_metadata`) ask for one URL per file,
`{endpoint}/datasets/{owner}/{name}/resolve/{revision}/{path}`: a HEAD that must answer with the
headers X-Repo-Commit (the commit the revision points to), ETag (the blob's id, which names the file in
the cache) and Content-Length (or X-Linked-Size, the size the download is checked against), then a GET
of the same URL for the bytes. An unknown repository or file is a 404 with the X-Error-Code header the
hub sends (RepoNotFound, EntryNotFound), which huggingface_hub turns into its own errors. That is all
this server answers; every request is logged so that tests can count the downloads.

Leaves out: the /api/ endpoints, redirects to a CDN, Xet storage, authentication and ranges.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

COMMIT = "0123456789abcdef0123456789abcdef01234567"  # 40 hex digits: what the hub's X-Repo-Commit looks like


@dataclass
class LocalHub:
    """Files of dataset repositories, served over HTTP while `start()`ed; `requests` logs (method, path)."""

    files: dict[tuple[str, str], bytes] = field(default_factory=dict)
    advertised_sizes: dict[tuple[str, str], int] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def add(self, repo_id: str, path: str, content: bytes, *, advertised_size: int | None = None) -> None:
        """Serve `content` as `path` of dataset `repo_id`; `advertised_size` makes the HEAD announce another size."""
        self.files[(repo_id, path)] = content
        if advertised_size is not None:
            self.advertised_sizes[(repo_id, path)] = advertised_size

    @property
    def endpoint(self) -> str:
        """The URL to put in HF_ENDPOINT."""
        assert self.server is not None, "start() the hub first"
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def gets(self, path: str) -> int:
        """How many GET requests asked for a URL ending in `path`."""
        return sum(1 for method, url in self.requests if method == "GET" and url.endswith(path))

    def start(self) -> LocalHub:
        """Listen on a free port of 127.0.0.1 in a background thread."""
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop listening; requests after this fail to connect, like a hub that is down."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _handler_for(hub: LocalHub) -> type[BaseHTTPRequestHandler]:
    """A request handler class bound to `hub`."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
            """Log into hub.requests instead of stderr."""

        def _answer(self, with_body: bool) -> None:
            hub.requests.append((self.command, self.path))
            parts = unquote(self.path.split("?")[0]).lstrip("/").split("/")
            # datasets / owner / name / resolve / revision / path...
            if len(parts) < 6 or parts[0] != "datasets" or parts[3] != "resolve":
                return self._error(404, "RepoNotFound")
            repo_id, path = f"{parts[1]}/{parts[2]}", "/".join(parts[5:])
            if not any(repo == repo_id for repo, _ in hub.files):
                return self._error(404, "RepoNotFound")
            if (repo_id, path) not in hub.files:
                return self._error(404, "EntryNotFound")
            content = hub.files[(repo_id, path)]
            self.send_response(200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", f'"{hashlib.sha256(content).hexdigest()}"')
            self.send_header("Content-Length", str(len(content)))
            if (repo_id, path) in hub.advertised_sizes:
                self.send_header("X-Linked-Size", str(hub.advertised_sizes[(repo_id, path)]))
            self.end_headers()
            if with_body:
                self.wfile.write(content)

        def _error(self, status: int, code: str) -> None:
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            if code == "EntryNotFound":  # the repository exists: the hub says at which commit the file is missing
                self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
            """Metadata of a file: commit, ETag, size."""
            self._answer(with_body=False)

        def do_GET(self) -> None:  # noqa: N802
            """The file itself."""
            self._answer(with_body=True)

    return Handler
