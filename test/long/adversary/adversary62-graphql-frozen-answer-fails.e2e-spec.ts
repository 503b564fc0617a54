import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 62: a mutation whose value is frozen (an immutable value object,
 * `Object.freeze(this)` in its constructor; anything Immer produced, deeply frozen by default;
 * `Object.freeze({ ... })` of a DTO) fails under `@Idempotent()` as soon as one of its
 * selected fields is a list that is no array (a `ReadonlySet`, which GraphQL takes as any
 * iterable), a Promise, or its own getter: the mutation's work is rolled back and a final
 * error is stored, replayed to every retry. Without the library, and before 846930c, it
 * answers.
 *
 * The app (Apollo on Express, Mercurius on Fastify; the pool seam):
 *
 *   @ObjectType() class Shipment {
 *     @Field(() => Int) readonly id: number;
 *     @Field(() => [String]) readonly tags: ReadonlySet<string>;
 *     constructor(id, tags) { this.id = id; this.tags = new Set(tags); Object.freeze(this); }
 *   }
 *   @Mutation(() => Shipment) @Idempotent() ship(...) { INSERT ...; return new Shipment(...) }
 *
 * What happens: `outputWire` reads `tags` into an array (`materialized`), and, since 846930c,
 * the first answer is `over(source, replaced)` (lib/graphql/wire-value.ts, `over`): a copy made
 * with `Object.defineProperties(value, Object.getOwnPropertyDescriptors(source))`, which
 * copies the frozen source's properties as they are, non-writable and non-configurable; then
 * `Object.defineProperty(value, 'tags', { ..., configurable: true })` over that
 * non-configurable property throws `TypeError: Cannot redefine property: tags`. The throw is
 * inside `settle` (lib/graphql/run-field.ts:100-128), whose catch takes it for an answer with
 * no JSON form: `failed()` rolls the shipment back and stores the TypeError as the final
 * answer. Every retry replays "Cannot redefine property: tags"; the client can never ship with
 * that key. The same with a frozen value's own Promise field (`readonly label:
 * Promise<string>`, replaced since 846930c) and a frozen literal's own getter
 * (`Object.freeze({ id, get label() {...} })`). Before 846930c, `over` made
 * `Object.create(source)` and defined the list on that fresh object, which worked.
 *
 * Expected: "The first call gets the resolver's own value" and "A list GraphQL takes as any
 * iterable: a generator or a `Map`'s `values()` is read once, and the first answer is given
 * the list that was read and stored (the resolver's value itself is not changed)"; a field
 * that is a Promise "is awaited and its value stored, as GraphQL awaits it"
 * (docs/guides/graphql.md, "What is stored, and replayed"). The shipment is made once, the
 * answer has its tags, and the replay is that answer with the marker.
 *
 * Control: the same Shipment not frozen (same Set, same Promise, same getter): one row, the
 * answer, the replay equal to it with the marker. Passes on both drivers.
 *
 * Severity: high (a mutation that works without the library fails under it, for good: its work
 * rolled back and a final error stored for the key; nothing in the log but the error).
 *
 * Fixed: the first answer is the resolver's value seen through a Proxy (`over`,
 * lib/graphql/wire-value.ts), never a copy; a field it holds frozen is given as it holds it.
 */
let pool: Pool;

@ObjectType()
class Shipment {
  @Field(() => Int)
  readonly id: number;

  @Field(() => [String])
  readonly tags: ReadonlySet<string>;

  @Field(() => String)
  readonly label: Promise<string>;

  constructor(id: number, tags: string[], frozen: boolean) {
    this.id = id;
    this.tags = new Set(tags);
    this.label = Promise.resolve(`shipment ${id}`);
    if (frozen) Object.freeze(this);
  }
}

@ObjectType()
class Parcel {
  @Field(() => Int)
  id!: number;

  @Field(() => String)
  label!: string;
}

async function insert(ref: string): Promise<number> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO shipments (ref) VALUES ($1) RETURNING id',
    [ref],
  );
  return rows[0].id;
}

@Resolver()
class ShipmentsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Shipment)
  @Idempotent()
  async ship(@Args('ref') ref: string, @Args('frozen') frozen: boolean): Promise<Shipment> {
    return new Shipment(await insert(ref), ['fragile', 'express'], frozen);
  }

  /** A literal with a getter of its own, frozen or not. */
  @Mutation(() => Parcel)
  @Idempotent()
  async pack(@Args('ref') ref: string, @Args('frozen') frozen: boolean): Promise<Parcel> {
    const id = await insert(ref);
    const parcel = {
      id,
      get label() {
        return `parcel ${id}`;
      },
    };
    return frozen ? Object.freeze(parcel) : parcel;
  }
}

function graphqlModule(driver: GraphqlDriverName) {
  return driver === 'apollo'
    ? GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
        graphiql: false,
      })
    : GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
      });
}

describe.each(GRAPHQL_DRIVERS)('adversary 62: a frozen mutation value, on %s', (driver) => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        graphqlModule(driver),
      ],
      providers: [ShipmentsResolver],
    })
    class ShipmentsModule {}
    fixture = await startPoolApp(`adv62_frozen_${driver}`, {
      module: ShipmentsModule,
      adapter: driver === 'apollo' ? 'express' : 'fastify',
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query('CREATE TABLE shipments (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const send = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .timeout(5_000)
      .send({ query });
  const rows = async (ref: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM shipments WHERE ref = $1', [ref])).rows[0]
        .count,
    );
  const replayedAs = (first: { body: object }, field: string) => ({
    ...first.body,
    extensions: { idempotency: { replayed: [field] } },
  });

  const shipped = (ref: string, frozen: boolean) =>
    `mutation { ship(ref: "${ref}", frozen: ${frozen}) { id tags label } }`;
  const packed = (ref: string, frozen: boolean) =>
    `mutation { pack(ref: "${ref}", frozen: ${frozen}) { id label } }`;

  it('control: not frozen (a Set, a Promise, a getter): answered, once, replayed', async () => {
    for (const [field, query, ref] of [
      ['ship', shipped(`${driver}-ctl-ship`, false), `${driver}-ctl-ship`],
      ['pack', packed(`${driver}-ctl-pack`, false), `${driver}-ctl-pack`],
    ] as const) {
      const first = await send(ref, query);
      const replay = await send(ref, query);
      expect(first.body).toEqual({
        data: {
          [field]: expect.objectContaining({ id: expect.any(Number), label: expect.any(String) }),
        },
      });
      expect(replay.body).toEqual(replayedAs(first, field));
      expect(await rows(ref)).toBe(1);
    }
  });

  it('a frozen value object with a Set and a Promise field: answered, once, replayed', async () => {
    const ref = `${driver}-frozen-ship`;
    const first = await send(ref, shipped(ref, true));
    const replay = await send(ref, shipped(ref, true));
    expect(first.body).toEqual({
      data: {
        ship: {
          id: expect.any(Number),
          tags: ['fragile', 'express'],
          label: expect.stringContaining('shipment'),
        },
      },
    });
    expect(replay.body).toEqual(replayedAs(first, 'ship'));
    expect(await rows(ref)).toBe(1);
  });

  it('a frozen literal with a getter of its own: answered, once, replayed', async () => {
    const ref = `${driver}-frozen-pack`;
    const first = await send(ref, packed(ref, true));
    const replay = await send(ref, packed(ref, true));
    expect(first.body).toEqual({
      data: { pack: { id: expect.any(Number), label: expect.stringContaining('parcel') } },
    });
    expect(replay.body).toEqual(replayedAs(first, 'pack'));
    expect(await rows(ref)).toBe(1);
  });
});
