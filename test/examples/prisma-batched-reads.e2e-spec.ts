import { type INestApplication } from '@nestjs/common';
import { Client } from 'pg';
import { PrismaBatchingUnknownError } from '../../lib/index.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import {
  type LeaveBody,
  migrateOnCall,
  type OwnReadBody,
  type ReadForm,
  startOnCallApp,
} from './support/prisma-on-call/on-call.app.js';

/**
 * Prisma batches the `findUnique` and `findUniqueOrThrow` calls made in one tick (and runs
 * every call of that tick that it queues, array `$transaction`s too, from a `process.nextTick`
 * of the first caller). Requests whose handlers read at the same moment (as the handlers of one
 * claim batch do) must still read in their own transactions: an app on Prisma 7 with
 * `@prisma/adapter-pg` on the library's pool, real concurrent HTTP requests, real PostgreSQL.
 */
const PROBLEM = /^application\/problem\+json/;

let database: TestDatabase;
let db: Client;
let app: INestApplication;
let base: string;
let n = 0;
const tag = (label: string) => `${label}-${++n}-${Date.now()}`;

beforeAll(async () => {
  database = await createTestDatabase('prisma_batched_reads');
  await migrateOnCall(database.url);
  db = new Client({ connectionString: database.url });
  await db.connect();
  ({ app, base } = await startOnCallApp(database.url, Boolean(process.env.TEST_LOGS)));
});
afterAll(async () => {
  await app?.close();
  await db?.end();
  await database?.drop();
});

async function post(path: string, key: string, body: object) {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return {
    status: res.status,
    headers: res.headers,
    body: JSON.parse(text) as Record<string, unknown>,
  };
}

/** A shift of two doctors, both on call. */
async function shiftOfTwo(shift: string): Promise<[number, number]> {
  const { rows } = await db.query<{ id: number }>(
    `INSERT INTO doctors (shift, name, on_call) VALUES ($1, 'alice', true), ($1, 'bob', true)
     RETURNING id`,
    [shift],
  );
  return [rows[0].id, rows[1].id];
}
const onCall = async (shift: string) =>
  Number(
    (
      await db.query<{ n: string }>(
        'SELECT count(*) AS n FROM doctors WHERE shift = $1 AND on_call',
        [shift],
      )
    ).rows[0].n,
  );

describe('Prisma batched reads on the pool seam', () => {
  it.each<ReadForm>(['findUnique', 'findFirst'])(
    'SERIALIZABLE, "at least one doctor on call", both doctors leave at once reading with %s: one leaves, the other gets 503 database_transient and its retry stays',
    async (read) => {
      const shift = tag(`leave-${read}`);
      const [alice, bob] = await shiftOfTwo(shift);
      const bodies: LeaveBody[] = [
        { shift, doctorId: alice, otherId: bob, read },
        { shift, doctorId: bob, otherId: alice, read },
      ];
      const answers = await Promise.all(
        bodies.map((body, i) => post('/on-call/leave', `${shift}-${i}`, body)),
      );
      // "At least one on call" holds: one left, the other was refused.
      expect(await onCall(shift)).toBe(1);
      expect(answers.map((res) => res.status).sort()).toEqual([201, 503]);
      const left = answers.findIndex((res) => res.status === 201);
      expect(answers[left].body).toEqual({ left: true });
      const refused = answers[1 - left];
      expect(refused.headers.get('content-type')).toMatch(PROBLEM);
      expect(refused.headers.get('retry-after')).toBe('1');
      expect(refused.body.code).toBe('database_transient');
      // The retry (its partner gone: it passes the meeting point at once) reads the other
      // doctor off call, and stays.
      const retry = await post('/on-call/leave', `${shift}-${1 - left}`, bodies[1 - left]);
      expect(retry.status).toBe(201);
      expect(retry.body).toEqual({ left: false });
      expect(await onCall(shift)).toBe(1);
    },
  );

  it.each<[string, ReadForm[]]>([
    ['findUnique', ['findUnique', 'findUnique', 'findUnique', 'findUnique']],
    ['findUniqueOrThrow', ['findUniqueOrThrow', 'findUniqueOrThrow', 'findUniqueOrThrow']],
    ['array $transaction', ['array', 'array', 'array']],
    ['interactive $transaction', ['interactive', 'interactive', 'interactive']],
    ['mixed forms', ['findUnique', 'array', 'findUniqueOrThrow', 'interactive', 'findFirst']],
  ])(
    'each of concurrent requests reading with %s in one tick reads in its own transaction (finds the row it wrote, uncommitted)',
    async (_label, forms) => {
      const group = tag('own-read');
      const answers = await Promise.all(
        forms.map((read, i) => {
          const body: OwnReadBody = { group, of: forms.length, name: `doctor-${i}`, read };
          return post('/on-call/own-read', `${group}-${i}`, body);
        }),
      );
      expect(answers.map((res) => [res.status, res.body])).toEqual(
        forms.map(() => [201, { found: true }]),
      );
      const { rows } = await db.query('SELECT 1 FROM doctors WHERE shift = $1', [group]);
      expect(rows).toHaveLength(forms.length);
    },
  );
});

describe('a Prisma client whose batching the library does not know', () => {
  it('refuses to start, naming the client (PrismaBatchingUnknownError)', async () => {
    const fn = () => undefined;
    // A Prisma client's public methods, and no DataLoader: another major version's internals.
    const legacy = { $connect: fn, $transaction: fn, $extends: fn };
    const outcome = await startOnCallApp(database.url, false, [
      { provide: 'LEGACY_PRISMA', useValue: legacy },
    ]).then(
      ({ app: started }) => started.close().then(() => 'started'),
      (error: unknown) => error,
    );
    expect(outcome).toBeInstanceOf(PrismaBatchingUnknownError);
    expect((outcome as Error).message).toMatch(
      /^Prisma client LEGACY_PRISMA: its query batching \(findUnique, findUniqueOrThrow, \$transaction\(\[\.\.\.\]\) calls made in one tick, sent as one batch\) is not the one the library knows/,
    );
  });
});
