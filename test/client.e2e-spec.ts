import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  idempotentFetch,
  IdempotentRequestError,
  MemoryOperationStore,
} from '../lib/client/index.js';
import { FileOperationStore } from '../lib/client/file-operation-store.js';
import { type Scenario, startScenario } from './support/scenario.js';
import { ADAPTERS } from './support/test-app.js';
import { compiled } from './support/worker-process.js';

/** What the flaky server does with one request: drop the connection, or answer. */
type Behaviour = 'drop' | { status: number; headers?: Record<string, string>; body?: string };

interface Seen {
  key: string | undefined;
  body: string;
  at: number;
}

/**
 * A real HTTP server that misbehaves as scripted, request by request, and records what each
 * attempt carried. After the script it answers with the last behaviour.
 */
function flakyServer() {
  let script: Behaviour[] = [];
  const seen: Seen[] = [];
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      seen.push({
        key: req.headers['idempotency-key'] as string | undefined,
        body,
        at: Date.now(),
      });
      const behaviour = script.length > 1 ? script.shift()! : script[0];
      if (behaviour === 'drop') {
        req.socket.destroy();
        return;
      }
      res.writeHead(behaviour.status, { 'content-type': 'application/json', ...behaviour.headers });
      res.end(behaviour.body ?? '{}');
    });
  });
  return {
    server,
    seen,
    play: (behaviours: Behaviour[]) => {
      script = [...behaviours];
      seen.length = 0;
    },
    url: () => `http://127.0.0.1:${(server.address() as AddressInfo).port}/charges`,
  };
}

describe('idempotentFetch against a real flaky server', () => {
  const flaky = flakyServer();
  const init = {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"amount":5}',
  };

  beforeAll(async () => {
    flaky.server.listen(0, '127.0.0.1');
    await once(flaky.server, 'listening');
  });
  afterAll(() => new Promise((resolve) => flaky.server.close(resolve)));

  it('retries a dropped connection, a 503 and a 409 under one key, waiting out Retry-After', async () => {
    flaky.play([
      'drop',
      { status: 503, headers: { 'retry-after': '0' } },
      { status: 409, headers: { 'retry-after': '1' } },
      { status: 201, body: '{"id":"ch_1"}' },
    ]);
    const store = new MemoryOperationStore();
    const response = await idempotentFetch(flaky.url(), init, {
      intent: 'pay-1',
      store,
      baseDelayMs: 20,
    });
    expect(response.status).toBe(201);
    expect(await response.json()).toEqual({ id: 'ch_1' });
    expect(flaky.seen).toHaveLength(4);
    const keys = new Set(flaky.seen.map(({ key }) => key));
    expect(keys.size).toBe(1);
    expect([...keys][0]).toMatch(/^[0-9a-f-]{36}$/);
    expect(flaky.seen.every(({ body }) => body === init.body)).toBe(true);
    expect(flaky.seen[3].at - flaky.seen[2].at).toBeGreaterThanOrEqual(1000);
    expect(await store.get('pay-1')).toBeUndefined(); // ended: forgotten
  });

  it.each([
    [422, {}],
    [400, {}],
    [404, {}],
    [500, { 'idempotent-replayed': 'true' }], // a stored 500, replayed
    [200, { 'idempotent-replayed': 'true' }],
  ])('stops at once on %s %j, an answer retrying cannot change', async (status, headers) => {
    flaky.play([{ status, headers }]);
    const response = await idempotentFetch(flaky.url(), init, { intent: `stop-${status}` });
    expect(response.status).toBe(status);
    expect(flaky.seen).toHaveLength(1);
  });

  it('gives up after its bound with the key in the error, and resumes with that key later', async () => {
    flaky.play([{ status: 503, headers: { 'retry-after': '0' } }]);
    const store = new MemoryOperationStore();
    const options = { intent: 'pay-2', store, maxAttempts: 3, baseDelayMs: 10 };
    const error = (await idempotentFetch(flaky.url(), init, options).catch(
      (caught: unknown) => caught,
    )) as IdempotentRequestError;
    expect(error).toBeInstanceOf(IdempotentRequestError);
    expect(error.attempts).toBe(3);
    expect(error.lastStatus).toBe(503);
    expect(flaky.seen.map(({ key }) => key)).toEqual([error.key, error.key, error.key]);
    expect(error.message).toContain(`reuse key ${error.key}`);

    flaky.play([{ status: 201 }]);
    const resumed = await idempotentFetch(flaky.url(), init, options);
    expect(resumed.status).toBe(201);
    expect(flaky.seen.map(({ key }) => key)).toEqual([error.key]);
  });

  it('gives two calls for one intent at once one key: a double click runs once', async () => {
    flaky.play([{ status: 201 }]);
    const store = new MemoryOperationStore();
    await Promise.all([
      idempotentFetch(flaky.url(), init, { intent: 'double-click', store }),
      idempotentFetch(flaky.url(), init, { intent: 'double-click', store }),
    ]);
    expect(flaky.seen).toHaveLength(2);
    expect(new Set(flaky.seen.map(({ key }) => key)).size).toBe(1);
  });

  it('lets the caller cancel: an aborted call is not retried', async () => {
    flaky.play([{ status: 503, headers: { 'retry-after': '2' } }]);
    const controller = new AbortController();
    const began = performance.now();
    const call = idempotentFetch(
      flaky.url(),
      { ...init, signal: controller.signal },
      { intent: 'cancelled' },
    );
    // The first attempt's 503 asks for 2 s; the abort lands during that wait.
    setTimeout(() => controller.abort(), 300);
    await expect(call).rejects.toBeDefined();
    expect(performance.now() - began).toBeLessThan(1900);
    expect(flaky.seen).toHaveLength(1);
  });

  it('keeps every key when several file stores on one file write at once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'idem-file-store-'));
    try {
      const path = join(dir, 'pending.json');
      await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          new FileOperationStore(path).set(`intent-${i}`, `key-${i}`),
        ),
      );
      const store = new FileOperationStore(path);
      for (let i = 0; i < 20; i++) expect(await store.get(`intent-${i}`)).toBe(`key-${i}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('gives the operation a new key for a new intent', async () => {
    flaky.play([{ status: 201 }]);
    await idempotentFetch(flaky.url(), init, { intent: 'a' });
    await idempotentFetch(flaky.url(), init, { intent: 'b' });
    expect(new Set(flaky.seen.map(({ key }) => key)).size).toBe(2);
  });

  it('resumes with the same key after the client process is killed between attempts', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'idem-client-'));
    const env = {
      ...process.env,
      URL: flaky.url(),
      INTENT: 'pay-3',
      STORE: join(dir, 'pending.json'),
    };
    try {
      // First life: a 503 that asks for 30 s, and the process is killed while it waits.
      flaky.play([{ status: 503, headers: { 'retry-after': '30' } }]);
      const first = spawn(process.execPath, [compiled('test/support/client-worker.js')], { env });
      while (flaky.seen.length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
      first.kill('SIGKILL');
      await once(first, 'exit');
      const kept = await new FileOperationStore(env.STORE).get('pay-3');
      expect(kept).toBe(flaky.seen[0].key);

      // Second life: the same intent, the same key, and the answer.
      flaky.play([{ status: 201 }]);
      const second = spawn(process.execPath, [compiled('test/support/client-worker.js')], { env });
      let out = '';
      second.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      await once(second, 'exit');
      expect(out.trim()).toBe('status 201');
      expect(flaky.seen.map(({ key }) => key)).toEqual([kept]);
      expect(await new FileOperationStore(env.STORE).get('pay-3')).toBeUndefined();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/**
 * The README's outer-timeout row, seen from the client: a global `timeout()` interceptor
 * answers 408 while the handler goes on in its transaction and commits. That 408 is not the
 * handler's answer and is not stored, so it must be asked again under the same key (409 until
 * the handler settles, then the replay), never ended on: a next call for the intent would send
 * a new key and run the handler a second time.
 */
describe.each(ADAPTERS)(
  'idempotentFetch through a real app with an outer timeout (%s)',
  (adapter) => {
    let s: Scenario;
    let url: string;

    beforeAll(async () => {
      s = await startScenario('client_timeout', adapter);
      const server = s.server() as Server;
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/timeout`;
    });
    afterAll(() => s?.close());

    it('asks again under the same key after a 408, and the handler runs once', async () => {
      const store = new MemoryOperationStore();
      const init = {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-tenant-id': '1' },
        // The outer timeout gives up after 200 ms; the handler takes 800 ms, then commits.
        body: JSON.stringify({ delayMs: 800 }),
      };
      const options = { intent: 'order-under-timeout', store, baseDelayMs: 50, maxDelayMs: 300 };
      // As an app would: an answer that is not the operation's (a 408) is asked again.
      const statuses: number[] = [];
      let response = await idempotentFetch(url, init, options);
      statuses.push(response.status);
      for (let call = 1; call < 3 && response.status === 408; call++) {
        await response.arrayBuffer();
        response = await idempotentFetch(url, init, options);
        statuses.push(response.status);
      }
      // Every handler started has settled by now (800 ms each, and 2 s more of margin).
      await new Promise((resolve) => setTimeout(resolve, 2000));
      const executions = await s.db.query<{ id: number }>(
        "SELECT id FROM side_effects WHERE route = 'timeout'",
      );
      const keys = await s.db.query("SELECT state FROM idempotency_keys WHERE tenant_id = '1'");
      expect({ executions: executions.rowCount, keys: keys.rowCount }).toEqual({
        executions: 1,
        keys: 1,
      });
      expect(statuses).toEqual([201]);
      expect(response.headers.get('idempotent-replayed')).toBe('true');
      expect(await response.json()).toEqual({ id: executions.rows[0].id });
      expect(keys.rows).toEqual([{ state: 'done' }]);
      expect(await store.get(options.intent)).toBeUndefined(); // ended: forgotten
    });
  },
);
