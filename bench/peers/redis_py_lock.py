#!/usr/bin/python3
"""One contender for bench/redis_bench.cc, using redis-py's Lock.

    /usr/bin/python3 redis_py_lock.py URI KEY START_NS END_NS CS_US OUT_FILE

Waits until START_NS (CLOCK_MONOTONIC, as time.monotonic_ns), then until
END_NS: acquire KEY (timeout 10 s), hold it CS_US microseconds, release.
Writes one line per grant: "requested_ns granted_ns release_started_ns
released_ns". Polls every 1 ms (sleep=0.001; the library default of 0.1 s
starves waiters worse). Debian's python3-redis belongs to /usr/bin/python3.
"""
import sys
import time

import redis


def hold(ns):
    until = time.monotonic_ns() + ns
    if ns > 2_000_000:
        time.sleep((ns - 1_000_000) / 1e9)
    while time.monotonic_ns() < until:
        pass


def main():
    uri, key, start, end, cs_us, out = sys.argv[1:7]
    start, end, cs_ns = int(start), int(end), int(cs_us) * 1000
    r = redis.Redis.from_url(uri)
    r.ping()
    lines = []
    left = (start - time.monotonic_ns()) / 1e9
    if left > 0:
        time.sleep(left)
    while time.monotonic_ns() < end:
        lock = r.lock(key, timeout=10, sleep=0.001)
        requested = time.monotonic_ns()
        lock.acquire(blocking=True)
        granted = time.monotonic_ns()
        hold(cs_ns)
        releasing = time.monotonic_ns()
        lock.release()
        released = time.monotonic_ns()
        lines.append(f"{requested} {granted} {releasing} {released}\n")
    with open(out, "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
