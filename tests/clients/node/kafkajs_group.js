#!/usr/bin/env node
// kafkajs_group.js: one long-lived kafkajs 2.2.4 consumer-group member for odradek's group interop
// tests. Arguments, stdout events and the "stop" line on stdin follow the contract written down in
// tests/support/group_member.py.
//
// kafkajs has no revocation callback: each GROUP_JOIN event carries the member's whole new
// assignment, and "revoked"/"assigned" events are derived from the difference. It has no
// generation id in its events either (gen is -1). Only its own assignors exist (round robin by
// default); --assignor is ignored. --instance-id is not supported by kafkajs (no static membership).
'use strict';
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';
const { Kafka, logLevel } = require('kafkajs');
const readline = require('readline');

const opts = {};
const argv = process.argv.slice(2);
for (let i = 0; i + 1 < argv.length; i += 2) opts[argv[i]] = argv[i + 1];
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const topic = opts['--topic'];
const session = parseInt(opts['--session-timeout-ms'] || '6000', 10);

const kafka = new Kafka({
  clientId: opts['--client-id'] || 'member',
  brokers: opts['--bootstrap'].split(','),
  connectionTimeout: 5000,
  requestTimeout: 30000,
  retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 },
  logLevel: logLevel.WARN,
  logCreator: () => ({ namespace, label, log }) => {
    const { message, ...extra } = log;
    process.stderr.write(`[kafkajs ${label} ${namespace}] ${message} ${JSON.stringify(extra)}\n`);
  },
});

async function main() {
  const consumer = kafka.consumer({
    groupId: opts['--group'],
    sessionTimeout: session, rebalanceTimeout: session,
    heartbeatInterval: parseInt(opts['--heartbeat-ms'] || '1000', 10),
    maxWaitTimeInMs: 200, allowAutoTopicCreation: false,
  });
  let all = new Set();
  const sorted = (s) => [...s].sort((a, b) => a - b);
  consumer.on(consumer.events.GROUP_JOIN, (ev) => {
    const now = new Set((ev.payload.memberAssignment || {})[topic] || []);
    const revoked = sorted([...all].filter((p) => !now.has(p)));
    const added = sorted([...now].filter((p) => !all.has(p)));
    all = now;
    if (revoked.length) out({ ev: 'revoked', partitions: revoked, all: sorted(all), gen: -1 });
    out({ ev: 'assigned', partitions: added, all: sorted(all), gen: -1 });
  });
  let crashed = null;
  let finish;
  const done = new Promise((res) => { finish = res; });
  consumer.on(consumer.events.CRASH, (ev) => { crashed = ev.payload.error; finish(); });
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', (l) => { if (l.trim() === 'stop') finish(); });
  rl.on('close', () => finish());

  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: true,
    eachBatch: async ({ batch }) => {
      if (!batch.messages.length) return;
      const last = batch.messages[batch.messages.length - 1];
      try {
        await consumer.commitOffsets([{ topic, partition: batch.partition, offset: String(Number(last.offset) + 1) }]);
      } catch (e) {
        out({ ev: 'commit_failed', message: String(e) });
        throw e;  // kafkajs rejoins and re-reads from the committed offset
      }
      out({ ev: 'records', records: batch.messages.map((m) => [batch.partition, Number(m.offset), m.value.toString('utf8')]) });
    },
  });
  await done;
  await consumer.disconnect();
  if (crashed) {
    out({ ev: 'error', message: String(crashed) });
    process.exitCode = 1;
  } else {
    out({ ev: 'closed' });
  }
}

main().catch((e) => {
  out({ ev: 'error', message: String(e && e.stack || e) });
  process.exitCode = 1;
}).finally(() => setTimeout(() => process.exit(), 50));
