"""A Hugging Face hub on 127.0.0.1 for tests: the real ``huggingface_hub`` and transformers clients talk to it.

:class:`HubServer` serves repositories built in the test (branches -> commits -> files) over real HTTP, from two
threads on loopback ports chosen by the OS: the hub itself and a "CDN" that LFS files redirect to (a different
origin, as on the real hub, so the client must drop its ``Authorization`` header there; :attr:`cdn_authorizations`
records any that arrive). What it implements is what the clients call:

- ``GET /api/models/{repo}[/revision/{rev}]`` (``?blobs=true``: size, git blob id and LFS sha256/size per file),
  ``/api/models/{repo}/refs`` and ``/api/models/{repo}/tree/{rev}[/{path}]``. Metadata of a gated repo is public,
  as on the hub;
- ``HEAD``/``GET /{repo}/resolve/{rev}/{file}``: ``X-Repo-Commit`` and ``ETag`` (the git blob id) on plain files,
  a 302 to the CDN with ``X-Linked-Etag`` (sha256) and ``X-Linked-Size`` on LFS files; byte ranges (206,
  ``Content-Range``) on both servers;
- dataset repositories (keys ``datasets/{repo}`` in :attr:`HubServer.repos`): the same answers under
  ``/api/datasets/...`` and ``/datasets/{repo}/resolve/...``, and ``POST /api/datasets/{repo}/paths-info/{rev}``,
  what ``datasets`` (through ``HfFileSystem``) calls; ``.parquet`` files are LFS files, as on the hub;
- the hub's error answers, with ``X-Error-Code`` / ``X-Error-Message``: a gated file without a token (401) or with a
  token that has no access (403) is ``GatedRepo``; an unknown revision is 404 ``RevisionNotFound``; a missing file
  404 ``EntryNotFound``; an unknown repo 401 ``RepoNotFound``;
- failures a download meets: :meth:`HubServer.drop_transfer` cuts a file's transfer mid-way (the connection is
  closed after a byte offset), :meth:`HubServer.corrupt` serves bytes that differ from the metadata,
  :attr:`HubServer.throttle` slows every transfer down (to kill a client mid-file);
- a log: :attr:`HubServer.requests` (with each ``Range`` header) and :meth:`HubServer.bytes_sent` (file content
  written, per file).

Point clients at it with :func:`pointed_at`. ``HF_ENDPOINT`` is read once, when ``huggingface_hub`` is imported,
into ``huggingface_hub.constants.ENDPOINT`` / ``HUGGINGFACE_CO_URL_TEMPLATE``, which ``hf_hub_download`` and
``HfApi()`` read at call time: setting the environment variable alone does nothing in a process that has already
imported the library, so both are patched (the variable too, for subprocesses).

:func:`save_tiny_revision` writes a tiny gpt_neox (``conftest.build_tiny_model``) with a word-level fast
tokenizer, as single-file safetensors, sharded safetensors with an index, or PyTorch ``.bin`` only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

# Stored in git LFS, as the hub's default .gitattributes has it; every other file is a plain git blob.
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".parquet")
DATASETS = "datasets/"  # the key prefix of dataset repositories in HubServer.repos (their URLs' prefix too)
LOOPBACK = "127.0.0.1"


def git_blob_id(data: bytes) -> str:
    """The git blob sha1 of ``data`` (what the hub reports as a plain file's ``blobId`` and ``ETag``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(data: bytes) -> bytes:
    """The git LFS pointer file stored in git in place of ``data``."""
    digest = hashlib.sha256(data).hexdigest()
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{digest}\nsize {len(data)}\n".encode()


@dataclass
class Repo:
    """A model repository: branches pointing at commits, each commit a full set of files."""

    repo_id: str
    gated: bool = False
    tokens: set[str] = field(default_factory=set)  # tokens granted access (gated repos)
    branches: dict[str, str] = field(default_factory=dict)
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)

    def resolve(self, revision: str) -> str | None:
        """The commit a branch name or a full commit sha stands for (None: no such revision)."""
        if revision in self.branches:
            return self.branches[revision]
        return revision if revision in self.commits else None


@dataclass
class _Drop:
    at: int  # absolute byte offset where the connection is cut
    times: int | None  # transfers left to cut (None: every one)


class HubServer:
    """The hub and its CDN on two loopback ports; see the module docstring. Use as a context manager or
    :meth:`start` / :meth:`stop`."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.blobs: dict[str, bytes] = {}  # sha256 -> LFS content (the CDN's store)
        self.corrupted: dict[str, bytes] = {}  # sha256 -> the bytes served instead
        self.drops: dict[str, _Drop] = {}  # sha256 or git blob id -> drop rule
        # (server, method, path, range header) of every request, in order; and Authorization headers the CDN saw.
        self.requests: list[tuple[str, str, str, str | None]] = []
        self.cdn_authorizations: list[str] = []
        # (server, path, bytes of body written) of every GET answered with content: what was downloaded.
        self.sent: list[tuple[str, str, int]] = []
        # Seconds to wait after each 4 KiB of file content (None: full speed): a transfer slow enough to kill a
        # client mid-file.
        self.throttle: float | None = None
        self._lock = threading.Lock()
        self._servers: dict[str, ThreadingHTTPServer] = {}
        self._connections: set[socket.socket] = set()

    # ------------------------------------------------------------ content
    def add_revision(
        self,
        repo_id: str,
        branch: str,
        files: Mapping[str, bytes] | Path,
        *,
        gated: bool = False,
        tokens: tuple[str, ...] = (),
    ) -> str:
        """Commit ``files`` (name -> bytes, or every file under a directory) as branch ``branch`` of ``repo_id``
        (created on first use); returns the commit sha. Re-adding a branch moves it to a new commit."""
        if isinstance(files, Path):
            files = {str(p.relative_to(files)): p.read_bytes() for p in sorted(files.rglob("*")) if p.is_file()}
        repo = self.repos.setdefault(repo_id, Repo(repo_id, gated=gated))
        repo.tokens.update(tokens)
        recipe = json.dumps([repo_id, branch, len(repo.commits), sorted((n, git_blob_id(d)) for n, d in files.items())])
        commit = hashlib.sha1(recipe.encode()).hexdigest()
        with self._lock:
            repo.commits[commit] = dict(files)
            repo.branches[branch] = commit
            for name, data in files.items():
                if name.endswith(LFS_SUFFIXES):
                    self.blobs[hashlib.sha256(data).hexdigest()] = data
        return commit

    def file(self, repo_id: str, revision: str, name: str) -> bytes:
        repo = self.repos[repo_id]
        return repo.commits[repo.resolve(revision)][name]

    def _key(self, repo_id: str, revision: str, name: str) -> str:
        data = self.file(repo_id, revision, name)
        return hashlib.sha256(data).hexdigest() if name.endswith(LFS_SUFFIXES) else git_blob_id(data)

    def drop_transfer(self, repo_id: str, revision: str, name: str, at: int, times: int | None = None) -> None:
        """Cut every transfer of that file (``times``: only the next ``times``) once byte ``at`` is reached: the
        headers promise the whole range, the connection closes after byte ``at - 1``."""
        self.drops[self._key(repo_id, revision, name)] = _Drop(at, times)

    def corrupt(self, repo_id: str, revision: str, name: str) -> None:
        """Serve that file with its first byte flipped (same size; the metadata still describes the original)."""
        data = bytearray(self.file(repo_id, revision, name))
        data[0] ^= 0xFF
        self.corrupted[self._key(repo_id, revision, name)] = bytes(data)

    def clear_failures(self) -> None:
        self.drops.clear()
        self.corrupted.clear()

    def gets(self, name: str) -> int:
        """How many GET requests (hub or CDN) fetched file ``name`` (LFS files are counted on the CDN)."""
        n = 0
        for server, method, path, _ in self.requests:
            if method != "GET":
                continue
            if server == "hub" and "/resolve/" in path and unquote(path.split("?")[0]).endswith("/" + name):
                n += 1
            if server == "cdn" and f"file={quote(name, safe='')}" in path:
                n += 1
        return n

    def bytes_sent(self, name: str | None = None) -> int:
        """Bytes of file content the hub and its CDN wrote (of file ``name`` only, when given): what clients
        downloaded, partial transfers included."""
        total = 0
        for server, path, n in self.sent:
            if name is None:
                total += n
            elif server == "hub" and unquote(path.split("?")[0]).endswith("/" + name):
                total += n
            elif server == "cdn" and f"file={quote(name, safe='')}" in path:
                total += n
        return total

    # ------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self._servers['hub'].server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return f"http://{LOOPBACK}:{self._servers['cdn'].server_address[1]}"

    def start(self) -> HubServer:
        for role in ("hub", "cdn"):
            server = ThreadingHTTPServer((LOOPBACK, 0), _Handler)
            server.daemon_threads = True
            server.hub, server.role = self, role  # type: ignore[attr-defined]
            threading.Thread(target=server.serve_forever, args=(0.05,), name=f"hub-server-{role}", daemon=True).start()
            self._servers[role] = server
        return self

    def stop(self) -> None:
        """Stop listening and cut every open connection: afterwards nothing answers on either port (a client's
        pooled keep-alive connection included)."""
        for server in self._servers.values():
            server.shutdown()
            server.server_close()
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class ConnectionCounter:
    """A loopback listener that accepts and counts TCP connections and closes each at once: the hub endpoint of a
    process that must make no request at all (``with ConnectionCounter() as c: ...; assert c.count == 0``)."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.count += 1
            conn.close()

    def __enter__(self) -> ConnectionCounter:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the hub: every answer carries a Content-Length

    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's signature
        pass

    def setup(self) -> None:
        super().setup()
        with self.hub._lock:
            self.hub._connections.add(self.connection)

    def finish(self) -> None:
        with self.hub._lock:
            self.hub._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    @property
    def hub(self) -> HubServer:
        return self.server.hub  # type: ignore[attr-defined]

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    # ------------------------------------------------------------ answers
    def _send(self, status: int, body: bytes = b"", headers: Mapping[str, str] | None = None, head=False) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, obj, head: bool, headers: Mapping[str, str] | None = None) -> None:
        self._send(200, json.dumps(obj).encode(), {"Content-Type": "application/json", **(headers or {})}, head)

    def _error(self, status: int, code: str, message: str, head: bool, headers: Mapping[str, str] | None = None):
        body = json.dumps({"error": message}).encode()
        extra = {"Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message}
        self._send(status, body, {**extra, **(headers or {})}, head)

    def _serve(self, head: bool) -> None:
        hub, role = self.hub, self.server.role  # type: ignore[attr-defined]
        with hub._lock:
            hub.requests.append((role, self.command, self.path, self.headers.get("Range")))
        split = urlsplit(self.path)
        query = parse_qs(split.query)
        segments = split.path.split("/")[1:]
        if role == "cdn":
            if self.headers.get("Authorization"):
                hub.cdn_authorizations.append(self.headers["Authorization"])
            if len(segments) == 2 and segments[0] == "lfs" and segments[1] in hub.blobs:
                return self._content(hub.blobs[segments[1]], segments[1], {}, head)
            return self._send(404, b"no such object", head=head)
        if segments[:2] == ["api", "models"] and len(segments) >= 4:
            return self._api("/".join(segments[2:4]), segments[4:], query, head)
        if segments[:2] == ["api", "datasets"] and len(segments) >= 4:
            return self._api(DATASETS + "/".join(segments[2:4]), segments[4:], query, head)
        prefix = DATASETS if segments[0] == DATASETS.rstrip("/") else ""
        segments = segments[1:] if prefix else segments
        if len(segments) >= 5 and segments[2] == "resolve":
            repo_id, revision = prefix + "/".join(segments[:2]), unquote(segments[3])
            return self._resolve(repo_id, revision, unquote("/".join(segments[4:])), head)
        self._send(404, b"not found", head=head)

    def do_POST(self) -> None:
        """``POST /api/datasets/{repo}/paths-info/{rev}`` (form ``paths=...``): what ``HfFileSystem.info`` asks."""
        hub = self.hub
        with hub._lock:
            hub.requests.append((self.server.role, "POST", self.path, None))  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        segments = urlsplit(self.path).path.split("/")[1:]
        if segments[:2] != ["api", "datasets"] or len(segments) < 6 or segments[4] != "paths-info":
            return self._send(404, b"not found")
        repo = self._repo(DATASETS + "/".join(segments[2:4]), False)
        commit = repo and self._commit(repo, unquote(segments[5]), False)
        if commit is None:
            return
        asked = parse_qs(body).get("paths", [])
        files = repo.commits[commit]
        entries = [self._entry(n, files[n]) for n in asked if n in files]
        entries += [
            {"type": "directory", "oid": git_blob_id(p.encode()), "size": 0, "path": p}
            for p in asked
            if p not in files and any(n.startswith(p.rstrip("/") + "/") for n in files)
        ]
        self._json(entries, False)

    def _repo(self, repo_id: str, head: bool) -> Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(401, "RepoNotFound", "Repository not found", head)
        return repo

    def _commit(self, repo: Repo, revision: str, head: bool) -> str | None:
        commit = repo.resolve(revision)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
        return commit

    def _api(self, repo_id: str, rest: list[str], query: dict, head: bool) -> None:
        repo = self._repo(repo_id, head)
        if repo is None:
            return
        if rest == ["refs"]:
            branches = [{"name": b, "ref": f"refs/heads/{b}", "targetCommit": c} for b, c in repo.branches.items()]
            return self._json({"branches": branches, "converts": [], "tags": []}, head)
        if not rest or (len(rest) == 2 and rest[0] == "revision"):
            commit = self._commit(repo, unquote(rest[1]) if rest else "main", head)
            if commit is None:
                return
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            siblings = [self._sibling(name, data, blobs) for name, data in sorted(repo.commits[commit].items())]
            info = {
                "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24],
                "id": repo_id.removeprefix(DATASETS),
                "modelId": repo_id.removeprefix(DATASETS),
                "sha": commit,
                "private": False,
                "gated": "manual" if repo.gated else False,
                "disabled": False,
                "library_name": "transformers",
                "tags": ["transformers", "gpt_neox"],
                "siblings": siblings,
            }
            return self._json(info, head)
        if len(rest) >= 2 and rest[0] == "tree":
            commit = self._commit(repo, unquote(rest[1]), head)
            if commit is None:
                return
            return self._tree(repo.commits[commit], unquote("/".join(rest[2:])), query, head)
        self._send(404, b"not found", head=head)

    @staticmethod
    def _sibling(name: str, data: bytes, blobs: bool) -> dict:
        if not blobs:
            return {"rfilename": name}
        if name.endswith(LFS_SUFFIXES):
            pointer = lfs_pointer(data)
            lfs = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": len(pointer)}
            return {"rfilename": name, "size": len(data), "blobId": git_blob_id(pointer), "lfs": lfs}
        return {"rfilename": name, "size": len(data), "blobId": git_blob_id(data)}

    def _tree(self, files: dict[str, bytes], path: str, query: dict, head: bool) -> None:
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        prefix = f"{path}/" if path else ""
        below = {n: d for n, d in files.items() if n.startswith(prefix)}
        if path and not below:
            return self._error(404, "EntryNotFound", f"{path} does not exist on this revision", head)
        entries, folders = [], set()
        for name, data in sorted(below.items()):
            rest = name[len(prefix) :]
            if "/" in rest and not recursive:
                folders.add(prefix + rest.split("/")[0])
                continue
            entries.append(self._entry(name, data))
        entries += [
            {"type": "directory", "oid": git_blob_id(f.encode()), "size": 0, "path": f} for f in sorted(folders)
        ]
        self._json(entries, head)

    @staticmethod
    def _entry(name: str, data: bytes) -> dict:
        """A file as the tree and paths-info answers list it."""
        entry = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": name}
        if name.endswith(LFS_SUFFIXES):
            pointer = lfs_pointer(data)
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": len(pointer)}
            entry["oid"] = git_blob_id(pointer)
        return entry

    def _resolve(self, repo_id: str, revision: str, name: str, head: bool) -> None:
        repo = self._repo(repo_id, head)
        if repo is None:
            return
        commit = self._commit(repo, revision, head)
        if commit is None:
            return
        if repo.gated:
            auth = self.headers.get("Authorization", "")
            token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
            if token is None:
                message = (
                    f"Access to model {repo_id} is restricted. You must have access to it and be authenticated to "
                    "access it. Please log in."
                )
                return self._error(401, "GatedRepo", message, head)
            if token not in repo.tokens:
                message = (
                    f"Access to model {repo_id} is restricted and you are not in the authorized list. Visit "
                    f"{self.hub.url}/{repo_id} to ask for access."
                )
                return self._error(403, "GatedRepo", message, head)
        files = repo.commits[commit]
        if name not in files:
            return self._error(404, "EntryNotFound", "Entry not found", head, {"X-Repo-Commit": commit})
        data = files[name]
        if name.endswith(LFS_SUFFIXES):
            digest = hashlib.sha256(data).hexdigest()
            location = f"{self.hub.cdn_url}/lfs/{digest}?file={quote(name, safe='')}"
            headers = {
                "Location": location,
                "X-Repo-Commit": commit,
                "ETag": f'"{git_blob_id(lfs_pointer(data))}"',
                "X-Linked-Etag": f'"{digest}"',
                "X-Linked-Size": str(len(data)),
            }
            return self._send(302, f"Found. Redirecting to {location}".encode(), headers, head)
        self._content(data, git_blob_id(data), {"X-Repo-Commit": commit}, head)

    def _content(self, data: bytes, key: str, headers: dict[str, str], head: bool) -> None:
        """A file's bytes (or the requested range of them), with its drop or corruption rule applied."""
        hub = self.hub
        data = hub.corrupted.get(key, data)
        start, end, status = 0, len(data) - 1, 200
        wanted = self.headers.get("Range")
        if wanted and wanted.startswith("bytes="):
            first, _, last = wanted.removeprefix("bytes=").partition("-")
            start = int(first)
            end = min(int(last), len(data) - 1) if last else len(data) - 1
            if start >= len(data):
                return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"}, head)
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{len(data)}"}
        body = data[start : end + 1]
        self.send_response(status)
        for k, v in {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes", "ETag": f'"{key}"'}.items():
            self.send_header(k, v)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if head:
            return
        with hub._lock:
            drop = hub.drops.get(key)
            cut = drop is not None and start <= drop.at <= end and drop.times != 0
            if cut and drop.times is not None:
                drop.times -= 1
        sent = body if not cut else body[: drop.at - start]
        with hub._lock:
            hub.sent.append((self.server.role, self.path, len(sent)))  # type: ignore[attr-defined]
        if not cut:
            if hub.throttle is None:
                self.wfile.write(body)
                return
            for i in range(0, len(body), 4096):
                self.wfile.write(body[i : i + 4096])
                self.wfile.flush()
                time.sleep(hub.throttle)
            return
        self.wfile.write(sent)
        self.wfile.flush()
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def pointed_at(server: HubServer, monkeypatch, home: Path) -> Iterator[HubServer]:
    """Point ``huggingface_hub`` (hence transformers) at ``server``, with its cache and token file under ``home``
    and no token from the environment (a test gives tokens explicitly)."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setattr(constants, "ENDPOINT", server.url)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    # The library fetches a registry from {ENDPOINT}/api/agent-harnesses once a day and caches it under HF_HOME.
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(home / ".agent_harnesses.json"), raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    # Loopback only: never through a proxy the environment may name.
    monkeypatch.setenv("NO_PROXY", LOOPBACK)
    monkeypatch.setenv("no_proxy", LOOPBACK)
    yield server


# ---------------------------------------------------------------- tiny repositories
WORDS = "the keys to cabinet are is on table a dog dogs bark barks".split()


def tiny_tokenizer():
    """A fast word-level tokenizer inside the tiny vocabulary (``conftest.VOCAB``), with bos / eos."""
    import transformers
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tok_models

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {word: i + 3 for i, word in enumerate(WORDS)}
    backend = Tokenizer(tok_models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def save_tiny_revision(directory: Path, seed: int, weights: str = "safetensors") -> Path:
    """Save a tiny gpt_neox (weights from ``seed``) and the tiny tokenizer into ``directory``; ``weights`` is
    ``"safetensors"`` (one file), ``"sharded"`` (safetensors shards + index), ``"bin"`` (pytorch_model.bin only)
    or ``"both"`` (model.safetensors and pytorch_model.bin, as Pythia's ``main``)."""
    import torch
    from conftest import build_tiny_model

    model = build_tiny_model("gpt_neox", seed=seed)
    if weights in ("safetensors", "both"):
        model.save_pretrained(directory)
    elif weights == "sharded":
        model.save_pretrained(directory, max_shard_size="100KB")
        assert (directory / "model.safetensors.index.json").is_file(), "the tiny model did not shard"
    elif weights == "bin":
        model.config.save_pretrained(directory)
        model.generation_config.save_pretrained(directory)
    else:
        raise ValueError(f"weights {weights!r}")
    if weights in ("bin", "both"):
        torch.save(model.state_dict(), directory / "pytorch_model.bin")
    tiny_tokenizer().save_pretrained(directory)
    return directory
