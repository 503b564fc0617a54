import {
  type JobPlace,
  jobKeyOf,
  jobTenant,
  queueNameRoom,
  stepOwnerOf,
  tenantFits,
  tenantProblem,
} from './job-key.js';
import { type JobLike } from './job-like.js';

const job = (fields: Partial<JobLike>): JobLike => ({
  id: '7',
  name: 'payout',
  data: { orderId: 'o-1' },
  queueName: 'payouts',
  timestamp: 1_700_000_000_000,
  opts: {},
  moveToDelayed: () => Promise.resolve(),
  ...fields,
});
const byOrder = (of: JobLike) => (of.data as { orderId?: unknown }).orderId as string;

describe('jobKeyOf', () => {
  it.each([
    [
      'an id BullMQ counted: with the time it was added',
      job({}),
      undefined,
      { kind: 'key', key: '7@1700000000000', derived: false },
    ],
    [
      'an id of the app’s own: as it is',
      job({ id: 'payout-o-1', opts: { jobId: 'payout-o-1' } }),
      undefined,
      { kind: 'key', key: 'payout-o-1', derived: false },
    ],
    ['the app’s key, from the data', job({}), byOrder, { kind: 'key', key: 'o-1', derived: true }],
    [
      'a numeric key, as written',
      job({ data: { orderId: 42 } }),
      byOrder,
      { kind: 'key', key: '42', derived: true },
    ],
    [
      'no id at all',
      job({ id: undefined }),
      undefined,
      { kind: 'unusable', reason: 'the job has no id' },
    ],
    [
      'the app’s key gives none',
      job({ data: {} }),
      byOrder,
      { kind: 'unusable', reason: 'key(job) gave no key' },
    ],
    [
      'a key over 255 characters',
      job({ data: { orderId: 'x'.repeat(256) } }),
      byOrder,
      { kind: 'unusable', reason: 'its key is over 255 characters' },
    ],
    [
      'a key with a NUL',
      job({ data: { orderId: 'a\u0000b' } }),
      byOrder,
      { kind: 'unusable', reason: 'its key holds a NUL character' },
    ],
    [
      'a key with a lone surrogate',
      job({ data: { orderId: 'a\ud800' } }),
      byOrder,
      { kind: 'unusable', reason: 'its key holds a lone surrogate (not Unicode)' },
    ],
    [
      'a key of 255 emoji (255 characters, 510 code units)',
      job({ data: { orderId: '📦'.repeat(255) } }),
      byOrder,
      { kind: 'key', key: '📦'.repeat(255), derived: true },
    ],
    [
      'a key of 256 emoji',
      job({ data: { orderId: '📦'.repeat(256) } }),
      byOrder,
      { kind: 'unusable', reason: 'its key is over 255 characters' },
    ],
    [
      'the app’s key, the job’s own id (its steps’ owner) with a NUL',
      job({ id: 'p\u00001', opts: { jobId: 'p\u00001' } }),
      byOrder,
      { kind: 'unusable', reason: 'its id holds a NUL character' },
    ],
    [
      'the app’s key, the job’s own id with a lone surrogate',
      job({ id: 'p\udc001', opts: { jobId: 'p\udc001' } }),
      byOrder,
      { kind: 'unusable', reason: 'its id holds a lone surrogate (not Unicode)' },
    ],
    [
      'the job’s own id with a NUL, as its key',
      job({ id: 'p\u00001', opts: { jobId: 'p\u00001' } }),
      undefined,
      { kind: 'unusable', reason: 'its key holds a NUL character' },
    ],
  ] as const)('%s', (_name, given, key, reading) => {
    expect(jobKeyOf(given, key)).toEqual(reading);
  });

  it.each([
    ['a queue under the default prefix', 'payouts', undefined, 'bullmq:payouts'],
    ["BullMQ's default prefix named", 'payouts', 'bull', 'bullmq:payouts'],
    [
      'the same queue name under a prefix of its own: another queue',
      'payouts',
      'svc-a',
      'bullmq:svc-a:payouts',
    ],
    [
      'a prefix with a colon (a Redis cluster hash tag)',
      'payouts',
      '{svc}:b',
      'bullmq:{svc}:b:payouts',
    ],
  ] as const)('keeps keys per queue: %s', (_name, queue, prefix, tenant) => {
    expect(jobTenant(queue, prefix)).toBe(tenant);
  });

  it.each([
    ['database 0: as before', 'payouts', undefined, 0, 'bullmq:payouts'],
    ['database 0 under a prefix: as before', 'payouts', 'svc-a', 0, 'bullmq:svc-a:payouts'],
    ['another database: another queue', 'payouts', undefined, 4, 'bullmq:payouts:db4:'],
    ['a prefix and a database', 'payouts', 'svc-a', 4, 'bullmq:svc-a:payouts:db4:'],
    // Not the queue `db4` under the prefix `payouts` on database 0 (`bullmq:payouts:db4`).
    ['a queue named like the database', 'db4', 'payouts', 0, 'bullmq:payouts:db4'],
  ] as const)('keeps keys per Redis database: %s', (_name, queue, prefix, db, tenant) => {
    expect(jobTenant(queue, prefix, db)).toBe(tenant);
  });

  it.each([
    [
      'a schema of BullMQ’s PostgreSQL backend',
      'emails',
      '',
      { kind: 'postgres', schema: 'svc_a' },
      'bullmq:svc_a:emails:pg:',
    ],
    [
      'another schema: another queue',
      'emails',
      '',
      { kind: 'postgres', schema: 'svc_b' },
      'bullmq:svc_b:emails:pg:',
    ],
    [
      'a prefix there is ignored (BullMQ ignores it)',
      'emails',
      'svc',
      { kind: 'postgres', schema: 'bullmq' },
      'bullmq:bullmq:emails:pg:',
    ],
    [
      'GLIDE’s databaseId, as any Redis database',
      'emails',
      undefined,
      { kind: 'redis', db: 2 },
      'bullmq:emails:db2:',
    ],
    [
      'Redis’ database 0 as a place: as before',
      'emails',
      undefined,
      { kind: 'redis', db: 0 },
      'bullmq:emails',
    ],
  ] as const)('keeps keys per place: %s', (_name, queue, prefix, place, tenant) => {
    expect(jobTenant(queue, prefix, place)).toBe(tenant);
  });

  it.each([
    ['a namespace on database 0: as before', 'emails', undefined, 0, 'bullmq:billing:emails:ns:'],
    ['a namespace and a prefix', 'emails', 'svc', 0, 'bullmq:billing:svc:emails:ns:'],
    [
      'a namespace where the place cannot be read: namespace and queue',
      'emails',
      undefined,
      { kind: 'unreadable' },
      'bullmq:billing:emails:ns:',
    ],
    [
      'a namespace, a prefix, an unreadable place',
      'emails',
      'svc',
      { kind: 'unreadable' },
      'bullmq:billing:svc:emails:ns:',
    ],
    [
      'a namespace on database 2: the database kept (adversary 94)',
      'invoices',
      undefined,
      { kind: 'redis', db: 2 },
      'bullmq:billing:invoices:db2::ns:',
    ],
    [
      'a namespace on database 3: another queue',
      'invoices',
      undefined,
      3,
      'bullmq:billing:invoices:db3::ns:',
    ],
    [
      'a namespace, a prefix, database 3',
      'invoices',
      'svc',
      3,
      'bullmq:billing:svc:invoices:db3::ns:',
    ],
    [
      'a namespace in a schema of BullMQ’s PostgreSQL backend: the schema kept',
      'emails',
      'svc',
      { kind: 'postgres', schema: 'svc_a' },
      'bullmq:billing:svc_a:emails:pg::ns:',
    ],
  ] as const)('keeps what it read under a namespace: %s', (_name, queue, prefix, place, tenant) => {
    expect(jobTenant(queue, prefix, place, 'billing')).toBe(tenant);
  });

  it('gives no tenant to an unreadable place without a namespace (the job is refused before)', () => {
    expect(() => jobTenant('emails', undefined, { kind: 'unreadable' })).toThrow(TypeError);
  });

  it('no two places meet, whatever the names (each form ends its own way)', () => {
    const tenants = [
      jobTenant('pg', 'emails', 4), // bullmq:emails:pg:db4:
      jobTenant('emails', undefined, { kind: 'postgres', schema: 'db4' }),
      jobTenant('db4', 'emails:pg'),
      jobTenant('emails', 'db4', { kind: 'postgres', schema: 'x' }),
      jobTenant('emails', undefined, 0, 'db4'),
      jobTenant('ns', 'db4:emails'),
      jobTenant('emails', 'x:ns', 0),
      jobTenant('emails', undefined, { kind: 'postgres', schema: 'x:ns' }),
      jobTenant('emails', undefined, 0, 'x'),
      jobTenant('emails', '', 0, 'x'),
    ];
    expect(new Set(tenants).size).toBe(tenants.length);
  });

  /** Names chosen to mimic the other forms' parts and endings. */
  const QUEUES = ['emails', 'db4', 'pg', 'ns', 'x', 'db0'];
  const PREFIXES = [undefined, 'bull', '', 'x', 'db4', 'x:ns', 'emails:pg', 'x:emails', 'pg:'];
  const PLACES: JobPlace[] = [
    0,
    4,
    { kind: 'redis', db: 40 },
    { kind: 'postgres', schema: 'x' },
    { kind: 'postgres', schema: 'db4' },
    { kind: 'postgres', schema: 'x:ns' },
    { kind: 'postgres', schema: 'emails' },
    { kind: 'unreadable' },
  ];
  const NAMESPACES = [undefined, 'x', 'db4', 'emails', 'ns', 'pg'];

  /** What tells two queues apart: the database read (the unreadable place on its own). */
  const placeOf = (place: JobPlace) =>
    typeof place === 'number' ? `redis:${place}` : JSON.stringify(place);

  it('no two forms meet: every queue, prefix, place and namespace gets its own tenant', () => {
    const owners = new Map<string, string>();
    for (const queue of QUEUES) {
      for (const prefix of PREFIXES) {
        for (const place of PLACES) {
          for (const namespace of NAMESPACES) {
            if (typeof place === 'object' && place.kind === 'unreadable' && !namespace) continue;
            // BullMQ's own prefix is no prefix; the PostgreSQL backend ignores any prefix.
            const kept = prefix ?? 'bull';
            const pg = typeof place === 'object' && place.kind === 'postgres';
            const samePrefix = pg ? '-' : kept;
            // Database 0 and an unreadable place are one under a namespace (the app's word).
            const where =
              placeOf(place) === 'redis:0' || placeOf(place) === '{"kind":"unreadable"}'
                ? 'ns-bare'
                : placeOf(place);
            const owner = JSON.stringify([queue, samePrefix, where, namespace ?? null]);
            const tenant = jobTenant(queue, prefix, place, namespace);
            const before = owners.get(tenant);
            if (before !== undefined) expect({ tenant, owner }).toEqual({ tenant, owner: before });
            owners.set(tenant, owner);
          }
        }
      }
    }
    expect(owners.size).toBeGreaterThan(1000);
  });
});

describe('tenantFits', () => {
  it.each([
    ['a short queue', jobTenant('payouts'), true],
    ['a 247-character tenant (240-character queue)', jobTenant('c'.repeat(240)), true],
    ['exactly 255 characters', jobTenant('q'.repeat(248)), true],
    ['256 characters', jobTenant('q'.repeat(249)), false],
    ['a long queue name', jobTenant('q'.repeat(250)), false],
    ['a long prefix of the queue', jobTenant('payouts', 'p'.repeat(250)), false],
    // Characters as the CHECK's length() counts them: an emoji is one, not two code units.
    ['248 emoji (255 characters, 503 code units)', jobTenant('📦'.repeat(248)), true],
    ['249 emoji (256 characters)', jobTenant('📦'.repeat(249)), false],
    ['130 emoji and -a (139 characters)', jobTenant('📦'.repeat(130) + '-a'), true],
    [
      '248 characters on database 2: its ending counts',
      jobTenant('q'.repeat(248), 'bull', 2),
      false,
    ],
    ['243 characters on database 2 (255)', jobTenant('q'.repeat(243), 'bull', 2), true],
    ['248 characters under a namespace', jobTenant('q'.repeat(248), 'bull', 0, 'b'), false],
    [
      '248 characters in a schema of BullMQ’s PostgreSQL backend',
      jobTenant('q'.repeat(248), '', { kind: 'postgres', schema: 'bullmq' }),
      false,
    ],
  ])('%s', (_name, tenant, fits) => {
    expect(tenantFits(tenant)).toBe(fits);
  });

  it.each([
    ['BullMQ’s prefix on database 0', undefined, 0, undefined, 248],
    ['a prefix of its own (svc:)', 'svc', 0, undefined, 244],
    ['database 2 (:db2:)', undefined, 2, undefined, 243],
    ['database 12 (:db12:)', undefined, 12, undefined, 242],
    ['a schema (bullmq: … :pg:)', 'svc', { kind: 'postgres', schema: 'bullmq' }, undefined, 237],
    ['a namespace (billing: … :ns:)', undefined, 0, 'billing', 236],
    ['a namespace on database 2', undefined, 2, 'billing', 231],
    ['where it cannot be read, a namespace', 'svc', { kind: 'unreadable' }, 'billing', 232],
  ] as const)(
    'queueNameRoom: the longest queue name that fits, %s',
    (_name, prefix, place, namespace, room) => {
      expect(queueNameRoom(jobTenant('q', prefix, place, namespace), 'q')).toBe(room);
      expect(tenantFits(jobTenant('q'.repeat(room), prefix, place, namespace))).toBe(true);
      expect(tenantFits(jobTenant('q'.repeat(room + 1), prefix, place, namespace))).toBe(false);
      // In characters, whatever the name is written in.
      expect(queueNameRoom(jobTenant('📦', prefix, place, namespace), '📦')).toBe(room);
      expect(tenantFits(jobTenant('📦'.repeat(room), prefix, place, namespace))).toBe(true);
      expect(tenantFits(jobTenant('📦'.repeat(room + 1), prefix, place, namespace))).toBe(false);
    },
  );

  it.each([
    ['a plain queue', jobTenant('mail-eu'), undefined],
    ['an emoji queue', jobTenant('📦'), undefined],
    ['a NUL in the queue name', jobTenant('mail\u0000eu'), 'holds a NUL character'],
    ['a NUL in the prefix', jobTenant('mail', 'svc\u0000'), 'holds a NUL character'],
    [
      'a lone surrogate in the queue name',
      jobTenant('mail\ud800'),
      'holds a lone surrogate (not Unicode)',
    ],
    [
      'a lone surrogate in a schema',
      jobTenant('mail', '', { kind: 'postgres', schema: 's\udfff' }),
      'holds a lone surrogate (not Unicode)',
    ],
  ] as const)('tenantProblem: %s', (_name, tenant, problem) => {
    expect(tenantProblem(tenant)).toBe(problem);
  });
});

describe('stepOwnerOf', () => {
  const job = (opts?: { jobId?: string }) =>
    ({
      id: opts?.jobId ?? '7',
      name: 'n',
      data: {},
      queueName: 'q',
      timestamp: 100,
      opts,
    }) as never;
  it.each([
    [
      'the app’s own id, the key: the id (added again, the same job)',
      job({ jobId: 'order-7' }),
      false,
      'id:order-7',
    ],
    ['a counted id: the job with its time', job(), false, '7@100'],
    ['a key of the app’s: the job itself', job({ jobId: 'order-7' }), true, 'order-7@100'],
  ])('%s', (_name, given, derived, owner) => {
    expect(stepOwnerOf(given, derived)).toBe(owner);
  });
});
