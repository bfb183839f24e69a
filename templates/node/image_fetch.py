#!/usr/bin/env python3
"""Fetches the image file from its parent in the fan-out tree (the master's image_serve.py, or
another worker running this script) and writes it to standard output (the worker pipes it
through zstd into `docker load`: no copy on disk). With BIND and CHILD addresses it is also a
relay: it listens on BIND:PORT first, waits up to a minute for those children to connect, then
passes every chunk it reads on to them as it arrives, so the image crosses each link once and
the whole tree fills in about the time of one transfer (a child that fails is dropped; it fails
its own byte count). Fails unless exactly BYTES arrived; the content itself is checked
downstream (zstd's frame checksum, docker's layer digests). Writes `bytes=N secs=S children=C`
to REPORT. Written by hvd-cluster.
`stage` sends a tree from /shared down the same tree: on the master ADDRESS is `-` (the bytes
come on standard input, from tree_sync.py stage), and BYTES is `-` everywhere (the length is
not known ahead; tree_sync.py receive, reading the output, fails on a stream cut short).
usage: image_fetch.py ADDRESS PORT BYTES REPORT [BIND CHILD...]"""
import socket
import sys
import time


def family(address):
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def accept_children(bind, port, expected):
    """Connections from the listed addresses, each at most once; others are refused."""
    listener = socket.socket(family(bind), socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((bind, port))
    listener.listen(16)
    listener.settimeout(1.0)
    waiting = set(expected)
    children = []
    deadline = time.monotonic() + 60
    while waiting and time.monotonic() < deadline:
        try:
            conn, addr = listener.accept()
        except socket.timeout:
            continue
        if addr[0] not in waiting:
            print("refused %s" % addr[0], file=sys.stderr)
            conn.close()
            continue
        waiting.discard(addr[0])
        conn.settimeout(600)
        children.append((addr[0], conn))
    listener.close()
    if waiting:
        print("children that never connected: %s" % " ".join(sorted(waiting)), file=sys.stderr)
    return children


class Stdin:
    """Standard input as the parent (the master's end of `stage`)."""

    def recv_into(self, buf):
        return sys.stdin.buffer.readinto1(buf)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main():
    host, port, size, report = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    size = None if size == "-" else int(size)
    children = accept_children(sys.argv[5], port, sys.argv[6:]) if len(sys.argv) > 5 else []
    deadline = time.monotonic() + 120
    while host != "-":
        try:
            conn = socket.create_connection((host, port), timeout=10)
            break
        except OSError as e:
            if time.monotonic() > deadline:
                print("cannot connect to %s:%d: %s" % (host, port, e), file=sys.stderr)
                return 1
            time.sleep(0.5)
    if host == "-":
        conn = Stdin()
    else:
        # generous: the pipe's reader (docker load under emulation) may stall the stream a while
        conn.settimeout(600)
    got = 0
    started = time.monotonic()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    out = sys.stdout.buffer
    with conn:
        while True:
            n = conn.recv_into(buf)
            if not n:
                break
            chunk = view[:n]
            for child in list(children):
                try:
                    child[1].sendall(chunk)
                except OSError as e:
                    print("dropped child %s: %s" % (child[0], e), file=sys.stderr)
                    child[1].close()
                    children.remove(child)
            out.write(chunk)
            got += n
    out.flush()
    for _, c in children:
        c.close()
    secs = max(time.monotonic() - started, 1e-6)
    if size is not None and got != size:
        print("the image from %s was cut short: %d of %d bytes" % (host, got, size), file=sys.stderr)
        return 1
    with open(report, "w") as f:
        f.write("bytes=%d secs=%.2f children=%d\n" % (got, secs, len(children)))
    return 0


sys.exit(main())
