"""The nodes' end of `push`, `pull` and `stage` (hvd-cluster's transfer of a tree to and from
/shared, and from /shared onto every node's own disk). Written by hvd-cluster; sent with each
call, nothing installed. Python's standard library only.

usage: tree_sync.py manifest|receive|send|stage   (everything else comes on standard input)

Every message is a run of records (the layout is src/transfer/wire.rs's): a 30-byte header
(kind, mode, size, mtime in ns, the lengths of path, link target and hash), then those bytes.
Names are bytes and arrive as they were sent (spaces, line breaks, any encoding). Each call
starts with an `R` record naming the root: a folder or file below /shared, never /shared itself,
or below STAGED (this node's own copies of datasets, on its data disk where it has one).

- manifest: `R` (mode bit 1: hash every file) -> `R` (size: free bytes where the root lands;
  mode: 0 missing, 1 folder, 2 file, 3 something else), one record per entry (path relative to
  the root; a file root is one record with an empty path), `E`.
- receive: `R` (mode bit 1: the root is a file), then `d` (a folder, its mode), `l` (a link),
  `f` (a file: chunks of u32 length + bytes, a zero length, then `k` with the mtime, or `a`
  when the sender gave the file up), `a` (mode and mtime of a file already there), `x` (delete),
  `E` -> `ok files=N bytes=N`. A file is written under a temporary name (`.hvd-part.*`) and
  renamed only once whole; a call that ends early leaves no half file under a final name, and
  the next receive into the same root sweeps what an earlier one left.
- send: `R` (mode bit 1: the root is a file; bit 2: zstd may be used), the requested entries,
  `E` -> one byte, `Z` (the rest is a zstd stream) or `P` (plain), then the records as receive
  reads them (`v` for an entry that vanished).
- stage (on the master): `R` (the source below /shared; mode bit 1: a file), `R` (where it
  lands below STAGED), the records to pass on (`d`, `l`, `a`, `x` as given; `f` read from the
  source), `E` -> exactly what receive reads for that root: the stream every node of the tree
  receives. A file gone before its turn is left out (counted on stderr).

Nothing is read or written through a symbolic link: every folder is opened relative to its
parent with O_NOFOLLOW, so a link in the tree (or one planted in /shared) cannot lead outside.
"""
import errno
import fcntl
import hashlib
import math
import os
import shutil
import stat
import struct
import subprocess
import sys

SHARED = b"/shared"
STAGED = b"/var/lib/hvd-cluster/data/staged"
HEADER = struct.Struct(">cIQqIIB")
CHUNK = 1 << 20
PART = b".hvd-part."
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

out = sys.stdout.buffer
inp = sys.stdin.buffer


class Refused(Exception):
    """Input this program will not act on; said in one line, exit 2."""


def shown(name):
    text = repr(bytes(name))[2:-1]
    return text if len(text) <= 80 else text[:77] + "..."


def read_exact(n):
    data = inp.read(n)
    if len(data) != n:
        raise EOFError("the stream ended early")
    return data


def read_record():
    kind, mode, size, mtime, plen, llen, hlen = HEADER.unpack(read_exact(HEADER.size))
    path = read_exact(plen) if plen else b""
    link = read_exact(llen) if llen else b""
    digest = read_exact(hlen) if hlen else b""
    return kind, mode, size, mtime, path, link, digest


def write_record(kind, mode=0, size=0, mtime=0, path=b"", link=b"", digest=b""):
    out.write(HEADER.pack(kind, mode, size, mtime, len(path), len(link), len(digest)))
    out.write(path + link + digest)


def base_of(root):
    """The base a root lies below (/shared or STAGED), or a refusal."""
    for base in (SHARED, STAGED):
        if root.startswith(base + b"/"):
            return base
    raise Refused("%s is not below /shared" % shown(root))


def root_parts(root):
    """The root's components below its base, each checked."""
    base = base_of(root)
    parts = root[len(base) + 1:].split(b"/")
    for p in parts:
        if p in (b"", b".", b"..") or b"\0" in p:
            raise Refused("%s: not a plain path below %s" % (shown(root), base.decode()))
    return parts


def rel_parts(path):
    """A relative path's components; empty for the root itself."""
    if not path:
        return []
    parts = path.split(b"/")
    for p in parts:
        if p in (b"", b".", b"..") or b"\0" in p:
            raise Refused("%s: not a plain relative path" % shown(path))
    return parts


def open_dir(parent_fd, name, create):
    """A folder below parent_fd, never through a link; made (0755) when missing and asked."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise
        try:
            os.mkdir(name, 0o755, dir_fd=parent_fd)
        except FileExistsError:
            pass
        return os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused("%s is a link or a file, not a folder: nothing is written through it" % shown(name))
        raise


def open_base(root):
    """The folder a root lies below; STAGED (ours alone, below /var/lib) is made when missing."""
    base = base_of(root)
    if base == STAGED:
        os.makedirs(STAGED, 0o755, exist_ok=True)
    try:
        return os.open(base, DIR_FLAGS)
    except OSError as e:
        raise Refused("%s is not a folder on this node (%s)" % (base.decode(), e.strerror))


def walk_to(top_fd, parts, create):
    """The folder at parts below top_fd (a new fd); every step without following links."""
    fd = os.dup(top_fd)
    try:
        for p in parts:
            nxt = open_dir(fd, p, create)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


class Root:
    """Where a call acts: the folder holding the root, and the root's own name in it."""

    def __init__(self, root, create):
        parts = root_parts(root)
        shared = open_base(root)
        try:
            self.holder = walk_to(shared, parts[:-1], create)
        finally:
            os.close(shared)
        self.name = parts[-1]
        self.cache = (None, None)

    def kind(self):
        try:
            st = os.stat(self.name, dir_fd=self.holder, follow_symlinks=False)
        except FileNotFoundError:
            return 0, None
        if stat.S_ISDIR(st.st_mode):
            return 1, st
        if stat.S_ISREG(st.st_mode):
            return 2, st
        return 3, st

    def parent(self, path, is_file_root, create):
        """(folder fd, name) of a relative path; fds are cached for the last folder."""
        parts = rel_parts(path)
        if not parts:
            return self.holder, self.name
        if is_file_root:
            raise Refused("%s: the root is a file, it has no entries" % shown(path))
        key = b"/".join(parts[:-1])
        if self.cache[0] != key:
            if self.cache[1] is not None:
                os.close(self.cache[1])
            self.cache = (None, None)
            self.cache = (key, walk_to(self.holder, [self.name] + parts[:-1], create))
        return self.cache[1], parts[-1]


def hash_file(dir_fd, name):
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as f:
        return hashlib.file_digest(f, "sha256").digest()


def entry_record(dir_fd, name, rel, st, hashes):
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        write_record(b"d", mode, 0, st.st_mtime_ns, rel)
    elif stat.S_ISLNK(st.st_mode):
        write_record(b"l", mode, 0, st.st_mtime_ns, rel, os.readlink(name, dir_fd=dir_fd))
    elif stat.S_ISREG(st.st_mode):
        digest = hash_file(dir_fd, name) if hashes else b""
        write_record(b"f", mode, st.st_size, st.st_mtime_ns, rel, b"", digest)
    # sockets, fifos and devices are not part of a tree we copy


def scan(dir_fd, prefix, hashes):
    with os.scandir(dir_fd) as it:
        entries = sorted(it, key=lambda e: os.fsencode(e.name))
    for e in entries:
        name = os.fsencode(e.name)
        if name.startswith(PART):
            continue
        rel = prefix + name
        try:
            st = e.stat(follow_symlinks=False)
            entry_record(dir_fd, name, rel, st, hashes)
            if stat.S_ISDIR(st.st_mode):
                sub = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
                try:
                    scan(sub, rel + b"/", hashes)
                finally:
                    os.close(sub)
        except FileNotFoundError:
            continue  # gone while we looked


def read_root(verb):
    """The call's first record, its root: (root path, mode bits)."""
    kind, mode, _, _, root, _, _ = read_record()
    if kind != b"R":
        raise Refused("%s: the input does not start with its root" % verb)
    return root, mode


def free_bytes(fd):
    st = os.fstatvfs(fd)
    return st.f_bavail * st.f_frsize


def manifest():
    root, mode = read_root("manifest")
    hashes = bool(mode & 1)
    parts = root_parts(root)
    # The root may not exist yet: free space is read at its nearest existing folder.
    shared = open_base(root)
    fd = shared
    try:
        for p in parts[:-1]:
            try:
                nxt = open_dir(fd, p, False)
            except FileNotFoundError:
                write_record(b"R", 0, free_bytes(fd), 0, root)
                write_record(b"E")
                return
            if fd != shared:
                os.close(fd)
            fd = nxt
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            write_record(b"R", 0, free_bytes(fd), 0, root)
            write_record(b"E")
            return
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(name, DIR_FLAGS, dir_fd=fd)
            try:
                write_record(b"R", 1, free_bytes(sub), st.st_mtime_ns, root)
                scan(sub, b"", hashes)
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode):
            write_record(b"R", 2, free_bytes(fd), st.st_mtime_ns, root)
            entry_record(fd, name, b"", st, hashes)
        else:
            write_record(b"R", 3, free_bytes(fd), st.st_mtime_ns, root)
        write_record(b"E")
    finally:
        if fd != shared:
            os.close(fd)
        os.close(shared)


def lock(root):
    """One receive per root at a time (on this node: every push comes through the master)."""
    os.makedirs("/run/lock", exist_ok=True)
    path = "/run/lock/hvd-cluster-tree.%s.lock" % hashlib.sha256(root).hexdigest()[:24]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise Refused("another push to %s is under way" % shown(root))
    return fd


def sweep(dir_fd, only=None):
    """Removes the temporary files an interrupted receive left (below a folder root)."""
    with os.scandir(dir_fd) as it:
        entries = list(it)
    for e in entries:
        name = os.fsencode(e.name)
        if name.startswith(PART) and (only is None or name.startswith(only)):
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
        elif only is None and e.is_dir(follow_symlinks=False):
            try:
                sub = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                sweep(sub)
            finally:
                os.close(sub)


def remove(dir_fd, name):
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def part_name(name):
    # the file's own name in it (cut), so a sweep of a file root finds its own parts only
    return PART + name[:64] + (".%d.%d" % (os.getpid(), next(COUNTER))).encode()


def counter():
    n = 0
    while True:
        n += 1
        yield n


COUNTER = counter()


def put_in_place(tmp, name, dir_fd, path):
    """Renames a whole temporary file or link to its name, unless a folder is in the way."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            os.unlink(tmp, dir_fd=dir_fd)
            raise Refused("%s is a folder here: push with --delete to replace it" % shown(path or name))
    except FileNotFoundError:
        pass
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def receive_file(dir_fd, name, mode):
    tmp = part_name(name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    written = 0
    try:
        while True:
            (n,) = struct.unpack(">I", read_exact(4))
            if n == 0:
                break
            data = read_exact(n)
            view = memoryview(data)
            while view:
                k = os.write(fd, view)
                view = view[k:]
            written += n
        status = read_exact(1)
        (mtime,) = struct.unpack(">q", read_exact(8))
        if status != b"k":
            os.close(fd)
            fd = -1
            os.unlink(tmp, dir_fd=dir_fd)
            return None
        os.fchmod(fd, mode & 0o1777)
        os.utime(fd, ns=(mtime, mtime))
        os.close(fd)
        fd = -1
        done, tmp = tmp, None
        put_in_place(done, name, dir_fd, b"")
        return written
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass


def receive():
    root, mode = read_root("receive")
    is_file = bool(mode & 1)
    held = lock(root)
    r = Root(root, create=True)
    found, _ = r.kind()
    if is_file:
        if found == 1:
            raise Refused("%s is a folder: a file cannot replace it" % shown(root))
        sweep(r.holder, PART + r.name[:64] + b".")
    else:
        if found not in (0, 1):
            raise Refused("%s exists and is not a folder" % shown(root))
        top = open_dir(r.holder, r.name, True)
        try:
            sweep(top)
        finally:
            os.close(top)
    files = 0
    total = 0
    while True:
        kind, mode, size, mtime, path, link, _ = read_record()
        if kind == b"E":
            break
        dir_fd, name = r.parent(path, is_file, create=True)
        if kind == b"d":
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            fd = open_dir(dir_fd, name, True)
            try:
                os.fchmod(fd, mode & 0o1777)
            finally:
                os.close(fd)
        elif kind == b"l":
            tmp = part_name(name)
            os.symlink(link, tmp, dir_fd=dir_fd)
            put_in_place(tmp, name, dir_fd, path)
        elif kind == b"f":
            n = receive_file(dir_fd, name, mode)
            if n is not None:
                files += 1
                total += n
        elif kind == b"a":
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                os.fchmod(fd, mode & 0o1777)
                os.utime(fd, ns=(mtime, mtime))
            finally:
                os.close(fd)
        elif kind == b"x":
            remove(dir_fd, name)
        else:
            raise Refused("receive: a record of unknown kind %r" % kind)
    out.write(b"ok files=%d bytes=%d\n" % (files, total))
    os.close(held)


def entropy(sample):
    """Bits per byte of a sample (8 for random bytes): whether compression can pay."""
    if not sample:
        return 8.0
    n = len(sample)
    bits = 0.0
    for b in range(256):
        c = sample.count(bytes((b,)))
        if c:
            p = c / n
            bits -= p * math.log2(p)
    return bits


def send():
    global out
    root, mode = read_root("send")
    is_file = bool(mode & 1)
    zstd_ok = bool(mode & 2)
    wanted = []
    while True:
        rec = read_record()
        if rec[0] == b"E":
            break
        rel_parts(rec[4])
        wanted.append(rec)
    r = Root(root, create=False)
    # Compress where it pays: a sample of what is asked for (up to 16 files, 64 KiB each).
    sample = b""
    if zstd_ok and shutil.which("zstd"):
        for rec in [w for w in wanted if w[0] == b"f"][:16]:
            try:
                dir_fd, name = r.parent(rec[4], is_file, create=False)
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
                try:
                    sample += os.read(fd, 1 << 16)
                finally:
                    os.close(fd)
            except OSError:
                continue
    zstd = None
    if sample and entropy(sample) < 7.2:
        out.write(b"Z")
        out.flush()
        zstd = subprocess.Popen(["zstd", "-q", "-c", "--adapt=min=1,max=12", "-T0"],
                                stdin=subprocess.PIPE, stdout=sys.stdout.fileno())
        out = zstd.stdin
    else:
        out.write(b"P")
    for kind, _, _, _, path, _, _ in wanted:
        try:
            dir_fd, name = r.parent(path, is_file, create=False)
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            write_record(b"v", path=path)
            continue
        if stat.S_ISREG(st.st_mode) and kind == b"f":
            send_file(dir_fd, name, path)
        elif stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode):
            entry_record(dir_fd, name, path, st, False)
        else:
            write_record(b"v", path=path)
    write_record(b"E")
    if zstd is not None:
        zstd.stdin.close()
        out = sys.stdout.buffer
        if zstd.wait() != 0:
            raise OSError("zstd failed on the stream")


def send_file(dir_fd, name, path, say_gone=True):
    """A file's record and body; False (and a `v` record when `say_gone`) when it is gone."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        if say_gone:
            write_record(b"v", path=path)
        return False
    try:
        st = os.fstat(fd)
        write_record(b"f", stat.S_IMODE(st.st_mode), st.st_size, st.st_mtime_ns, path)
        while True:
            data = os.read(fd, CHUNK)
            if not data:
                break
            out.write(struct.pack(">I", len(data)))
            out.write(data)
        out.write(struct.pack(">I", 0))
        out.write(b"k" + struct.pack(">q", st.st_mtime_ns))
    finally:
        os.close(fd)
    return True


def stage():
    source, mode = read_root("stage")
    dest, _ = read_root("stage")
    if base_of(source) != SHARED:
        raise Refused("stage: %s is not below /shared" % shown(source))
    if base_of(dest) != STAGED:
        raise Refused("stage: %s is not a staged copy" % shown(dest))
    root_parts(dest)
    is_file = bool(mode & 1)
    wanted = []
    while True:
        rec = read_record()
        if rec[0] == b"E":
            break
        if rec[0] not in (b"d", b"l", b"f", b"a", b"x"):
            raise Refused("stage: a record of unknown kind %r" % rec[0])
        rel_parts(rec[4])
        wanted.append(rec)
    r = Root(source, create=False)
    write_record(b"R", mode & 1, 0, 0, dest)
    gone = 0
    for kind, m, _, mtime, path, link, _ in wanted:
        if kind == b"f":
            try:
                dir_fd, name = r.parent(path, is_file, create=False)
            except (FileNotFoundError, NotADirectoryError):
                gone += 1
                continue
            if not send_file(dir_fd, name, path, say_gone=False):
                gone += 1
        else:
            write_record(kind, m, 0, mtime, path, link)
    write_record(b"E")
    if gone:
        print("gone before their turn: %d" % gone, file=sys.stderr)


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    try:
        if what == "manifest":
            manifest()
        elif what == "receive":
            receive()
        elif what == "send":
            send()
        elif what == "stage":
            stage()
        else:
            raise Refused("usage: tree_sync.py manifest|receive|send|stage")
        out.flush()
    except Refused as e:
        print("refused: %s" % e, file=sys.stderr)
        sys.exit(2)
    except EOFError as e:
        print("the stream ended early: %s" % e, file=sys.stderr)
        sys.exit(3)
    except BrokenPipeError:
        sys.exit(3)


if __name__ == "__main__":
    main()
