#!/usr/bin/python3
"""kazoo's Lock (Debian python3-kazoo), the Python peer in bench/zookeeper_bench.cc.

  kazoo_lock.py worker ZK_URI PATH SECONDS HOLD_MS OUT
      acquire/hold/release until SECONDS pass; OUT gets "started_ns acquired_ns released_ns"
      lines on CLOCK_MONOTONIC (time.monotonic_ns)

ZK_URI is dlock's zk://h1:p1,h2:p2/chroot. Run it with /usr/bin/python3: Debian's
python3-kazoo belongs to the system interpreter.
"""
import sys
import time

from kazoo.client import KazooClient


def main():
    mode, uri, path, seconds, hold_ms, out = sys.argv[1:7]
    assert mode == "worker", mode
    rest = uri[len("zk://"):] if uri.startswith("zk://") else uri
    hosts, _, chroot = rest.partition("/")
    zk = KazooClient(hosts=hosts + ("/" + chroot if chroot else ""), timeout=10.0)
    zk.start(timeout=20)
    lock = zk.Lock(path)
    end = time.monotonic_ns() + int(seconds) * 1_000_000_000
    hold = int(hold_ms) / 1000.0
    rows = []
    while time.monotonic_ns() < end:
        started = time.monotonic_ns()
        lock.acquire()
        acquired = time.monotonic_ns()
        time.sleep(hold)
        released = time.monotonic_ns()
        lock.release()
        rows.append((started, acquired, released))
    with open(out, "w") as f:
        for s, a, r in rows:
            f.write(f"{s} {a} {r}\n")
    zk.stop()
    zk.close()


if __name__ == "__main__":
    main()
