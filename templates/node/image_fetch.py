#!/usr/bin/env python3
"""Fetches the image file from the master's one-shot server (image_serve.py) into OUT and
checks its sha256 against the one the master computed. Prints `bytes=N secs=S`. Written by
hvd-cluster.  usage: image_fetch.py ADDRESS PORT OUT SHA256 BYTES"""
import hashlib
import socket
import sys
import time


def main():
    host, port, out, want, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=10)
            break
        except OSError as e:
            if time.monotonic() > deadline:
                print("cannot connect to %s:%d: %s" % (host, port, e), file=sys.stderr)
                return 1
            time.sleep(1)
    conn.settimeout(120)
    digest = hashlib.sha256()
    got = 0
    started = time.monotonic()
    buf = bytearray(4 << 20)
    view = memoryview(buf)
    with conn, open(out, "wb") as f:
        while True:
            n = conn.recv_into(buf)
            if n == 0:
                break
            digest.update(view[:n])
            f.write(view[:n])
            got += n
    secs = max(time.monotonic() - started, 1e-6)
    if got != size or digest.hexdigest() != want:
        print("the image from %s is damaged: %d of %d bytes, sha256 %s, the master's %s"
              % (host, got, size, digest.hexdigest(), want), file=sys.stderr)
        return 1
    print("bytes=%d secs=%.2f" % (got, secs))
    return 0


sys.exit(main())
