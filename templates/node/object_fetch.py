"""The master's end of a `[[data]]` entry from the cloud's object store (Swift's API): copies the
objects of one container below one prefix into a folder below /shared, from inside the cloud.
Written by hvd-cluster; sent with each call, nothing installed. Python's standard library only.

usage: sudo python3 -c "$(object_fetch.py)" CREDENTIAL_FILE   (the request on standard input)

CREDENTIAL_FILE (root only, put there by hvd-cluster): {"identity_url", "object_store_url",
"credential_id", "credential_secret"}: an application credential whose access rules let it
read the named containers and nothing else. The request: {"container", "prefix", "dest"
(below /shared), "threads"}.

- Every name is checked before a byte moves: below the prefix, a relative path of non-empty
  segments, none `.` or `..`, no control characters; a name that is both a file and a folder.
  The first bad one is refused by name (exit 2, `refused: ...` on stderr).
- The room check: the bytes still to fetch against the free space where they land.
- What is there already (same size, mtime = the object's last-modified) is not fetched again:
  a copy cut short resumes. Each object is written under a temporary name (`.hvd-part.*`),
  checked against its ETag (the MD5 of a plain object) and renamed only once whole.
- Nothing is read or written through a symbolic link: every folder is opened relative to its
  parent with O_NOFOLLOW. Files and folders made belong to the user sudo ran for.

Standard output, one line each: `plan files=N bytes=N skipped=N`, `got BYTES` per object,
`ok files=N bytes=N skipped=N` at the end.
"""
import datetime
import hashlib
import http.client
import json
import os
import re
import secrets
import ssl
import stat
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

SHARED = "/shared"
PART = ".hvd-part."
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
CHUNK = 1 << 20
CONTAINER = re.compile(r"[A-Za-z0-9._-]{1,255}")
PLAIN_MD5 = re.compile(r"[0-9a-f]{32}")


class Refused(Exception):
    """Input this program will not act on; said in one line, exit 2."""


class Failed(Exception):
    """The object store or this node failed; said in one line, exit 1."""


def shown(text, limit=120):
    text = repr(text)[1:-1]
    return text if len(text) <= limit else text[:limit] + "..."


def owner():
    """The user sudo ran this for (their uid, gid), or None."""
    uid, gid = os.environ.get("SUDO_UID", ""), os.environ.get("SUDO_GID", "")
    return (int(uid), int(gid)) if uid.isdigit() and gid.isdigit() else None


def check_name(rel, full):
    """A name below the prefix as the relative path it lands at."""
    if len(rel.encode()) > 4000:
        raise Refused(f"object {shown(full)}: its name is too long for a path")
    if any(ord(c) < 32 or ord(c) == 127 for c in rel):
        raise Refused(f"object {shown(full)}: its name holds a control character")
    parts = rel.split("/")
    for p in parts:
        if p in ("", ".", ".."):
            raise Refused(f"object {shown(full)}: `{shown(p)}` cannot be a folder or file name below the destination")
        if len(p.encode()) > 255:
            raise Refused(f"object {shown(full)}: a part of its name is longer than 255 bytes")
        if p.startswith(PART):
            raise Refused(f"object {shown(full)}: names starting with {PART} are the copy's own")
    return parts


def mtime_ns(last_modified):
    """Swift's `last_modified` (UTC, `2026-11-29T08:30:00.123456`) in ns since the epoch."""
    fmt = "%Y-%m-%dT%H:%M:%S.%f" if "." in last_modified else "%Y-%m-%dT%H:%M:%S"
    t = datetime.datetime.strptime(last_modified, fmt).replace(tzinfo=datetime.timezone.utc)
    return (int(t.timestamp()) * 1_000_000 + t.microsecond) * 1000


class Store:
    """The object store under one application credential: a token, renewed once on a 401;
    one connection per thread, kept open between requests."""

    def __init__(self, cred):
        self.cred = cred
        url = urllib.parse.urlsplit(cred["object_store_url"])
        if url.scheme not in ("http", "https") or not url.hostname:
            raise Refused(f"object store URL {shown(cred['object_store_url'])} is not http(s)")
        self.url = url
        # the cloud's HTTPS trusted as on the machine that sent the credential: its cloud
        # config's CA bundle, or no verification where it has `insecure`
        self.tls = ssl.create_default_context(cadata=cred.get("ca_pem"))
        if cred.get("insecure"):
            self.tls.check_hostname = False
            self.tls.verify_mode = ssl.CERT_NONE
        self.base = url.path.rstrip("/")
        self.local = threading.local()
        self.lock = threading.Lock()
        self.token = None
        self.renew()

    def renew(self):
        body = json.dumps({"auth": {"identity": {
            "methods": ["application_credential"],
            "application_credential": {"id": self.cred["credential_id"],
                                       "secret": self.cred["credential_secret"]}}}}).encode()
        ident = urllib.parse.urlsplit(self.cred["identity_url"].rstrip("/") + "/auth/tokens")
        conn = self.connect(ident)
        try:
            conn.request("POST", ident.path, body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
        except (OSError, http.client.HTTPException) as e:
            raise Failed(f"Keystone at {shown(self.cred['identity_url'])}: {e}")
        finally:
            conn.close()
        if r.status != 201 or not r.getheader("X-Subject-Token"):
            raise Failed(f"Keystone refused the data credential (HTTP {r.status})")
        with self.lock:
            self.token = r.getheader("X-Subject-Token")

    def connect(self, url):
        port = url.port or (443 if url.scheme == "https" else 80)
        if url.scheme == "https":
            return http.client.HTTPSConnection(url.hostname, port, timeout=120,
                                               context=self.tls)
        return http.client.HTTPConnection(url.hostname, port, timeout=120)

    def get(self, path, query=None):
        """GET base+path; the response (its body unread). Retries a dropped connection and
        5xx three times, a 401 once with a new token."""
        target = self.base + path + ("?" + urllib.parse.urlencode(query) if query else "")
        renewed = False
        for attempt in range(4):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = self.connect(self.url)
            try:
                conn.request("GET", target, headers={"X-Auth-Token": self.token})
                r = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self.local.conn = None
                if attempt == 3:
                    raise Failed(f"object store: GET {shown(path)}: {e}")
                time.sleep(0.5 * (attempt + 1))
                continue
            if r.status == 401 and not renewed:
                r.read()
                renewed = True
                self.renew()
                continue
            if r.status >= 500 and attempt < 3:
                r.read()
                time.sleep(0.5 * (attempt + 1))
                continue
            return r
        raise Failed(f"object store: GET {shown(path)}: no answer")


def listing(store, container, prefix):
    """Every object below the prefix: (name, bytes, etag, last_modified), by pages."""
    out, marker = [], ""
    while True:
        q = {"format": "json", "prefix": prefix, "limit": "10000"}
        if marker:
            q["marker"] = marker
        r = store.get("/" + urllib.parse.quote(container, safe=""), q)
        body = r.read()
        if r.status == 404:
            raise Refused(f"container {shown(container)} does not exist in the object store")
        if r.status in (401, 403):
            raise Failed(f"object store: listing {shown(container)} refused (HTTP {r.status})")
        if r.status == 204:
            return out
        if r.status != 200:
            raise Failed(f"object store: listing {shown(container)}: HTTP {r.status}")
        page = json.loads(body)
        if not page:
            return out
        for o in page:
            if "subdir" in o:
                continue
            out.append((o["name"], int(o["bytes"]), o.get("hash", ""), o["last_modified"]))
        marker = page[-1].get("name") or page[-1].get("subdir")


class Tree:
    """Folders below the destination, opened relative to their parents without following a
    link, made where missing (owned by the user), each opened once."""

    def __init__(self, dest, who):
        self.who = who
        self.fds = {}
        self.lock = threading.Lock()
        rel = dest[len(SHARED):].strip("/")
        fd = os.open(SHARED, DIR_FLAGS)
        for part in [p for p in rel.split("/") if p]:
            fd = self.child(fd, part, dest)
        self.fds[()] = fd
        sweep(fd)

    def child(self, parent, name, shown_as):
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
            if self.who:
                os.chown(name, *self.who, dir_fd=parent, follow_symlinks=False)
        except FileExistsError:
            pass
        try:
            return os.open(name, DIR_FLAGS, dir_fd=parent)
        except (NotADirectoryError, OSError) as e:
            raise Refused(f"{shown(shown_as)}: `{shown(name)}` is there and is not a folder ({e.strerror})")

    def folder(self, parts):
        """The folder at PARTS below the destination, made where missing."""
        with self.lock:
            return self._folder(tuple(parts))

    def _folder(self, key):
        if key not in self.fds:
            parent = self._folder(key[:-1])
            self.fds[key] = self.child(parent, key[-1], "/".join(key))
            sweep(self.fds[key])
        return self.fds[key]

    def lookup(self, parts):
        """The stat of what is at PARTS now, or None; makes nothing (a missing folder on the
        way: None; a link or file on the way: refused)."""
        fd, opened = self.fds[()], []
        try:
            for part in parts[:-1]:
                try:
                    fd = os.open(part, DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    return None
                except OSError as e:
                    raise Refused(f"`{shown('/'.join(parts))}`: `{shown(part)}` on the way is not a folder ({e.strerror})")
                opened.append(fd)
            try:
                return os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return None
        finally:
            for o in opened:
                os.close(o)


def sweep(dirfd):
    """Removes what an earlier copy cut short left in this folder."""
    for name in os.listdir(dirfd):
        if name.startswith(PART):
            try:
                if stat.S_ISREG(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode):
                    os.unlink(name, dir_fd=dirfd)
            except FileNotFoundError:
                pass


def fetch_one(store, tree, container, obj, out):
    name, size, etag, parts, mtime = obj
    fd_dir = tree.folder(parts[:-1]) if len(parts) > 1 else tree.fds[()]
    r = store.get("/" + urllib.parse.quote(container, safe="") + "/" + urllib.parse.quote(name, safe="/"))
    if r.status != 200:
        r.read()
        raise Failed(f"object {shown(name)}: HTTP {r.status}")
    plain = (PLAIN_MD5.fullmatch(etag.strip('"')) and not r.getheader("X-Static-Large-Object")
             and not r.getheader("X-Object-Manifest"))
    md5 = hashlib.md5(usedforsecurity=False) if plain else None
    tmp = PART + secrets.token_hex(8)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                 dir_fd=fd_dir)
    got = 0
    try:
        with os.fdopen(fd, "wb", closefd=True) as f:
            while chunk := r.read(CHUNK):
                f.write(chunk)
                got += len(chunk)
                if md5:
                    md5.update(chunk)
            f.flush()
            if tree.who:
                os.fchown(f.fileno(), *tree.who)
            os.utime(f.fileno(), ns=(mtime, mtime))
        if md5 and md5.hexdigest() != etag.strip('"'):
            raise Failed(f"object {shown(name)}: its content does not match its ETag")
        if got != size:
            raise Failed(f"object {shown(name)}: {got} bytes arrived, the listing said {size}")
        os.replace(tmp, parts[-1], src_dir_fd=fd_dir, dst_dir_fd=fd_dir)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=fd_dir)
        except OSError:
            pass
        raise
    with out:
        print(f"got {got}", flush=True)


def main():
    if len(sys.argv) != 2:
        raise Refused("usage: object_fetch.py CREDENTIAL_FILE < request")
    with open(sys.argv[1]) as f:
        cred = json.load(f)
    req = json.load(sys.stdin)
    container, prefix, dest = req["container"], req["prefix"], req["dest"]
    threads = max(1, min(int(req.get("threads", 16)), 64))
    if not CONTAINER.fullmatch(container) or container in (".", ".."):
        raise Refused(f"container {shown(container)}: not a container name")
    if not (dest.startswith(SHARED + "/") and all(p not in ("", ".", "..") for p in dest[len(SHARED) + 1:].split("/"))):
        raise Refused(f"{shown(dest)} is not a folder below {SHARED}")
    if prefix and not prefix.endswith("/"):
        prefix += "/"

    store = Store(cred)
    objects, files_at, folders_at = [], {}, set()
    for name, size, etag, last_modified in listing(store, container, prefix):
        rel = name[len(prefix):]
        if not rel or rel.endswith("/"):
            continue   # the prefix itself, or a folder marker
        parts = check_name(rel, name)
        key = tuple(parts)
        for i in range(1, len(parts)):
            folders_at.add(key[:i])
        files_at[key] = name
        objects.append((name, size, etag, parts, mtime_ns(last_modified)))
    both = folders_at.intersection(files_at)
    if both:
        name = files_at[sorted(both)[0]]
        raise Refused(f"object {shown(name)} is a file, and other objects make it a folder")

    tree = Tree(dest, owner())
    todo, skipped = [], 0
    for obj in objects:
        st = tree.lookup(obj[3])
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise Refused(f"object {shown(obj[0])}: a folder is where it lands")
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_size == obj[1] and st.st_mtime_ns == obj[4]:
            skipped += 1
        else:
            todo.append(obj)
    need = sum(o[1] for o in todo)
    fs = os.statvfs(tree.fds[()])
    free = fs.f_bavail * fs.f_frsize
    if need > free:
        raise Refused(f"room: {need} bytes to copy into {shown(dest)}, {free} free there")
    print(f"plan files={len(todo)} bytes={need} skipped={skipped}", flush=True)

    out = threading.Lock()
    pool = ThreadPoolExecutor(max_workers=threads)
    try:
        for f in [pool.submit(fetch_one, store, tree, container, o, out) for o in todo]:
            f.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    print(f"ok files={len(todo)} bytes={need} skipped={skipped}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Refused as e:
        print(f"refused: {e}", file=sys.stderr)
        sys.exit(2)
    except Failed as e:
        print(f"failed: {e}", file=sys.stderr)
        sys.exit(1)
    except (OSError, ValueError, KeyError) as e:
        print(f"failed: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
