import { PrismaPg } from '@prisma/adapter-pg';
import { keepPrismaBatchesPerRequest } from '../../lib/index.js';
import { prismaBatchingOf } from '../../lib/data-layers/prisma/prisma-batching.js';
import { transactionScope } from '../../lib/transaction/transaction-scope.js';
import { PrismaClient } from './support/prisma-on-call/generated/client.js';

/**
 * Prisma's own DataLoader class (from a generated Prisma 7 client, never connected), made to
 * batch per scope by keepPrismaBatchesPerRequest(), with loaders that record what each batch
 * held and in which scope it was sent. No database: what the suite
 * prisma-batched-reads.e2e-spec.ts shows on one, here call by call.
 */
interface Call {
  id: string;
  /** Prisma's batch key (findUnique's shape, a transaction's id); undefined: not batched. */
  hash?: string;
}
interface Sent {
  ids: string[];
  /** The scope the batch was sent in: where the pool seam would place its statements. */
  scope: string;
}

const client = new PrismaClient({
  adapter: new PrismaPg({ connectionString: 'postgres://unused@127.0.0.1:1/none' }),
});
keepPrismaBatchesPerRequest(client);
const batching = prismaBatchingOf(client);
if (batching.kind !== 'loader') throw new Error('no DataLoader in the Prisma client');
type LoaderClass = new (options: object) => { request(call: Call): Promise<unknown> };
const DataLoader = batching.loader.constructor as LoaderClass;

const scopes = new Map<string, object>();
const scopeOf = (name: string) => {
  if (!scopes.has(name)) scopes.set(name, { name });
  return scopes.get(name)!;
};
const current = () => (transactionScope.getStore() as { name?: string } | undefined)?.name ?? '-';

async function send(calls: [scope: string, call: Call][]): Promise<Sent[]> {
  const sent: Sent[] = [];
  const loader = new DataLoader({
    batchBy: (call: Call) => call.hash,
    batchOrder: () => 0,
    singleLoader: (call: Call) => {
      sent.push({ ids: [call.id], scope: current() });
      return Promise.resolve(call.id);
    },
    batchLoader: (batch: Call[]) => {
      sent.push({ ids: batch.map((call) => call.id), scope: current() });
      return Promise.resolve(batch.map((call) => call.id));
    },
  });
  // All made in one tick, each in its scope ('-': outside any).
  const answers = calls.map(([scope, call]) =>
    scope === '-'
      ? loader.request(call)
      : transactionScope.run(scopeOf(scope), () => loader.request(call)),
  );
  expect(await Promise.all(answers)).toEqual(calls.map(([, call]) => call.id));
  return sent;
}

const unique = (id: string): Call => ({ id, hash: 'Doctor(id)' });

describe('Prisma batches per transaction scope', () => {
  it.each<[string, [string, Call][], Sent[]]>([
    [
      "two requests' findUnique in one tick: a batch each, sent in its own request",
      [
        ['a', unique('a1')],
        ['b', unique('b1')],
      ],
      [
        { ids: ['a1'], scope: 'a' },
        { ids: ['b1'], scope: 'b' },
      ],
    ],
    [
      "one request's findUnique calls still go in one batch",
      [
        ['a', unique('a1')],
        ['a', unique('a2')],
        ['b', unique('b1')],
        ['a', unique('a3')],
      ],
      [
        { ids: ['a1', 'a2', 'a3'], scope: 'a' },
        { ids: ['b1'], scope: 'b' },
      ],
    ],
    [
      "another request's array $transaction queued in the tick: sent in its own request",
      [
        ['a', unique('a1')],
        ['b', { id: 'b-tx-0', hash: 'transaction-7' }],
        ['b', { id: 'b-tx-1', hash: 'transaction-7' }],
      ],
      [
        { ids: ['a1'], scope: 'a' },
        { ids: ['b-tx-0', 'b-tx-1'], scope: 'b' },
      ],
    ],
    [
      'outside any request: batched together, sent outside',
      [
        ['-', unique('o1')],
        ['a', unique('a1')],
        ['-', unique('o2')],
      ],
      [
        { ids: ['o1', 'o2'], scope: '-' },
        { ids: ['a1'], scope: 'a' },
      ],
    ],
    [
      'a call Prisma does not batch: sent at once, in its caller',
      [
        ['a', unique('a1')],
        ['b', { id: 'b-find-first' }],
      ],
      [
        { ids: ['b-find-first'], scope: 'b' },
        { ids: ['a1'], scope: 'a' },
      ],
    ],
  ])('%s', async (_label, calls, expected) => {
    expect(await send(calls)).toEqual(expected);
  });

  it("an $extends result and the client share one DataLoader: kept per scope with the client's", () => {
    const extended = prismaBatchingOf(client.$extends({}));
    expect(extended).toEqual({ kind: 'loader', loader: batching.loader });
  });

  it('refuses what is not a Prisma client', () => {
    expect(() => keepPrismaBatchesPerRequest({})).toThrow(
      'keepPrismaBatchesPerRequest() takes a Prisma client',
    );
  });
});
