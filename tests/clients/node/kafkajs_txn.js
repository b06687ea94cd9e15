#!/usr/bin/env node
// kafkajs_txn.js: kafkajs 2.2.4 transactions for odradek's transaction tests, with the `script`
// command of tests/clients/java/TxnCli.java (same input, same output lines):
//
//   node kafkajs_txn.js --bootstrap HOST:PORT [--timeout-ms T] [--transaction-timeout-ms T] script TOPIC
//   stdin: JSON lines {"op": init|begin|send|flush|commit|abort|sleep|close, "p": NAME, ...}
//   -> {"i", "op", "ok": true} or {"i", "op", "error": NAME, "message"} per operation.
//
// kafkajs's shape of the same steps: kafkajs has no initTransactions(); its first
// producer.transaction() sends the transactional InitProducerId (connect() only gets an
// idempotent producer id for non-transactional sends). So "init" is connect() plus one empty
// transaction begun and aborted (an abort with no partitions added sends nothing), which makes
// "init" fence an older producer when Java's initTransactions() would. "begin" is
// producer.transaction(); "send" awaits the produce response (kafkajs has no background
// sender), so "flush" has nothing left to wait for.
'use strict';
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';
const { Kafka, logLevel } = require('kafkajs');
const readline = require('readline');

const argv = process.argv.slice(2);
const opts = {}, pos = [];
for (let i = 0; i < argv.length; i++) {
  if (argv[i].startsWith('--')) opts[argv[i]] = argv[++i]; else pos.push(argv[i]);
}
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const timeoutMs = parseInt(opts['--timeout-ms'] || '10000', 10);
const txnTimeoutMs = parseInt(opts['--transaction-timeout-ms'] || '60000', 10);

const kafka = new Kafka({
  clientId: 'odradek-kafkajs-txn',
  brokers: opts['--bootstrap'].split(','),
  connectionTimeout: Math.min(timeoutMs, 5000),
  requestTimeout: Math.max(timeoutMs, 1000),
  retry: { retries: 2, initialRetryTime: 100, maxRetryTime: 1000 },
  logLevel: logLevel.WARN,
  logCreator: () => ({ namespace, label, log }) => {
    const { message, ...extra } = log;
    process.stderr.write(`[kafkajs ${label} ${namespace}] ${message} ${JSON.stringify(extra)}\n`);
  },
});

function errorName(e) {
  let cur = e;
  for (let i = 0; i < 8 && cur; i++) {
    if (cur.type && typeof cur.type === 'string') return cur.type;
    if (cur.errors && cur.errors.length) { cur = cur.errors[0]; continue; }
    if (cur.originalError) { cur = cur.originalError; continue; }
    if (cur.cause) { cur = cur.cause; continue; }
    break;
  }
  return (cur && cur.name) || (e && e.name) || 'Error';
}

async function script(topic) {
  const producers = {}, txns = {};
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  let i = 0;
  try {
    for await (const line of lines) {
      if (!line.trim()) continue;
      const m = JSON.parse(line);
      try {
        const p = producers[m.p];
        switch (m.op) {
          case 'init': {
            const np = kafka.producer({
              transactionalId: m.transactional_id, idempotent: true, maxInFlightRequests: 1,
              transactionTimeout: txnTimeoutMs,
            });
            producers[m.p] = np;
            await np.connect();
            await (await np.transaction()).abort();
            break;
          }
          case 'begin': txns[m.p] = await p.transaction(); break;
          case 'send':
            await txns[m.p].send({ topic, acks: -1, timeout: timeoutMs,
              messages: [{ partition: m.partition, value: Buffer.from(m.value, 'base64') }] });
            break;
          case 'flush': break;
          case 'commit': await txns[m.p].commit(); break;
          case 'abort': await txns[m.p].abort(); break;
          case 'sleep': await new Promise((r) => setTimeout(r, m.ms)); break;
          case 'close': await p.disconnect(); delete producers[m.p]; break;
          default: throw new Error('unknown op ' + m.op);
        }
        out({ i, op: m.op, ok: true });
      } catch (e) {
        out({ i, op: m.op, error: errorName(e), message: String((e && e.message) || e), kafkajs: e && e.name });
      }
      i++;
    }
  } finally {
    for (const p of Object.values(producers)) await p.disconnect().catch(() => {});
  }
}

const deadline = parseInt(opts['--deadline-ms'] || String(timeoutMs * 3 + 60000), 10);
setTimeout(() => { out({ error: 'WatchdogTimeout', message: `no end within ${deadline} ms` }); process.exit(3); }, deadline).unref();
const exitAfterFlush = (code) => process.stdout.write('', () => process.exit(code));
(pos[0] === 'script' ? script(pos[1]) : Promise.reject(new Error('unknown command ' + pos[0]))).then(
  () => exitAfterFlush(0),
  (e) => { out({ error: errorName(e), message: String((e && e.message) || e) }); exitAfterFlush(1); },
);
