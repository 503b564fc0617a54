import { prismaBatchingOf } from './prisma-batching.js';

/** Prisma's DataLoader as it is: options with `batchBy`, `request` on its class. */
class DataLoader {
  constructor(readonly options: object) {}
  request(): Promise<unknown> {
    return Promise.resolve(undefined);
  }
}
const fn = () => undefined;
const client = (requestHandler: unknown) => ({
  $connect: fn,
  $transaction: fn,
  $extends: fn,
  _requestHandler: requestHandler,
});
const throwing = new Proxy(
  {},
  {
    get() {
      throw new Error('no such property');
    },
  },
);

describe('prismaBatchingOf', () => {
  it.each<[string, unknown, string]>([
    ['undefined: not-prisma', undefined, 'not-prisma'],
    ['a string: not-prisma', 'prisma', 'not-prisma'],
    ['a plain provider: not-prisma', { find: fn }, 'not-prisma'],
    ['a provider with one of the methods: not-prisma', { $transaction: fn }, 'not-prisma'],
    ['a proxy that throws on every property: not-prisma', throwing, 'not-prisma'],
    ['a client without a request handler: unknown', client(undefined), 'unknown'],
    ['a client whose handler has no DataLoader: unknown', client({}), 'unknown'],
    [
      'a client whose DataLoader has no batchBy: unknown',
      client({ dataloader: new DataLoader({}) }),
      'unknown',
    ],
    [
      'a client whose DataLoader is a plain object: unknown',
      client({ dataloader: { request: fn, options: { batchBy: fn } } }),
      'unknown',
    ],
    [
      "a client with Prisma's DataLoader: loader",
      client({ dataloader: new DataLoader({ batchBy: fn }) }),
      'loader',
    ],
  ])('%s', (_label, value, kind) => {
    expect(prismaBatchingOf(value).kind).toBe(kind);
  });

  it('hands back the DataLoader itself', () => {
    const dataloader = new DataLoader({ batchBy: fn });
    expect(prismaBatchingOf(client({ dataloader }))).toEqual({
      kind: 'loader',
      loader: dataloader,
    });
  });
});
