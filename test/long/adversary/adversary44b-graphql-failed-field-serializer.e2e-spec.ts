import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { ClassSerializerInterceptor, Module } from '@nestjs/common';
import { APP_INTERCEPTOR, Reflector } from '@nestjs/core';
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
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 44b: a field whose reading failed at the first call (a Promise that
 * rejected: a signed URL while the signing service is down) is null with its error at its
 * path in the first answer, but on a replay under Nest's global `ClassSerializerInterceptor`
 * the whole mutation fails: `data: null`, the committed card's id lost.
 *
 * The app (Apollo on Express, the pool seam): the serializer applied globally (Nest's recipe,
 * default strategy; round 43 made the library rebuild values for it). `issueCard(ref)` inserts
 * a card and returns `new Card(id, photoUrl)` whose `photoUrl` (nullable) is the signer's
 * Promise, as GraphQL allows (the guide's own example of a failing field: "a Promise that
 * rejects, as a signed URL's when the signing service is down"). The client selects
 * `{ id photoUrl }`.
 *
 * What happens: at the first call the serializer (outside `@Idempotent()`) copies the Promise
 * (class-transformer passes a Promise through as a Promise); GraphQL awaits it and answers
 * `{ id, photoUrl: null }` with the signer's error at `["issueCard","photoUrl"]`; the card
 * commits. The library stores the field's error under `__failed` (`outputWire`,
 * lib/graphql/wire-value.ts:236-251, 272). A replay's `fromWire` (wire-value.ts:491-504)
 * defines `photoUrl` as an ENUMERABLE own getter that throws the stored error when read, "so
 * it answers the same null and error at the same path". But the serializer reads every own
 * enumerable property before GraphQL does (`instanceToPlain`: `Object.keys`), so the getter
 * throws inside the interceptor, and the error is the mutation field's: `data: null`, the
 * error at `["issueCard"]`. Every retry of a mutation that committed is answered so (any
 * outer layer that copies the value, `{ ...card }` in an interceptor's `map`, does the same).
 *
 * Expected: the replay is the first answer (`{ id, photoUrl: null }` with the signer's error
 * at its path, plus the replay marker), one row.
 *
 * Control: the signer up: `photoUrl` is stored as its value, and the replay is the first
 * answer. Passes.
 *
 * Severity: critical (a committed mutation's answer, its id, is lost on every replay: the
 * client is told the mutation failed).
 */
let pool: Pool;

@ObjectType()
class Card {
  @Field(() => Int)
  id!: number;

  @Field(() => String, { nullable: true })
  photoUrl!: Promise<string>;

  constructor(id: number, photoUrl: Promise<string>) {
    this.id = id;
    this.photoUrl = photoUrl;
  }
}

/** The signing service: down for refs that say so. */
function sign(ref: string): Promise<string> {
  return ref.startsWith('down')
    ? Promise.reject(new Error('signing service unavailable'))
    : Promise.resolve(`https://cdn.example/${ref}.jpg?sig=abc`);
}

@Resolver()
class CardsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Card)
  @Idempotent()
  async issueCard(@Args('ref') ref: string): Promise<Card> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO effects (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    const url = sign(ref);
    url.catch(() => undefined);
    return new Card(rows[0].id, url);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      includeStacktraceInErrorResponses: false,
    }),
  ],
  providers: [
    CardsResolver,
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    },
  ],
})
class CardsModule {}

describe('adversary 44b: a failed field replayed under ClassSerializerInterceptor', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv44b_failed_field', {
      module: CardsModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE effects (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .timeout(5_000)
      .send({ query });
  const effects = async (ref: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM effects WHERE ref = $1', [ref])).rows[0]
        .count,
    );
  const replayedAs = (first: { body: object }, field: string) => ({
    ...first.body,
    extensions: { idempotency: { replayed: [field] } },
  });

  it('control: the signer up, the replay is the first answer', async () => {
    const query = 'mutation { issueCard(ref: "up-1") { id photoUrl } }';
    const first = await send('up-1', query);
    const replay = await send('up-1', query);
    expect(first.body).toEqual({
      data: { issueCard: { id: expect.any(Number), photoUrl: expect.stringContaining('up-1') } },
    });
    expect(replay.body).toEqual(replayedAs(first, 'issueCard'));
    expect(await effects('up-1')).toBe(1);
  });

  it('the signer down: the replay is the first answer (photoUrl null, its error)', async () => {
    const query = 'mutation { issueCard(ref: "down-1") { id photoUrl } }';
    const first = await send('down-1', query);
    const replay = await send('down-1', query);
    expect(first.body).toEqual({
      data: { issueCard: { id: expect.any(Number), photoUrl: null } },
      errors: [
        expect.objectContaining({
          message: 'signing service unavailable',
          path: ['issueCard', 'photoUrl'],
        }),
      ],
    });
    expect(replay.body).toEqual(replayedAs(first, 'issueCard'));
    expect(await effects('down-1')).toBe(1);
  });
});
