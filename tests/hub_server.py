"""A loopback Hugging Face Hub for tests: the HTTP subset huggingface_hub 2.4 uses to push and pull, on 127.0.0.1.

Test code, not a product. It exists so that the *unmodified* client (``HfApi``, ``push_to_hub``,
``from_pretrained("user/repo")``, ``snapshot_download``, ``Dataset.push_to_hub`` / ``load_dataset``) can be
exercised on machines that cannot reach huggingface.co. It is strict where the real Hub is strict, so that a test
passing against it means the client did the real thing (routes and formats from ../shared/notes/hub-protocol.md):

- every repo-scoped error carries ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``)
  because the client builds its typed errors from that header alone (a HEAD has no body);
- private repos are invisible (404 ``RepoNotFound``) to anonymous callers and to other users, like the real Hub;
  an unknown token gets 401 "Invalid credentials in Authorization header" on any route; writing needs a write
  token of the repo's namespace (403 otherwise);
- a commit names a branch, carries a ``header`` line first, and a stale ``parentCommit`` gets 412; an
  ``lfsFile`` line must refer to an object uploaded through the LFS batch + PUT routes (sha256 and size checked);
- files matching the repo's ``.gitattributes`` ``filter=lfs`` rules (or above 10 MB) must go through LFS, as
  on the real Hub; a new repo starts with one commit holding ``.gitattributes``;
- an unchanged file is reported with its oid at preupload (git blob sha1 for regular files, sha256 for LFS),
  which is how the client avoids empty commits.

Faults for failure tests: ``server.inject_fault(route, kind, times)`` makes the next ``times`` requests of a
route (``"commit"``, ``"preupload"``, ``"lfs_upload"``, ...) answer 500 or drop the connection after reading the
request body. ``server.log`` records ``(method, route, status)`` of every request.

Shapes of the data kept: a repo is ``{type, owner, private, commits: {oid: Commit}, branches: {name: oid},
tags: {name: oid}}``; a commit's tree maps a path to a ``Blob`` (bytes of a regular file, or the sha256 of an
LFS object kept in ``server.lfs_objects``).
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

LFS_THRESHOLD = 10 * 1024 * 1024  # the real Hub refuses regular files above 10 MB
INVALID_TOKEN = "Invalid credentials in Authorization header"

# The first lines of the .gitattributes the real Hub puts in every new repo (the patterns our files can match).
DEFAULT_GITATTRIBUTES = "".join(
    f"{pattern} filter=lfs diff=lfs merge=lfs -text\n"
    for pattern in (
        "*.7z", "*.arrow", "*.bin", "*.bz2", "*.ckpt", "*.ftz", "*.gz", "*.h5", "*.joblib", "*.lz4", "*.mlmodel",
        "*.model", "*.msgpack", "*.npy", "*.npz", "*.onnx", "*.ot", "*.parquet", "*.pb", "*.pickle", "*.pkl",
        "*.pt", "*.pth", "*.rar", "*.safetensors", "saved_model/**/*", "*.tar.*", "*.tar", "*.tflite", "*.tgz",
        "*.wasm", "*.xz", "*.zip", "*.zst", "*tfevents*",
    )
)  # fmt: skip


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob (what the Hub reports as a regular file's oid / ETag)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs pointer file stored in git in place of an LFS file."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass
class Blob:
    """One file of a commit: the bytes of a regular file, or an LFS object's sha256 and size."""

    data: bytes | None = None
    lfs_sha256: str | None = None
    size: int = 0

    @property
    def git_oid(self) -> str:
        return git_blob_sha1(self.data if self.lfs_sha256 is None else lfs_pointer(self.lfs_sha256, self.size))


@dataclass
class Commit:
    oid: str
    parent: str | None
    tree: dict[str, Blob]
    title: str
    message: str
    author: str
    date: float = field(default_factory=time.time)


@dataclass
class Repo:
    type: str  # "model" or "dataset"
    owner: str
    name: str
    private: bool
    gated: bool = False  # set by tests: others get 403 GatedRepo on file downloads
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def repo_id(self) -> str:
        return f"{self.owner}/{self.name}"

    def resolve(self, revision: str) -> str | None:
        """Commit oid of a branch, a tag, a full commit sha or a unique sha prefix of at least 7 characters."""
        if revision in self.branches:
            return self.branches[revision]
        if revision in self.tags:
            return self.tags[revision]
        if revision.startswith("refs/heads/") and revision[11:] in self.branches:
            return self.branches[revision[11:]]
        if re.fullmatch(r"[0-9a-f]{7,40}", revision):
            matches = [oid for oid in self.commits if oid.startswith(revision)]
            return matches[0] if len(matches) == 1 else None
        return None

    def lfs_patterns(self, oid: str) -> list[str]:
        blob = self.commits[oid].tree.get(".gitattributes")
        text = blob.data.decode() if blob is not None and blob.data is not None else ""
        return [line.split()[0] for line in text.splitlines() if "filter=lfs" in line and line.split()]


@dataclass
class Token:
    user: str
    write: bool


class HubError(Exception):
    """An error answer: HTTP status, X-Error-Code (or None) and a one-line message."""

    def __init__(self, status: int, code: str | None, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


REPO = r"(?P<repo>[\w.-]+/[\w.-]+)"
TYPES = r"(?P<type>models|datasets)"
REV = r"(?P<rev>[^/]+)"
# (method, route name, path regex); resolve routes take an optional "datasets/" prefix like the real Hub.
ROUTES = [
    ("GET", "whoami", r"/api/whoami-v2"),
    ("POST", "create_repo", r"/api/repos/create"),
    ("POST", "validate_yaml", r"/api/validate-yaml"),
    ("GET", "repo_info", rf"/api/{TYPES}/{REPO}(?:/revision/{REV})?"),
    ("GET", "tree", rf"/api/{TYPES}/{REPO}/tree/{REV}(?:/(?P<path>.*))?"),
    ("POST", "paths_info", rf"/api/{TYPES}/{REPO}/paths-info/{REV}"),
    ("GET", "refs", rf"/api/{TYPES}/{REPO}/refs"),
    ("GET", "commits", rf"/api/{TYPES}/{REPO}/commits/{REV}"),
    ("POST", "preupload", rf"/api/{TYPES}/{REPO}/preupload/{REV}"),
    ("POST", "commit", rf"/api/{TYPES}/{REPO}/commit/{REV}"),
    ("POST", "create_branch", rf"/api/{TYPES}/{REPO}/branch/{REV}"),
    ("POST", "create_tag", rf"/api/{TYPES}/{REPO}/tag/{REV}"),
    ("POST", "lfs_batch", rf"/(?:(?P<type>datasets)/)?{REPO}\.git/info/lfs/objects/batch"),
    ("PUT", "lfs_upload", r"/lfs-upload/(?P<oid>[0-9a-f]{64})"),
    ("POST", "lfs_verify", r"/lfs-verify/(?P<oid>[0-9a-f]{64})"),
    ("HEAD", "resolve", rf"/(?:(?P<type>datasets)/)?{REPO}/resolve/{REV}/(?P<path>.+)"),
    ("GET", "resolve", rf"/(?:(?P<type>datasets)/)?{REPO}/resolve/{REV}/(?P<path>.+)"),
]
COMPILED_ROUTES = [(method, name, re.compile(pattern + r"/?")) for method, name, pattern in ROUTES]


class LoopbackHub:
    """The in-memory Hub state and its HTTP server (``start()`` binds 127.0.0.1 on a free port)."""

    def __init__(self, tokens: dict[str, Token] | None = None):
        self.tokens = tokens or {}
        self.repos: dict[tuple[str, str], Repo] = {}
        self.lfs_objects: dict[str, bytes] = {}
        self.log: list[tuple[str, str, int]] = []
        self.faults: dict[str, list] = {}
        self.lock = threading.RLock()
        self._commit_counter = 0
        self.httpd: ThreadingHTTPServer | None = None

    # ----- lifecycle -----
    def start(self) -> str:
        hub = self

        class Handler(HubRequestHandler):
            server_hub = hub

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self.endpoint

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def inject_fault(self, route: str, kind: str, times: int = 1) -> None:
        """The next ``times`` requests of ``route`` answer 500 (``kind="500"``) or are dropped (``"drop"``)."""
        if kind not in ("500", "drop"):
            raise ValueError(f"fault kind {kind!r}: use '500' or 'drop'")
        self.faults[route] = [kind, times]

    def take_fault(self, route: str) -> str | None:
        with self.lock:
            fault = self.faults.get(route)
            if not fault or fault[1] <= 0:
                return None
            fault[1] -= 1
            return fault[0]

    def routes_hit(self) -> set[str]:
        return {route for _, route, _ in self.log}

    # ----- state helpers used by the routes and by tests -----
    def repo(self, repo_type: str, repo_id: str, caller: str | None) -> Repo:
        """The repo, or 404 RepoNotFound if it does not exist or the caller may not see it (private)."""
        repo = self.repos.get((repo_type, repo_id))
        if repo is None or (repo.private and caller != repo.owner):
            raise HubError(404, "RepoNotFound", f"Repository Not Found for {repo_type} {repo_id}.")
        return repo

    def writable_repo(self, repo_type: str, repo_id: str, token: Token | None) -> Repo:
        """The repo for a write: it must be visible, and the token a write token of its namespace."""
        repo = self.repo(repo_type, repo_id, token.user if token else None)
        if token is None:
            raise HubError(401, None, "You must be authenticated to write to a repository.")
        if token.user != repo.owner or not token.write:
            raise HubError(403, None, f"You don't have write access to {repo_type} {repo_id}.")
        return repo

    def revision(self, repo: Repo, revision: str) -> str:
        oid = repo.resolve(revision)
        if oid is None:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return oid

    def new_commit(self, repo: Repo, parent: str | None, tree: dict, title: str, message: str, author: str) -> str:
        with self.lock:
            self._commit_counter += 1
            seed = json.dumps([repo.repo_id, parent, sorted((p, b.git_oid) for p, b in tree.items()), title])
            oid = hashlib.sha1(f"{seed}{self._commit_counter}".encode()).hexdigest()
        repo.commits[oid] = Commit(oid, parent, tree, title, message, author)
        return oid

    def create(self, repo_type: str, owner: str, name: str, private: bool) -> Repo:
        repo = Repo(repo_type, owner, name, private)
        tree = {".gitattributes": Blob(data=DEFAULT_GITATTRIBUTES.encode(), size=len(DEFAULT_GITATTRIBUTES))}
        repo.branches["main"] = self.new_commit(repo, None, tree, "initial commit", "", owner)
        self.repos[(repo_type, repo.repo_id)] = repo
        return repo

    def url(self, repo: Repo) -> str:
        prefix = "" if repo.type == "model" else f"{repo.type}s/"
        return f"{self.endpoint}/{prefix}{repo.repo_id}"


def file_entry(path: str, blob: Blob) -> dict:
    """One file of the tree / paths-info answers."""
    entry = {"type": "file", "oid": blob.git_oid, "size": blob.size, "path": path}
    if blob.lfs_sha256 is not None:
        entry["lfs"] = {"oid": blob.lfs_sha256, "size": blob.size, "pointerSize": len(lfs_pointer(blob.lfs_sha256, 0))}
    return entry


def tree_listing(tree: dict[str, Blob], prefix: str, recursive: bool) -> list[dict]:
    """Files and directories under ``prefix`` (one level, or all with ``recursive``), like the tree API."""
    prefix = prefix.strip("/")
    base = f"{prefix}/" if prefix else ""
    if prefix and not any(path.startswith(base) for path in tree):
        return []
    files, dirs = [], set()
    for path in sorted(tree):
        if not path.startswith(base):
            continue
        rest = path[len(base) :].split("/")
        for depth in range(1, len(rest)):
            if recursive or depth == 1:
                dirs.add(base + "/".join(rest[:depth]))
        if recursive or len(rest) == 1:
            files.append(file_entry(path, tree[path]))
    dir_entries = [
        {"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d} for d in dirs
    ]
    return sorted(dir_entries, key=lambda e: e["path"]) + files


class HubRequestHandler(BaseHTTPRequestHandler):
    """Dispatches requests to the ``route_*`` methods; errors become the Hub's error answers."""

    protocol_version = "HTTP/1.1"
    server_hub: LoopbackHub

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def do_HEAD(self):
        self.dispatch("HEAD")

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    # ----- plumbing -----
    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def dispatch(self, method: str) -> None:
        hub = self.server_hub
        url = urlsplit(self.path)
        self.query = parse_qs(url.query)
        route, match = "unknown", None
        for route_method, name, pattern in COMPILED_ROUTES:
            if route_method == method and (match := pattern.fullmatch(url.path)):
                route = name
                break
        body = self.read_body() if method in ("POST", "PUT") else b""
        fault = hub.take_fault(route)
        if fault == "drop":
            hub.log.append((method, route, 0))
            self.close_connection = True
            self.connection.close()
            return
        try:
            if fault == "500":
                raise HubError(500, None, "Internal Error (injected fault)")
            if match is None:
                raise HubError(404, None, f"no route {method} {url.path}")
            self.token = self.caller_token()
            params = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
            params["type"] = {"models": "model", "datasets": "dataset"}.get(params.get("type", "models"), "model")
            with hub.lock:
                status, headers, payload = getattr(self, f"route_{route}")(params, body)
        except HubError as err:
            status, headers = err.status, {"X-Error-Message": err.message.replace("\n", " ")}
            if err.code:
                headers["X-Error-Code"] = err.code
            payload = {"error": err.message}
        hub.log.append((method, route, status))
        self.answer(method, status, headers, payload)

    def answer(self, method: str, status: int, headers: dict, payload) -> None:
        if isinstance(payload, (dict, list)):
            data, content_type = json.dumps(payload).encode(), "application/json"
        else:
            data, content_type = payload or b"", "application/octet-stream"
        self.send_response(status)
        self.send_header("Content-Type", headers.pop("Content-Type", content_type))
        self.send_header("Content-Length", str(headers.pop("Content-Length", len(data))))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(data)

    def caller_token(self) -> Token | None:
        header = self.headers.get("Authorization")
        if not header:
            return None
        token = self.server_hub.tokens.get(header.removeprefix("Bearer ").strip())
        if token is None:
            raise HubError(401, None, INVALID_TOKEN)
        return token

    @property
    def caller(self) -> str | None:
        return self.token.user if self.token else None

    def json_body(self, body: bytes) -> dict:
        if "application/json" not in self.headers.get("Content-Type", ""):
            raise HubError(400, None, "expected a JSON body (Content-Type: application/json)")
        try:
            return json.loads(body)
        except json.JSONDecodeError as err:
            raise HubError(400, None, f"invalid JSON body: {err}") from err

    # ----- routes -----
    def route_whoami(self, params, body):
        if self.token is None:
            raise HubError(401, None, INVALID_TOKEN)
        role = "write" if self.token.write else "read"
        return 200, {}, {"type": "user", "name": self.token.user, "auth": {"accessToken": {"role": role}}}

    def route_create_repo(self, params, body):
        request = self.json_body(body)
        if self.token is None:
            raise HubError(401, None, "You must be logged in to create a repository.")
        repo_type = request.get("type") or "model"
        if repo_type not in ("model", "dataset"):
            raise HubError(400, None, f"repo type {repo_type!r} is not served by the loopback Hub")
        name, owner = request.get("name"), request.get("organization") or self.token.user
        if not name or not re.fullmatch(r"[\w.-]{1,96}", name):
            raise HubError(400, None, f"invalid repo name {name!r}")
        hub = self.server_hub
        existing = hub.repos.get((repo_type, f"{owner}/{name}"))
        if owner != self.token.user or not self.token.write:
            raise HubError(403, None, f"You don't have the rights to create a {repo_type} under the namespace {owner}")
        if existing is not None:
            return (
                409,
                {"X-Error-Message": "You already created this repo"},
                {
                    "error": "You already created this repo",
                    "url": hub.url(existing),
                },
            )
        private = request.get("visibility") == "private" or request.get("private") is True
        repo = hub.create(repo_type, owner, name, private)
        return 200, {}, {"url": hub.url(repo), "name": repo.repo_id}

    def route_validate_yaml(self, params, body):
        request = self.json_body(body)
        if not isinstance(request.get("content"), str) or request.get("repoType") not in ("model", "dataset"):
            raise HubError(400, None, "validate-yaml needs {content: str, repoType: model|dataset}")
        errors = []
        content = request["content"]
        if content.startswith("---"):
            import yaml

            try:
                meta = yaml.safe_load(content.split("---")[1]) or {}
                if not isinstance(meta, dict):
                    errors.append({"message": "metadata must be a mapping"})
                elif "model-index" in meta:
                    errors += validate_model_index(meta["model-index"])
            except (yaml.YAMLError, IndexError) as err:
                errors.append({"message": f"invalid YAML: {err}"})
        if errors:
            raise HubError(400, None, "; ".join(e["message"] for e in errors))
        return 200, {}, {"errors": [], "warnings": []}

    def route_repo_info(self, params, body):
        repo = self.server_hub.repo(params["type"], params["repo"], self.caller)
        oid = self.server_hub.revision(repo, params.get("rev", "main"))
        commit = repo.commits[oid]
        return (
            200,
            {},
            {
                "id": repo.repo_id,
                "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
                "author": repo.owner,
                "sha": oid,
                "private": repo.private,
                "disabled": False,
                "gated": False,
                "lastModified": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(commit.date)),
                "tags": [],
                "downloads": 0,
                "likes": 0,
                "siblings": [{"rfilename": path} for path in sorted(commit.tree)],
            },
        )

    def route_tree(self, params, body):
        hub = self.server_hub
        repo = hub.repo(params["type"], params["repo"], self.caller)
        tree = repo.commits[hub.revision(repo, params["rev"])].tree
        path = params.get("path", "").strip("/")
        listing = tree_listing(tree, path, self.query.get("recursive", ["false"])[0].lower() in ("1", "true"))
        if path and not listing:
            raise HubError(404, "EntryNotFound", f"{path} does not exist on {params['rev']}")
        return 200, {}, listing

    def route_paths_info(self, params, body):
        hub = self.server_hub
        repo = hub.repo(params["type"], params["repo"], self.caller)
        tree = repo.commits[hub.revision(repo, params["rev"])].tree
        form = parse_qs(body.decode())
        answer = []
        for path in form.get("paths", []):
            path = path.strip("/")
            if path in tree:
                answer.append(file_entry(path, tree[path]))
            elif any(p.startswith(path + "/") for p in tree):
                answer.append({"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "path": path})
        return 200, {}, answer

    def route_refs(self, params, body):
        repo = self.server_hub.repo(params["type"], params["repo"], self.caller)

        def refs(names, kind):
            return [{"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": oid} for n, oid in sorted(names.items())]

        return 200, {}, {"branches": refs(repo.branches, "heads"), "tags": refs(repo.tags, "tags"), "converts": []}

    def route_commits(self, params, body):
        hub = self.server_hub
        repo = hub.repo(params["type"], params["repo"], self.caller)
        oid, history = hub.revision(repo, params["rev"]), []
        while oid is not None:
            commit = repo.commits[oid]
            history.append(
                {
                    "id": oid,
                    "authors": [{"user": commit.author}],
                    "date": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(commit.date)),
                    "title": commit.title,
                    "message": commit.message,
                }
            )
            oid = commit.parent
        return 200, {}, history

    def route_preupload(self, params, body):
        hub = self.server_hub
        repo = hub.writable_repo(params["type"], params["repo"], self.token)
        request = self.json_body(body)
        files = request.get("files")
        if not isinstance(files, list) or not all(
            isinstance(f, dict) and {"path", "sample", "size"} <= set(f) for f in files
        ):
            raise HubError(400, None, "preupload needs files: [{path, sample, size}]")
        head = repo.branches.get(params["rev"])
        if head is None:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {params['rev']}")
        tree, patterns = repo.commits[head].tree, repo.lfs_patterns(head)
        answer = []
        for item in files:
            path = item["path"]
            lfs = item["size"] > LFS_THRESHOLD or any(
                fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path.rsplit("/", 1)[-1], p) for p in patterns
            )
            existing = tree.get(path)
            oid = None
            if existing is not None:
                oid = existing.lfs_sha256 if lfs and existing.lfs_sha256 else git_blob_sha1(existing.data or b"")
            answer.append({"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid})
        return 200, {}, {"files": answer, "commitOid": head}

    def route_lfs_batch(self, params, body):
        hub = self.server_hub
        if not self.headers.get("Accept", "").startswith("application/vnd.git-lfs+json"):
            raise HubError(400, None, "LFS batch needs Accept: application/vnd.git-lfs+json")
        hub.writable_repo(params["type"], params["repo"], self.token)
        request = json.loads(body)
        if request.get("operation") != "upload" or request.get("hash_algo", "sha256") != "sha256":
            raise HubError(400, None, "only sha256 uploads are supported")
        if "basic" not in request.get("transfers", ["basic"]):
            raise HubError(400, None, "the loopback Hub speaks only the basic LFS transfer (disable Xet)")
        objects = []
        for obj in request["objects"]:
            entry = {"oid": obj["oid"], "size": obj["size"]}
            if obj["oid"] not in hub.lfs_objects:  # no "actions" = already stored
                entry["actions"] = {
                    "upload": {"href": f"{hub.endpoint}/lfs-upload/{obj['oid']}"},
                    "verify": {"href": f"{hub.endpoint}/lfs-verify/{obj['oid']}"},
                }
            objects.append(entry)
        return 200, {"Content-Type": "application/vnd.git-lfs+json"}, {"transfer": "basic", "objects": objects}

    def route_lfs_upload(self, params, body):
        if hashlib.sha256(body).hexdigest() != params["oid"]:
            raise HubError(400, None, "uploaded bytes do not match the sha256 in the URL")
        self.server_hub.lfs_objects[params["oid"]] = body
        return 200, {}, b""

    def route_lfs_verify(self, params, body):
        request = json.loads(body)
        stored = self.server_hub.lfs_objects.get(params["oid"])
        if stored is None or request.get("oid") != params["oid"] or request.get("size") != len(stored):
            raise HubError(404, None, f"LFS object {params['oid']} was not uploaded (or its size differs)")
        return 200, {}, {}

    def route_commit(self, params, body):
        hub = self.server_hub
        repo = hub.writable_repo(params["type"], params["repo"], self.token)
        if self.headers.get("Content-Type") != "application/x-ndjson":
            raise HubError(400, None, "commit needs Content-Type: application/x-ndjson")
        branch = params["rev"]
        if branch not in repo.branches:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {branch} (commits go to a branch)")
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, None, "the first line of a commit must be its header")
        header = lines[0]["value"]
        if not header.get("summary"):
            raise HubError(400, None, "commit summary is required")
        head = repo.branches[branch]
        if header.get("parentCommit") and header["parentCommit"] != head:
            raise HubError(412, None, f"parentCommit {header['parentCommit']} is not the head of {branch} ({head})")
        tree = dict(repo.commits[head].tree)
        for line in lines[1:]:
            self.apply_operation(tree, line.get("key"), line.get("value") or {})
        oid = hub.new_commit(repo, head, tree, header["summary"], header.get("description", ""), self.token.user)
        repo.branches[branch] = oid
        return 200, {}, {"commitUrl": f"{hub.url(repo)}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None}

    def apply_operation(self, tree: dict, key: str, value: dict) -> None:
        path = value.get("path", "")
        if not path or path.startswith("/") or ".." in path.split("/"):
            raise HubError(400, None, f"invalid path {path!r} in commit")
        if key == "file":
            if value.get("encoding") != "base64":
                raise HubError(400, None, "regular files are sent base64-encoded")
            data = base64.b64decode(value["content"])
            if len(data) > LFS_THRESHOLD:
                raise HubError(400, None, f"{path} is larger than 10 MB: upload it through LFS")
            tree[path] = Blob(data=data, size=len(data))
        elif key == "lfsFile":
            stored = self.server_hub.lfs_objects.get(value.get("oid"))
            if value.get("algo") != "sha256" or stored is None or len(stored) != value.get("size"):
                raise HubError(400, None, f"LFS object of {path} was not uploaded")
            tree[path] = Blob(lfs_sha256=value["oid"], size=value["size"])
        elif key == "deletedFile":
            if tree.pop(path, None) is None:
                raise HubError(404, "EntryNotFound", f"A file with this name doesn't exist: {path}")
        elif key == "deletedFolder":
            for p in [p for p in tree if p.startswith(path.rstrip("/") + "/")]:
                del tree[p]
        else:
            raise HubError(400, None, f"unknown commit operation {key!r}")

    def route_create_branch(self, params, body):
        hub = self.server_hub
        repo = hub.writable_repo(params["type"], params["repo"], self.token)
        request = json.loads(body) if body else {}
        if params["rev"] in repo.branches:
            raise HubError(409, None, f"Reference already exists: refs/heads/{params['rev']}")
        start = request.get("startingPoint") or "main"
        repo.branches[params["rev"]] = hub.revision(repo, start)
        return 200, {}, {}

    def route_create_tag(self, params, body):
        hub = self.server_hub
        repo = hub.writable_repo(params["type"], params["repo"], self.token)
        request = self.json_body(body)
        tag = request.get("tag")
        if not tag:
            raise HubError(400, None, "tag name is required")
        if tag in repo.tags:
            raise HubError(409, None, f"Tag already exists: {tag}")
        repo.tags[tag] = hub.revision(repo, params["rev"])
        return 200, {}, {}

    def route_resolve(self, params, body):
        hub = self.server_hub
        repo = hub.repo(params["type"], params["repo"], self.caller)
        oid = hub.revision(repo, params["rev"])
        if repo.gated and self.caller != repo.owner:
            raise HubError(403, "GatedRepo", f"Access to model {repo.repo_id} is restricted: you must ask for access")
        blob = repo.commits[oid].tree.get(params["path"])
        if blob is None:
            raise HubError(404, "EntryNotFound", f"Entry Not Found: {params['path']} at {params['rev']}")
        headers = {"X-Repo-Commit": oid, "ETag": f'"{blob.git_oid}"', "Accept-Ranges": "bytes"}
        if blob.lfs_sha256 is not None:
            data = hub.lfs_objects[blob.lfs_sha256]
            headers.update({"X-Linked-Etag": f'"{blob.lfs_sha256}"', "X-Linked-Size": str(blob.size)})
        else:
            data = blob.data
        range_header = self.headers.get("Range")
        if range_header and (m := re.fullmatch(r"bytes=(\d+)-(\d*)", range_header.strip())):
            start, end = int(m.group(1)), int(m.group(2)) if m.group(2) else len(data) - 1
            headers["Content-Range"] = f"bytes {start}-{min(end, len(data) - 1)}/{len(data)}"
            return 206, headers, data[start : end + 1]
        return 200, headers, data


def validate_model_index(model_index) -> list[dict]:
    """The checks the Hub's validate-yaml applies to model-index: a list of {name, results[{task, dataset,
    metrics[{type, value}]}]}."""
    errors = []
    if not isinstance(model_index, list):
        return [{"message": "model-index must be a list"}]
    for entry in model_index:
        if not isinstance(entry, dict) or "name" not in entry or not isinstance(entry.get("results"), list):
            errors.append({"message": "model-index entries need a name and a results list"})
            continue
        for result in entry["results"]:
            task, dataset = result.get("task") or {}, result.get("dataset") or {}
            if "type" not in task or not {"name", "type"} <= set(dataset) or not result.get("metrics"):
                errors.append({"message": "each model-index result needs task.type, dataset.name/type and metrics"})
            for metric in result.get("metrics") or []:
                if "type" not in metric or "value" not in metric:
                    errors.append({"message": "each metric needs a type and a value"})
    return errors


__all__ = ["LoopbackHub", "Token", "git_blob_sha1"]
