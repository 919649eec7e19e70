// One contender for bench/redis_bench.cc, using node redlock@4 on ioredis:
//   node contend.js URI KEY START_NS END_NS CS_US OUT_FILE
// Waits until START_NS (CLOCK_MONOTONIC, as process.hrtime), then until
// END_NS: lock KEY (ttl 10 s), hold it CS_US microseconds, unlock. Writes one
// line per grant: "requested_ns granted_ns release_started_ns released_ns".
// Retries every ~1 ms (retryDelay 1, retryJitter 1; the library default of
// 200 ms starves waiters worse), forever (retryCount -1).
'use strict';
const fs = require('fs');
const Redis = require('ioredis');
const Redlock = require('redlock');

const [uri, key, startArg, endArg, csArg, out] = process.argv.slice(2);
const start = BigInt(startArg);
const end = BigInt(endArg);
const csNs = BigInt(csArg) * 1000n;
const now = () => process.hrtime.bigint();
const sleepUntil = (t) => new Promise((resolve) => {
  const left = Number(t - now()) / 1e6;
  if (left <= 0) return resolve();
  setTimeout(resolve, left);
});
// A critical section of CS_US: a timer for most of it, then a short spin, as
// precise as the C++ and Python contenders.
async function hold(ns) {
  const until = now() + ns;
  if (ns > 2000000n) await sleepUntil(until - 1000000n);
  while (now() < until) { /* spin */ }
}

async function main() {
  const client = new Redis(uri, { enableOfflineQueue: true, lazyConnect: false });
  const redlock = new Redlock([client], {
    driftFactor: 0.01, retryCount: -1, retryDelay: 1, retryJitter: 1,
  });
  redlock.on('clientError', () => {});
  await client.ping();
  const lines = [];
  await sleepUntil(start);
  while (now() < end) {
    const requested = now();
    const lock = await redlock.lock(key, 10000);
    const granted = now();
    await hold(csNs);
    const releasing = now();
    await lock.unlock();
    const released = now();
    lines.push(`${requested} ${granted} ${releasing} ${released}`);
  }
  fs.writeFileSync(out, lines.join('\n') + (lines.length ? '\n' : ''));
  client.disconnect();
}

main().catch((e) => {
  process.stderr.write(`node redlock contender: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
