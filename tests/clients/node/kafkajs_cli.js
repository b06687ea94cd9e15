#!/usr/bin/env node
// kafkajs_cli.js: kafkajs 2.2.4 driven from the command line for odradek's interop tests.
// Same commands, options and output contract as tests/clients/java/KafkaCli.java:
//   stdout = JSON lines only (kafkajs logs go to stderr); keys, values and header values are
//   base64 strings, null for null; headers are [[name, b64|null], ...].
//   On error the last line is {"error": NAME, "message": ...} and the exit code is 1 (2 = usage).
//   NAME is the Kafka error code name when kafkajs has one (e.g. MESSAGE_TOO_LARGE,
//   OFFSET_OUT_OF_RANGE), else the kafkajs error class (KafkaJSTimeout, ...).
//
//   node kafkajs_cli.js --bootstrap HOST:PORT [--timeout-ms T] COMMAND ARGS...
//   create-topic NAME PARTITIONS [k=v ...] [--replication-factor N] | list-topics | describe-topic NAME
//   delete-topic NAME | produce TOPIC [--acks -1|0|1] [--compression-type none|gzip]
//       [--enable-idempotence true|false]   (stdin: JSON lines {key, value, headers, partition, timestamp})
//   consume TOPIC [--from-beginning] [--max N] [--group G] [--assign 0,1] [--offset N]
//   offsets-for-times TOPIC TS | end-offsets TOPIC | beginning-offsets TOPIC
//
// kafkajs limits, by design of the library:
//   * compression: only gzip is built in (lz4/snappy/zstd need codec plugins we do not ship);
//     other values are refused with {"error": "Unsupported"}.
//   * consumers always belong to a group: without --group a throw-away group id is used and
//     nothing is committed; --assign is emulated by filtering the partitions the group gets.
//   * headers are a JS object: duplicate header names are grouped together (order between
//     different names is kept, interleaving of duplicates is not). Null header values are refused.
//   * the partition of each record is chosen here with kafkajs's DefaultPartitioner (murmur2,
//     Java-compatible) so that per-record offsets can be reported.
'use strict';
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';
const { Kafka, logLevel, CompressionTypes, Partitioners } = require('kafkajs');
const readline = require('readline');

const FLAGS = new Set(['--from-beginning']);
function parseArgs(argv) {
  const pos = [], opts = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a.startsWith('--')) {
      const eq = a.indexOf('=');
      if (eq > 0) opts[a.slice(0, eq)] = a.slice(eq + 1);
      else if (FLAGS.has(a)) opts[a] = 'true';
      else {
        if (i + 1 >= argv.length) throw usage('missing value for ' + a);
        opts[a] = argv[++i];
      }
    } else pos.push(a);
  }
  return { pos, opts };
}
function usage(m) { const e = new Error(m); e.usage = true; return e; }
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const b64e = (b) => (b === null || b === undefined ? null : Buffer.from(b).toString('base64'));
const b64d = (s) => (s === null || s === undefined ? null : Buffer.from(s, 'base64'));

const { pos, opts } = (() => { try { return parseArgs(process.argv.slice(2)); } catch (e) { return { pos: [], opts: {}, err: e }; } })();
const timeoutMs = parseInt(opts['--timeout-ms'] || '10000', 10);
const bootstrap = opts['--bootstrap'] || process.env.KAFKA_BOOTSTRAP;

const stderrLogger = () => ({ namespace, level, label, log }) => {
  const { message, ...extra } = log;
  process.stderr.write(`[kafkajs ${label} ${namespace}] ${message} ${JSON.stringify(extra)}\n`);
};
const kafka = bootstrap && new Kafka({
  clientId: 'odradek-kafkajs-cli',
  brokers: bootstrap.split(','),
  connectionTimeout: Math.min(timeoutMs, 5000),
  requestTimeout: Math.max(timeoutMs, 1000),
  retry: { retries: 2, initialRetryTime: 100, maxRetryTime: 1000 },
  logLevel: logLevel.WARN,
  logCreator: stderrLogger,
  // --ssl-ca FILE: SSL; with --ssl-cert and --ssl-key (PEM files): mutual TLS
  ssl: opts['--ssl-ca'] ? {
    ca: [require('fs').readFileSync(opts['--ssl-ca'])],
    ...(opts['--ssl-cert'] ? { cert: require('fs').readFileSync(opts['--ssl-cert']), key: require('fs').readFileSync(opts['--ssl-key']) } : {}),
  } : undefined,
  // --sasl-mechanism plain|scram-sha-256|scram-sha-512 --sasl-username U --sasl-password P
  sasl: opts['--sasl-mechanism'] ? {
    mechanism: opts['--sasl-mechanism'], username: opts['--sasl-username'], password: opts['--sasl-password'],
  } : undefined,
});

function arg(i, what) {
  if (i >= pos.length) throw usage('missing argument: ' + what);
  return pos[i];
}

async function withAdmin(fn) {
  const admin = kafka.admin();
  await admin.connect();
  try { return await fn(admin); } finally { await admin.disconnect(); }
}

async function partitionsOf(admin, topic) {
  const md = await admin.fetchTopicMetadata({ topics: [topic] });
  return md.topics[0].partitions.map((p) => p.partitionId).sort((a, b) => a - b);
}

async function readStdinJsonLines() {
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  const recs = [];
  for await (const line of rl) if (line.trim()) recs.push(JSON.parse(line));
  return recs;
}

const commands = {
  async 'create-topic'() {
    const name = arg(1, 'topic'), parts = parseInt(arg(2, 'partitions'), 10);
    const configEntries = pos.slice(3).map((kv) => {
      const eq = kv.indexOf('=');
      if (eq <= 0) throw usage('topic config wants key=value: ' + kv);
      return { name: kv.slice(0, eq), value: kv.slice(eq + 1) };
    });
    const rf = parseInt(opts['--replication-factor'] || '1', 10);
    const created = await withAdmin((a) => a.createTopics({
      topics: [{ topic: name, numPartitions: parts, replicationFactor: rf, configEntries }],
      waitForLeaders: true, timeout: timeoutMs,
    }));
    // kafkajs swallows TOPIC_ALREADY_EXISTS and returns false instead.
    if (!created) { const e = new Error(`Topic '${name}' already exists`); e.type = 'TOPIC_ALREADY_EXISTS'; throw e; }
    out({ topic: name, created: true });
  },
  async 'list-topics'() {
    const topics = await withAdmin((a) => a.listTopics());
    out({ topics: topics.sort() });
  },
  async 'describe-topic'() {
    const name = arg(1, 'topic');
    const md = await withAdmin((a) => a.fetchTopicMetadata({ topics: [name] }));
    const t = md.topics[0];
    out({
      topic: name,
      partitions: t.partitions.sort((a, b) => a.partitionId - b.partitionId).map((p) => ({
        partition: p.partitionId, leader: p.leader, replicas: p.replicas, isr: p.isr,
      })),
    });
  },
  async 'delete-topic'() {
    const name = arg(1, 'topic');
    await withAdmin((a) => a.deleteTopics({ topics: [name], timeout: timeoutMs }));
    out({ topic: name, deleted: true });
  },
  async 'offsets-for-times'() {
    const topic = arg(1, 'topic'), ts = arg(2, 'timestamp');
    const res = await withAdmin((a) => a.fetchTopicOffsetsByTimestamp(topic, Number(ts)));
    for (const r of res.sort((a, b) => a.partition - b.partition)) {
      const off = Number(r.offset);
      out({ partition: r.partition, offset: off < 0 ? null : off, timestamp: null });
    }
  },
  async 'end-offsets'() {
    const res = await withAdmin((a) => a.fetchTopicOffsets(arg(1, 'topic')));
    for (const r of res.sort((a, b) => a.partition - b.partition)) out({ partition: r.partition, offset: Number(r.high) });
  },
  async 'beginning-offsets'() {
    const res = await withAdmin((a) => a.fetchTopicOffsets(arg(1, 'topic')));
    for (const r of res.sort((a, b) => a.partition - b.partition)) out({ partition: r.partition, offset: Number(r.low) });
  },

  async produce() {
    const topic = arg(1, 'topic');
    const ctype = opts['--compression-type'] || 'none';
    const codecs = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP };
    if (!(ctype in codecs)) {
      const e = new Error(`kafkajs has no built-in ${ctype} codec (only gzip)`); e.name = 'Unsupported'; throw e;
    }
    const recs = await readStdinJsonLines();
    const idempotent = opts['--enable-idempotence'] === 'true';
    let acks = parseInt(opts['--acks'] || '-1', 10);
    if (opts['--acks'] === 'all') acks = -1;
    const partitionMetadata = await withAdmin(async (a) => {
      const md = await a.fetchTopicMetadata({ topics: [topic] });
      return md.topics[0].partitions;
    });
    const partitioner = Partitioners.DefaultPartitioner();
    const messages = recs.map((r) => {
      const headers = {};
      for (const [k, v] of r.headers || []) {
        if (v === null) { const e = new Error('kafkajs cannot send null header values'); e.name = 'Unsupported'; throw e; }
        const b = b64d(v);
        if (k in headers) headers[k] = [].concat(headers[k], [b]); else headers[k] = b;
      }
      const m = { key: b64d(r.key), value: b64d(r.value), headers };
      if (r.timestamp !== null && r.timestamp !== undefined) m.timestamp = String(r.timestamp);
      m.partition = r.partition !== null && r.partition !== undefined
        ? r.partition : partitioner({ topic, partitionMetadata, message: m });
      return m;
    });
    const producer = kafka.producer({ idempotent, maxInFlightRequests: idempotent ? 1 : undefined, allowAutoTopicCreation: true });
    await producer.connect();
    try {
      const res = await producer.send({ topic, messages, acks, timeout: timeoutMs, compression: codecs[ctype] });
      const base = {};
      for (const r of res) base[r.partition] = { next: Number(r.baseOffset), ts: r.logAppendTime };
      for (const m of messages) {
        const b = base[m.partition];
        const lat = Number(b.ts);
        out({ partition: m.partition, offset: b.next++, timestamp: lat >= 0 ? lat : (m.timestamp ? Number(m.timestamp) : null) });
      }
    } finally {
      await producer.disconnect();
    }
  },

  async consume() {
    const topic = arg(1, 'topic');
    const max = parseInt(opts['--max'] || '2147483647', 10);
    const group = opts['--group'];
    const fromBeginning = '--from-beginning' in opts;
    const assign = opts['--assign'] ? new Set(opts['--assign'].split(',').filter(Boolean).map((s) => parseInt(s.replace(/^p/, ''), 10))) : null;
    const consumer = kafka.consumer({
      groupId: group || `odradek-kafkajs-${process.pid}-${Date.now()}`,
      sessionTimeout: 6000, rebalanceTimeout: 6000, heartbeatInterval: 1000,
      maxWaitTimeInMs: 500, allowAutoTopicCreation: false,
      readUncommitted: opts['--isolation'] === 'read_uncommitted',
      retry: { retries: 2 },
    });
    let count = 0, failed = null;
    // With --offset, kafkajs can only seek once run() has started, and may hand over messages
    // fetched from the group's start position before that: drop them (seek() discards stale
    // in-flight batches itself).
    let seeked = !opts['--offset'];
    const commit = [];
    let finish;
    const done = new Promise((res) => { finish = res; });
    consumer.on(consumer.events.CRASH, (ev) => { failed = ev.payload.error; finish(); });
    await consumer.connect();
    try {
      await consumer.subscribe({ topics: [topic], fromBeginning });
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: true,
        eachMessage: async ({ partition, message }) => {
          if (count >= max) return;
          if (!seeked) return;
          if (assign && !assign.has(partition)) return;
          const hs = [];
          for (const [k, v] of Object.entries(message.headers || {})) {
            for (const x of Array.isArray(v) ? v : [v]) hs.push([k, b64e(x)]);
          }
          out({
            partition, offset: Number(message.offset), key: b64e(message.key), value: b64e(message.value),
            headers: hs, timestamp: Number(message.timestamp), timestampType: null,
          });
          commit.push({ topic, partition, offset: String(Number(message.offset) + 1) });
          if (++count >= max) finish();
        },
      });
      if (opts['--offset']) {
        const parts = await withAdmin((a) => partitionsOf(a, topic));
        for (const p of parts) if (!assign || assign.has(p)) consumer.seek({ topic, partition: p, offset: opts['--offset'] });
        seeked = true;
      }
      const timer = setTimeout(finish, timeoutMs);
      await done;
      clearTimeout(timer);
      if (failed) throw failed;
      if (group && commit.length) {
        const last = {};
        for (const c of commit) last[c.partition] = c;
        await consumer.commitOffsets(Object.values(last));
      }
    } finally {
      await consumer.disconnect();
    }
    process.stderr.write(`consumed ${count} records\n`);
  },
};

function errorName(e) {
  // Unwrap retry/aggregate wrappers down to the protocol error.
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

async function main() {
  if (!bootstrap) throw usage('--bootstrap HOST:PORT is required');
  const cmd = arg(0, 'command');
  if (!commands[cmd]) throw usage('unknown command ' + cmd);
  await commands[cmd]();
}

const deadline = parseInt(opts['--deadline-ms'] || String(timeoutMs * 3 + 20000), 10);
const watchdog = setTimeout(() => {
  out({ error: 'WatchdogTimeout', message: `kafkajs_cli did not finish within ${deadline} ms` });
  process.exit(3);
}, deadline);
watchdog.unref();

// process.exit() drops stdout still queued for a pipe: exit once it has drained.
const exitAfterFlush = (code) => process.stdout.write('', () => process.exit(code));

main().then(() => exitAfterFlush(0), (e) => {
  if (e && e.usage) { out({ error: 'Usage', message: e.message }); exitAfterFlush(2); return; }
  out({ error: errorName(e), message: String((e && e.message) || e), kafkajs: e && e.name });
  exitAfterFlush(1);
});
