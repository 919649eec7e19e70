#!/usr/bin/python3
"""One contender in dlock_bench_etcd's hand-off comparison, using
python-etcd3's Lock (Debian python3-etcd3, run with Debian's /usr/bin/python3).

    etcd3_lock_peer.py HOST:PORT NAME SECONDS HOLD_US OUT

Each acquisition appends "acquired_ns released_ns" (wall clock) to OUT; the
critical section sleeps HOLD_US.

python-etcd3 0.12 with Debian's tenacity 8.2 crashes inside a contended
Lock.acquire() (its retry-wait callback has the old signature), so this does
the library's own retry step by hand: one attempt (acquire(timeout=0), which
stops before the broken wait), then, as the library would, watch_once on the
lock key until it changes. Every waiter watches the same key: on each
release all of them wake and race (a herd), and each attempt grants a new
lease, as the library does.
"""
import sys
import time

import etcd3
from etcd3 import exceptions


def main():
    if len(sys.argv) != 6:
        sys.exit("usage: etcd3_lock_peer.py HOST:PORT NAME SECONDS HOLD_US OUT")
    host, port = sys.argv[1].rsplit(":", 1)
    name, seconds, hold = sys.argv[2], float(sys.argv[3]), int(sys.argv[4]) / 1e6
    client = etcd3.client(host=host, port=int(port))
    lock = client.lock(name, ttl=10)
    lines = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        acquired = False
        while time.monotonic() < end:
            if lock.acquire(timeout=0):
                acquired = True
                break
            try:
                # The library waits here with what is left of its timeout.
                client.watch_once(lock.key, timeout=max(0.01, end - time.monotonic()))
            except exceptions.WatchTimedOut:
                pass
        if not acquired:
            break
        acquired = time.time_ns()
        time.sleep(hold)
        released = time.time_ns()
        lock.release()
        lines.append("%d %d\n" % (acquired, released))
    with open(sys.argv[5], "a") as out:
        out.writelines(lines)


if __name__ == "__main__":
    main()
