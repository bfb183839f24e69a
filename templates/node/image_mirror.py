#!/usr/bin/env python3
"""The master's registry mirror for one image (container.pull = "master"): every node that
lacks the image pulls it from here at the same time, and each blob crosses from the user's
registry once. The first request for a blob starts its one fetch from the registry; the
bytes go to a file in CACHE as they arrive, and every request for that blob (the first, and
any that come while it is still arriving, or after) is served from that file as it grows, so
a worker receives a layer while the master is still receiving it. A fetched blob is checked
against its digest before it counts as whole; a blob that fails is dropped (the readers'
connections are cut: Docker retries, which fetches again).

Plain HTTP: the master's own Docker reaches it on 127.0.0.1 and each worker through a relay on
its own 127.0.0.1 (`relay` below), the address Docker pulls from without TLS; the relays
connect over the private network, and only the listed PEER addresses are served. The
registry's credentials and CA come in ACCESS (JSON: user, password, identity_token, ca),
which is read and deleted at start: they stay in this process's memory only, for the pull.
One line per event on standard output (the caller reads them):
  fetched blob DIGEST bytes=N secs=S | fetch-failed blob|manifest DIGEST|REF why=...
  served blob DIGEST peer=P bytes=N | cut blob DIGEST peer=P | refused peer=P
Exits after IDLE seconds without a request. Written by hvd-cluster.
usage: image_mirror.py serve BIND PORT CACHE UPSTREAM REPO ACCESS IDLE PEER...
       image_mirror.py relay PORT MASTER MASTER_PORT IDLE"""
import base64
import hashlib
import http.client
import http.server
import json
import os
import re
import socket
import socketserver
import ssl
import sys
import threading
import time
import urllib.parse

CHUNK = 1 << 20
MANIFEST_TYPES = ("application/vnd.docker.distribution.manifest.list.v2+json, "
                  "application/vnd.oci.image.index.v1+json, "
                  "application/vnd.docker.distribution.manifest.v2+json, "
                  "application/vnd.oci.image.manifest.v1+json")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
REFERENCE = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|sha256:[0-9a-f]{64})$")


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Refused(Exception):
    """The registry answered with an error status: passed on to the node as it came."""

    def __init__(self, status, body, ctype):
        super().__init__("status %d" % status)
        self.status, self.body, self.ctype = status, body, ctype


class Upstream:
    """The user's registry: HTTPS, its CA added to the system's, Basic or Bearer auth on the
    challenge it sends; redirects followed (the credentials only to the registry itself)."""

    def __init__(self, host, repo, access):
        self.host, self.repo = host, repo
        self.user = access.get("user")
        self.password = access.get("password")
        self.identity_token = bool(access.get("identity_token"))
        self.context = ssl.create_default_context()
        if access.get("ca"):
            self.context.load_verify_locations(cadata=access["ca"])
        self.authorization = None
        self.lock = threading.Lock()

    def connect(self, scheme, netloc):
        if scheme == "https":
            return http.client.HTTPSConnection(netloc, timeout=300, context=self.context)
        return http.client.HTTPConnection(netloc, timeout=300)

    def open(self, method, path, headers):
        """(response, connection) for PATH on the registry: authenticated on a 401 once."""
        for attempt in (0, 1):
            response, conn = self.follow(method, "https://%s%s" % (self.host, path), headers)
            if response.status != 401 or attempt == 1:
                return response, conn
            challenge = response.getheader("WWW-Authenticate", "")
            response.read()
            conn.close()
            if not self.authenticate(challenge):
                return self.follow(method, "https://%s%s" % (self.host, path), headers)
        raise AssertionError("unreachable")

    def follow(self, method, url, headers):
        for _ in range(6):
            parts = urllib.parse.urlsplit(url)
            conn = self.connect(parts.scheme, parts.netloc)
            sent = dict(headers)
            if self.authorization and parts.netloc == self.host:
                sent["Authorization"] = self.authorization
            target = parts.path + ("?" + parts.query if parts.query else "")
            conn.request(method, target, headers=sent)
            response = conn.getresponse()
            if response.status in (301, 302, 303, 307, 308):
                location = response.getheader("Location", "")
                response.read()
                conn.close()
                url = urllib.parse.urljoin(url, location)
                if method == "HEAD" and response.status == 303:
                    method = "GET"
                continue
            return response, conn
        raise OSError("too many redirects from the registry")

    def authenticate(self, challenge):
        """Sets the Authorization the challenge asks for; False when there is nothing to send."""
        scheme, _, rest = challenge.partition(" ")
        params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        basic = None
        if self.user is not None and self.password is not None and not self.identity_token:
            basic = "Basic " + base64.b64encode(
                ("%s:%s" % (self.user, self.password)).encode()).decode()
        if scheme.lower() == "basic":
            with self.lock:
                self.authorization = basic
            return basic is not None
        if scheme.lower() != "bearer" or "realm" not in params:
            return False
        realm = urllib.parse.urlsplit(params["realm"])
        query = {"scope": params.get("scope") or "repository:%s:pull" % self.repo}
        if params.get("service"):
            query["service"] = params["service"]
        conn = self.connect(realm.scheme, realm.netloc)
        if self.identity_token:
            # Docker's way with an identity token: OAuth2's refresh_token grant
            form = dict(query, grant_type="refresh_token", refresh_token=self.password,
                        client_id="hvd-cluster")
            conn.request("POST", realm.path or "/", body=urllib.parse.urlencode(form),
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        else:
            query = urllib.parse.urlencode(query)
            target = (realm.path or "/") + "?" + (realm.query + "&" if realm.query else "") + query
            conn.request("GET", target, headers={"Authorization": basic} if basic else {})
        response = conn.getresponse()
        body = response.read()
        conn.close()
        if response.status != 200:
            return False
        answer = json.loads(body)
        token = answer.get("token") or answer.get("access_token")
        if not token:
            return False
        with self.lock:
            self.authorization = "Bearer " + token
        return True


class Blob:
    """One blob's single fetch, and what of it is on disk so far."""

    def __init__(self, digest, path):
        self.digest, self.path = digest, path
        self.cond = threading.Condition()
        self.started = False  # the registry answered: size (when it said) and a file
        self.size = None
        self.written = 0
        self.state = "fetching"  # then "whole" or "failed"
        self.refused = None


class Mirror:
    def __init__(self, upstream, cache):
        self.upstream, self.cache = upstream, cache
        self.blobs = {}
        self.manifests = {}
        self.lock = threading.Lock()
        self.last_request = time.monotonic()
        self.busy = 0

    # Manifests: small, fetched once per reference and kept in memory.
    def manifest(self, reference):
        with self.lock:
            entry = self.manifests.get(reference)
            owner = entry is None
            if owner:
                entry = self.manifests[reference] = {"ready": threading.Event()}
        if owner:
            try:
                response, conn = self.upstream.open(
                    "GET", "/v2/%s/manifests/%s" % (self.upstream.repo, reference),
                    {"Accept": MANIFEST_TYPES})
                body = response.read()
                conn.close()
                entry.update(status=response.status, body=body,
                             ctype=response.getheader("Content-Type", "application/json"))
                if response.status == 200:
                    digest = "sha256:" + hashlib.sha256(body).hexdigest()
                    entry["digest"] = digest
                    with self.lock:
                        self.manifests.setdefault(digest, entry)
                    say("fetched manifest %s bytes=%d" % (reference, len(body)))
                else:
                    say("fetch-failed manifest %s why=the_registry_answered_%d"
                        % (reference, response.status))
                    with self.lock:  # asked again, it is asked of the registry again
                        self.manifests.pop(reference, None)
            except (OSError, ValueError, http.client.HTTPException) as e:
                why = str(e) or type(e).__name__
                say("fetch-failed manifest %s why=%s" % (reference, why.replace(" ", "_")))
                entry.update(status=502, body=json.dumps({"errors": [{
                    "code": "UNKNOWN", "message": "the mirror's registry: %s" % why}]}).encode(),
                    ctype="application/json")
                with self.lock:
                    self.manifests.pop(reference, None)
            entry["ready"].set()
        entry["ready"].wait()
        return entry

    # Blobs: one fetch each, streamed to every reader as it arrives.
    def blob(self, digest):
        with self.lock:
            blob = self.blobs.get(digest)
            if blob is None or blob.state == "failed":
                blob = self.blobs[digest] = Blob(digest, os.path.join(self.cache, digest[7:]))
                threading.Thread(target=self.fetch, args=(blob,), daemon=True).start()
        return blob

    def fetch(self, blob):
        started = time.monotonic()
        why = None
        try:
            response, conn = self.upstream.open(
                "GET", "/v2/%s/blobs/%s" % (self.upstream.repo, blob.digest), {})
            if response.status != 200:
                refused = Refused(response.status, response.read(),
                                  response.getheader("Content-Type", "application/json"))
                conn.close()
                raise refused
            length = response.getheader("Content-Length")
            hasher = hashlib.sha256()
            with open(blob.path, "wb", buffering=0) as f:
                with blob.cond:
                    blob.size = int(length) if length and length.isdigit() else None
                    blob.started = True
                    blob.cond.notify_all()
                while True:
                    chunk = response.read(CHUNK)
                    if not chunk:
                        break
                    f.write(chunk)
                    hasher.update(chunk)
                    with blob.cond:
                        blob.written += len(chunk)
                        blob.cond.notify_all()
            conn.close()
            got = "sha256:" + hasher.hexdigest()
            if got != blob.digest:
                why = "its bytes have the digest %s" % got
            elif blob.size is not None and blob.written != blob.size:
                why = "%d of %d bytes arrived" % (blob.written, blob.size)
        except Refused as e:
            why = "the registry answered %d" % e.status
            blob.refused = e
        except (OSError, ValueError, http.client.HTTPException) as e:
            why = str(e) or type(e).__name__
        with blob.cond:
            blob.started = True
            if why is None:
                blob.state = "whole"
                say("fetched blob %s bytes=%d secs=%.2f"
                    % (blob.digest, blob.written, time.monotonic() - started))
            else:
                blob.state = "failed"
                say("fetch-failed blob %s why=%s" % (blob.digest, why.replace(" ", "_")))
            blob.cond.notify_all()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mirror = None
    peers = ()

    def log_message(self, *args):  # our own lines only
        pass

    def error(self, status, code, message):
        body = json.dumps({"errors": [{"code": code, "message": message}]}).encode()
        self.reply(status, body, "application/json")

    def reply(self, status, body, ctype, headers=(), head=False):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def do_HEAD(self):
        self.handle_request(head=True)

    def do_GET(self):
        self.handle_request(head=False)

    def handle_request(self, head):
        peer = self.client_address[0]
        mirror = self.mirror
        with mirror.lock:
            mirror.busy += 1
        try:
            if peer not in self.peers:
                say("refused peer=%s" % peer)
                self.error(403, "DENIED", "not a node of this cluster")
                return
            self.route(head, peer)
        finally:
            with mirror.lock:
                mirror.busy -= 1
                mirror.last_request = time.monotonic()

    def route(self, head, peer):
        path = urllib.parse.urlsplit(self.path).path
        if path in ("/v2", "/v2/"):
            self.reply(200, b"{}", "application/json", head=head)
            return
        prefix = "/v2/%s/" % self.mirror.upstream.repo
        if not path.startswith(prefix):
            self.error(404, "NAME_UNKNOWN", "this mirror serves one repository")
            return
        kind, _, ref = path[len(prefix):].partition("/")
        if kind == "manifests" and REFERENCE.match(ref):
            entry = self.mirror.manifest(ref)
            headers = [("Docker-Content-Digest", entry["digest"])] if "digest" in entry else []
            self.reply(entry["status"], entry["body"], entry["ctype"], headers, head)
        elif kind == "blobs" and DIGEST.match(ref):
            self.send_blob(self.mirror.blob(ref), head, peer)
        else:
            self.error(404, "NAME_UNKNOWN", "not a manifest or blob of this repository")

    def send_blob(self, blob, head, peer):
        with blob.cond:
            while not blob.started:
                blob.cond.wait(30)
            if blob.state == "failed" and blob.written == 0:
                e = blob.refused
                if e is not None:
                    self.reply(e.status, e.body, e.ctype, head=head)
                else:
                    self.error(502, "UNKNOWN", "the mirror could not fetch the blob")
                return
            size = blob.size if blob.size is not None else (
                blob.written if blob.state == "whole" else None)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Docker-Content-Digest", blob.digest)
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        if size is None:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(size))
        self.end_headers()
        if head:
            return
        sent = 0
        with open(blob.path, "rb") as f:
            while True:
                with blob.cond:
                    while blob.written <= sent and blob.state == "fetching":
                        blob.cond.wait(30)
                    available, state = blob.written, blob.state
                if state == "failed":
                    say("cut blob %s peer=%s" % (blob.digest, peer))
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if size is not None:
                    while sent < available:
                        sent += self.connection.sendfile(f, offset=sent, count=available - sent)
                else:
                    f.seek(sent)
                    while sent < available:
                        chunk = f.read(min(CHUNK, available - sent))
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        sent += len(chunk)
                if state == "whole" and sent >= available:
                    break
        if size is None:
            self.wfile.write(b"0\r\n\r\n")
        say("served blob %s peer=%s bytes=%d" % (blob.digest, peer, sent))


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64


def idle_exit(last, busy, idle):
    while True:
        time.sleep(5)
        if busy() == 0 and time.monotonic() - last() > idle:
            say("idle for %ds: exiting" % idle)
            os._exit(0)


def serve(bind, port, cache, upstream_host, repo, access_path, idle, peers):
    access = {}
    if access_path != "-":
        with open(access_path) as f:
            access = json.load(f)
        os.unlink(access_path)
    os.makedirs(cache, mode=0o700, exist_ok=True)
    mirror = Mirror(Upstream(upstream_host, repo, access), cache)
    Handler.mirror = mirror
    Handler.peers = frozenset(["127.0.0.1"] + peers)
    servers = [Server(("127.0.0.1", port), Handler)]
    if bind != "127.0.0.1":
        servers.append(Server((bind, port), Handler))
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    say("listening")
    idle_exit(lambda: mirror.last_request, lambda: mirror.busy, idle)


def pump(source, sink):
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    for s, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
        try:
            s.shutdown(how)
        except OSError:
            pass


def relay(port, master, master_port, idle):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    listener.settimeout(5.0)
    say("listening")
    last = time.monotonic()
    open_pairs = []
    while True:
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            open_pairs = [t for t in open_pairs if t.is_alive()]
            if not open_pairs and time.monotonic() - last > idle:
                say("idle for %ds: exiting" % idle)
                return 0
            continue
        last = time.monotonic()
        try:
            upstream = socket.create_connection((master, master_port), timeout=30)
            upstream.settimeout(None)
        except OSError as e:
            say("relay-failed %s" % e)
            conn.close()
            continue
        for a, b in ((conn, upstream), (upstream, conn)):
            t = threading.Thread(target=pump, args=(a, b), daemon=True)
            t.start()
            open_pairs.append(t)


def main(argv):
    if len(argv) >= 8 and argv[0] == "serve":
        serve(argv[1], int(argv[2]), argv[3], argv[4], argv[5], argv[6], float(argv[7]),
              argv[8:])
        return 0
    if len(argv) == 5 and argv[0] == "relay":
        return relay(int(argv[1]), argv[2], int(argv[3]), float(argv[4]))
    sys.stderr.write(__doc__.split("usage:", 1)[1])
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
