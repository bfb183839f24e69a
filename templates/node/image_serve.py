#!/usr/bin/env python3
"""One-shot image server on the master: sends FILE once to each listed worker address that
connects to BIND:PORT (plain TCP inside the cluster's security group: under emulation SSH's
crypto is the bottleneck), then exits. Workers that have not connected within DEADLINE
seconds are given up; a send under way is finished (a worker streams the bytes straight into
`docker load`, which may be slow). Written by hvd-cluster.
usage: image_serve.py BIND PORT FILE DEADLINE ADDRESS..."""
import socket
import sys
import threading
import time


def main():
    bind, port, path, deadline = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    waiting = set(sys.argv[5:])
    served = set()
    lock = threading.Lock()
    listener = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((bind, port))
    listener.listen(16)
    listener.settimeout(1.0)
    print("listening", flush=True)
    end = time.monotonic() + deadline
    threads = []

    def send(conn, peer):
        started = time.monotonic()
        try:
            with conn, open(path, "rb") as f:
                sent = conn.sendfile(f)
            secs = max(time.monotonic() - started, 1e-6)
            print("sent %s bytes=%d secs=%.2f" % (peer, sent, secs), flush=True)
            with lock:
                served.add(peer)
        except OSError as e:
            print("failed %s %s" % (peer, e), flush=True)
            with lock:
                waiting.add(peer)  # it may reconnect

    while True:
        with lock:
            busy = any(t.is_alive() for t in threads)
            if not waiting and not busy:
                return 0
            if waiting and not busy and time.monotonic() > end:
                print("deadline; not served: %s" % " ".join(sorted(waiting)), flush=True)
                return 1
        try:
            conn, addr = listener.accept()
        except socket.timeout:
            continue
        peer = addr[0]
        with lock:
            allowed = peer in waiting
            waiting.discard(peer)
        if not allowed:
            print("refused %s" % peer, flush=True)
            conn.close()
            continue
        t = threading.Thread(target=send, args=(conn, peer), daemon=True)
        t.start()
        threads.append(t)


sys.exit(main())
