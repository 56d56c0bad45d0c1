#!/usr/bin/env node
// An application of the cluster, written with a real etcd client library nobody here wrote: the
// npm `etcd3` package (gRPC over TLS, @grpc/grpc-js), as an application would use it, through the
// stack's one endpoint (the load balancer) with a certificate from `etcd-asg client-cert`.
// tests/e2e/test_clients.py starts it; each command prints one JSON line per thing that happened
// ({"event": ...}) and, at the end, a summary ({"summary": ...}).
//
//   node app.js COMMAND --endpoint https://LB:2379 --certs DIR --user USER --prefix /app/ [--stop FILE]
//
// Commands:
//   workload  puts, gets and transactions (each key written once, never retried under the same
//             name), a lease kept alive and one left to expire, a watch of the writes from the
//             revision before the first; until --stop exists, then waits for the watch to catch up
//   hold      takes a lock and wins an election (both on a lease of --ttl seconds), says so, and
//             keeps them until killed
//   take      waits for the same lock and election; says how long each took
//   follow    writes a few keys, watches them from the next revision, then every half second
//             puts and reads back a key, until --stop exists; reports the watch's errors (a
//             restore that moved the revision forward ends it: "compacted"), re-lists and watches
//             again from the listing's revision, as an application should
'use strict';

const fs = require('fs');
const path = require('path');
const { Etcd3 } = require('etcd3');

function options(argv) {
  const out = { command: argv[0] };
  for (let i = 1; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || argv[i + 1] === undefined) {
      throw new Error(`bad argument ${argv[i]}`);
    }
    out[argv[i].slice(2)] = argv[i + 1];
  }
  for (const need of ['endpoint', 'certs', 'user', 'prefix']) {
    if (!out[need]) throw new Error(`--${need} is required`);
  }
  return out;
}

function say(obj) {
  process.stdout.write(`${JSON.stringify({ t: Date.now() / 1000, ...obj })}\n`);
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

// A read an application must get, tried again for up to 30 s as one would: right after the
// cluster changed, the library's circuit breaker can be open for a few seconds
// ("Execution prevented because the circuit breaker is open") before it lets a call through.
async function insist(read) {
  const deadline = Date.now() + 30000;
  for (;;) {
    try {
      return await read();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await sleep(500);
    }
  }
}

function connect(o) {
  const file = name => fs.readFileSync(path.join(o.certs, name));
  return new Etcd3({
    hosts: o.endpoint,
    credentials: {
      rootCertificate: file('ca.crt'),
      certChain: file(`${o.user}.crt`),
      privateKey: file(`${o.user}.key`),
    },
    // A call waits at most this long, as an application would set (the library's default is none).
    defaultCallOptions: () => ({ deadline: new Date(Date.now() + 3000) }),
  });
}

// A watched key with its prefix, whether or not the library strips the namespace's.
const full = (o, key) => (key.toString().startsWith(o.prefix) ? key.toString() : o.prefix + key.toString());

const stopped = o => o.stop && fs.existsSync(o.stop);

async function workload(o) {
  const client = connect(o);
  const ns = client.namespace(o.prefix);
  const keep = ns.lease(Number(o['keep-ttl'] || 10));
  const lostKeep = [];
  keep.on('lost', err => { lostKeep.push(String(err)); say({ event: 'lease lost', error: String(err) }); });
  await keep.put('alive').value('kept');
  const expire = ns.lease(Number(o['expire-ttl'] || 3), { autoKeepAlive: false });
  await expire.put('expiring').value('left to expire');
  const expireId = (await expire.grant()).toString();
  // The revision before the first write: the watch starts at the next one.
  const before = Number((await ns.put('w/start').value('-').exec()).header.revision);
  const events = [];
  const watchErrors = [];
  let reconnects = 0;
  const watcher = await ns.watch().prefix('w/').startRevision(String(before + 1)).create();
  let last = before;
  watcher.on('put', kv => {
    events.push([full(o, kv.key), Number(kv.mod_revision)]);
    last = Number(kv.mod_revision);
  });
  watcher.on('disconnected', () => {
    reconnects += 1;
    // npm etcd3 1.1.2 resumes from the header revision of the last response it got (a created
    // response's included), not from the last event's, so a stream that breaks again before a
    // catch-up arrives skips events (seen here under load: six writes). etcd's own Go client
    // resumes from the last event + 1; so does this application, by setting the request the
    // library re-sends (its watch.js: updateRevision, and `request.start_revision`).
    watcher.request.start_revision = String(last + 1);
  });
  watcher.on('error', err => { watchErrors.push(String(err)); say({ event: 'watch error', error: String(err) }); });
  say({ event: 'running', before, expiringLease: expireId });

  const acked = [];
  const uncertain = [];
  const readMismatch = [];
  let failures = 0;
  let lastError = '';
  for (let n = 0; !stopped(o); n += 1) {
    const key = `w/${String(n).padStart(8, '0')}`;
    try {
      if (n % 2 === 0) {
        await ns.put(key).value(String(n));
      } else {
        // A transaction: create the key only if it does not exist yet.
        const r = await ns.if(key, 'Create', '==', 0).then(ns.put(key).value(String(n))).commit();
        if (!r.succeeded) throw new Error(`transaction on ${key} found it existing`);
      }
      acked.push(o.prefix + key);
      if (n % 10 === 0) {
        const got = await ns.get(key).string();
        if (got !== String(n)) readMismatch.push([key, got]);
      }
      if (acked.length % 100 === 0) say({ event: 'progress', acked: acked.length, failures });
    } catch (err) {
      // The outcome is unknown (it may have been applied): the key is never written again.
      uncertain.push(o.prefix + key);
      failures += 1;
      lastError = String(err);
      await sleep(100);
    }
    await sleep(20);
  }
  // The watch catches up with every acknowledged write (or 60 s pass: after the last leader
  // move its stream may still be reconnecting through the load balancer, backing off; once 20 s
  // were too few for the last write's event).
  const want = new Set(acked);
  for (let i = 0; i < 600 && events.filter(([k]) => want.has(k)).length < want.size; i += 1) {
    await sleep(100);
  }
  const alive = await insist(() => ns.get('alive').string());
  const expiring = await insist(() => ns.get('expiring').string());
  say({
    summary: {
      acked, uncertain, events, watchErrors, reconnects, readMismatch, failures, lastError,
      alive, expiring, lostKeep, keepState: keep.revoked() ? 'revoked' : 'live',
    },
  });
  watcher.cancel();
  keep.revoke().catch(() => undefined);
  client.close();
}

async function hold(o) {
  const client = connect(o);
  const ns = client.namespace(o.prefix);
  const ttl = Number(o.ttl || 5);
  await ns.lock('lock').ttl(ttl).acquire();
  const campaign = ns.election('election', ttl).campaign('holder');
  await new Promise((resolve, reject) => { campaign.on('elected', resolve); campaign.on('error', reject); });
  say({ event: 'held' });
  for (;;) await sleep(1000); // until killed
}

async function take(o) {
  const client = connect(o);
  const ns = client.namespace(o.prefix);
  const ttl = Number(o.ttl || 5);
  const began = Date.now();
  say({ event: 'waiting' });
  let lockAfter = null;
  let electedAfter = null;
  const campaign = ns.election('election', ttl).campaign('taker');
  campaign.on('elected', () => { electedAfter = (Date.now() - began) / 1000; });
  campaign.on('error', err => say({ event: 'campaign error', error: String(err) }));
  const deadline = began + Number(o.timeout || 60) * 1000;
  while (Date.now() < deadline && (lockAfter === null || electedAfter === null)) {
    if (lockAfter === null) {
      try {
        await ns.lock('lock').ttl(ttl).acquire();
        lockAfter = (Date.now() - began) / 1000;
      } catch (err) {
        if (!/Failed to acquire/.test(String(err))) say({ event: 'lock error', error: String(err) });
      }
    }
    await sleep(100);
  }
  say({ summary: { lockAfter, electedAfter } });
  client.close();
  process.exit(0);
}

async function follow(o) {
  const client = connect(o);
  const ns = client.namespace(o.prefix);
  let last = 0;
  for (let n = 0; n < 5; n += 1) {
    last = Number((await ns.put(`f/${n}`).value(String(n)).exec()).header.revision);
  }
  const watchErrors = [];
  const seen = [];
  const relisted = [];
  const watchFrom = async revision => {
    const watcher = await ns.watch().prefix('f/').startRevision(String(revision)).create();
    watcher.on('put', kv => seen.push([full(o, kv.key), Number(kv.mod_revision)]));
    watcher.on('connected', res => say({ event: 'watch connected', revision: Number(res.header.revision) }));
    watcher.on('error', async err => {
      // The watch ended (etcd canceled it: after a restore that moved the revision forward,
      // "compacted"). What an application does then: list again, and watch from the listing.
      watchErrors.push(String(err));
      say({ event: 'watch error', error: String(err) });
      for (;;) {
        try {
          const listed = await ns.getAll().prefix('f/').exec();
          const at = Number(listed.header.revision);
          relisted.push(at);
          say({ event: 'relisted', revision: at, keys: listed.kvs.length });
          await watchFrom(at + 1);
          return;
        } catch (e) {
          await sleep(500);
        }
      }
    });
  };
  await watchFrom(last + 1);
  say({ event: 'running', revision: last });
  const rounds = [];
  for (let n = 0; !stopped(o); n += 1) {
    const key = `f/ping-${String(n).padStart(6, '0')}`;
    try {
      const rev = Number((await ns.put(key).value(String(n)).exec()).header.revision);
      const got = await ns.get(key).string();
      rounds.push({ t: Date.now() / 1000, ok: got === String(n), revision: rev });
    } catch (err) {
      rounds.push({ t: Date.now() / 1000, ok: false, error: String(err) });
    }
    say({ event: 'round', ...rounds[rounds.length - 1] });
    await sleep(500);
  }
  say({ summary: { revision: last, watchErrors, relisted, seen, rounds } });
  client.close();
}

async function main() {
  const o = options(process.argv.slice(2));
  const commands = { workload, hold, take, follow };
  if (!commands[o.command]) throw new Error(`unknown command ${o.command}`);
  await commands[o.command](o);
}

main().then(
  () => process.exit(0),
  err => { say({ event: 'failed', error: String(err && err.stack || err) }); process.exit(1); },
);
