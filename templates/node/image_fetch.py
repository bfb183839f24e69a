#!/usr/bin/env python3
"""Fetches the image file from the master's one-shot server (image_serve.py) and writes it to
standard output (the worker pipes it through zstd into `docker load`: no copy on disk). Fails
unless exactly BYTES arrived; the content itself is checked downstream (zstd's frame checksum,
docker's layer digests). Writes `bytes=N secs=S` to REPORT. Written by hvd-cluster.
usage: image_fetch.py ADDRESS PORT BYTES REPORT"""
import socket
import sys
import time


def main():
    host, port, size, report = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
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
    # generous: the pipe's reader (docker load under emulation) may stall the stream a while
    conn.settimeout(600)
    got = 0
    started = time.monotonic()
    buf = bytearray(4 << 20)
    view = memoryview(buf)
    out = sys.stdout.buffer
    with conn:
        while True:
            n = conn.recv_into(buf)
            if n == 0:
                break
            out.write(view[:n])
            got += n
    out.flush()
    secs = max(time.monotonic() - started, 1e-6)
    if got != size:
        print("the image from %s was cut short: %d of %d bytes" % (host, got, size), file=sys.stderr)
        return 1
    with open(report, "w") as f:
        f.write("bytes=%d secs=%.2f\n" % (got, secs))
    return 0


sys.exit(main())
