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
 * Adversary, round 58: a field the mutation's value gives through a getter is read twice at
 * the first call, once by the library (the read it stores) and once by GraphQL (the read the
 * client gets). A getter whose reads differ (a signed URL: a fresh signature each time; a
 * signing service that fails now and then) gives the client one answer and stores another.
 *
 * The app (Apollo on Express, Mercurius on Fastify; the pool seam): the mutation returns its
 * code-first model, whose download link is a getter that signs the file's path (as the docs'
 * own example of a field read through a Promise, "a signed URL's"):
 *
 *   @ObjectType() class Receipt {
 *     @Field(() => Int) id; path: string;
 *     @Field(() => String) get downloadUrl(): Promise<string> { return signer.sign(this.path); }
 *   }
 *
 * What happens: `runField` (lib/graphql/run-field.ts:104-115) walks the value with
 * `outputWire` (lib/graphql/wire-value.ts), which reads each selected field as GraphQL's
 * default resolver does: `source[property]` (wire-value.ts:353-360) calls the getter and
 * awaits its Promise; that value is stored. What the first answer is given is the resolver's
 * own object (`return { wire, value: ... promised }`, wire-value.ts:455; only lists read are
 * put over it, `over()`), and GraphQL then reads `downloadUrl` from it again: the getter runs a
 * second time, and the client gets the second signature while the key stores the first. Every
 * replay answers the first one, which the client never saw (`?sig=1` stored, `?sig=2`
 * answered). With a signing service that fails once (a timeout, a 503), the library's read
 * fails and its error is stored (`FAILED`, wire-value.ts:361-368), GraphQL's read succeeds:
 * the client gets its link, and every retry gets `data.issueReceipt.downloadUrl: null` with
 * "signing service unavailable" for a mutation whose first answer had none. The opposite
 * order stores a link and told the client it had none.
 *
 * Expected: "The answers are the same bytes when the operation is, but for the replay marker"
 * (docs/guides/graphql.md, "What is stored, and replayed"); a stored answer is what the client
 * got ("a client never receives an answer that a retry could not replay", run-field.ts). A
 * field read once, its value given to the first answer (as lists are), would be.
 *
 * Control: the same link as the model's own property holding the signing Promise (read twice,
 * one Promise, one signature): the replay is the first answer. Passes on both drivers.
 *
 * Severity: medium (a replay differs from the first answer, and a stored field error the
 * client never got, or a link it got that is not stored; one row, effects once).
 *
 * Fixed: the first answer is given what the library read of a getter or a Promise (`over`,
 * lib/graphql/wire-value.ts: its value, or its failure as it failed), never read again.
 */
let pool: Pool;
let signed = 0;
/** The signing service: a fresh signature per call; `failNext` fails the next call once. */
let failNext = false;
function sign(path: string): Promise<string> {
  if (failNext) {
    failNext = false;
    return Promise.reject(new Error('signing service unavailable'));
  }
  signed += 1;
  return Promise.resolve(`https://files.example/${path}?sig=${signed}`);
}

@ObjectType()
class Receipt {
  @Field(() => Int)
  id: number;

  path: string;

  @Field(() => String, { nullable: true })
  get downloadUrl(): Promise<string> {
    return sign(this.path);
  }

  constructor(id: number, path: string) {
    this.id = id;
    this.path = path;
  }
}

@ObjectType()
class SignedReceipt {
  @Field(() => Int)
  id: number;

  @Field(() => String, { nullable: true })
  downloadUrl: Promise<string>;

  constructor(id: number, path: string) {
    this.id = id;
    this.downloadUrl = sign(path);
  }
}

@Resolver()
class ReceiptsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Receipt)
  @Idempotent()
  async issueReceipt(@Args('ref') ref: string): Promise<Receipt> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO receipts (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    return new Receipt(rows[0].id, `receipts/${ref}.pdf`);
  }

  @Mutation(() => SignedReceipt)
  @Idempotent()
  async issueSignedReceipt(@Args('ref') ref: string): Promise<SignedReceipt> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO receipts (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    return new SignedReceipt(rows[0].id, `receipts/${ref}.pdf`);
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

describe.each(GRAPHQL_DRIVERS)('adversary 58: a getter field read twice, on %s', (driver) => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        graphqlModule(driver),
      ],
      providers: [ReceiptsResolver],
    })
    class ReceiptsModule {}
    fixture = await startPoolApp(`adv58_getter_twice_${driver}`, {
      module: ReceiptsModule,
      adapter: driver === 'apollo' ? 'express' : 'fastify',
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query('CREATE TABLE receipts (id serial PRIMARY KEY, ref text NOT NULL)');
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
      (await fixture.admin.query('SELECT count(*) FROM receipts WHERE ref = $1', [ref])).rows[0]
        .count,
    );
  const replayedAs = (first: { body: object }, field: string) => ({
    ...first.body,
    extensions: { idempotency: { replayed: [field] } },
  });

  it("control: the link as the value's own Promise: the replay is the first answer", async () => {
    const ref = `${driver}-ctl`;
    const query = `mutation { issueSignedReceipt(ref: "${ref}") { id downloadUrl } }`;
    const first = await send(ref, query);
    const replay = await send(ref, query);
    expect(first.body).toEqual({
      data: {
        issueSignedReceipt: {
          id: expect.any(Number),
          downloadUrl: expect.stringContaining('sig='),
        },
      },
    });
    expect(replay.body).toEqual(replayedAs(first, 'issueSignedReceipt'));
    expect(await rows(ref)).toBe(1);
  });

  it('a getter that signs afresh: the replay is the link the first answer gave', async () => {
    const ref = `${driver}-fresh`;
    const query = `mutation { issueReceipt(ref: "${ref}") { id downloadUrl } }`;
    const first = await send(ref, query);
    const replay = await send(ref, query);
    expect(first.body).toEqual({
      data: {
        issueReceipt: { id: expect.any(Number), downloadUrl: expect.stringContaining('sig=') },
      },
    });
    expect(replay.body).toEqual(replayedAs(first, 'issueReceipt'));
    expect(await rows(ref)).toBe(1);
  });

  it('a signing service that fails once: no stored error the first answer did not give', async () => {
    const ref = `${driver}-flaky`;
    const query = `mutation { issueReceipt(ref: "${ref}") { id downloadUrl } }`;
    failNext = true;
    const first = await send(ref, query);
    failNext = false;
    const replay = await send(ref, query);
    // Whichever read failed, the client and its retries get the same answer.
    expect(replay.body).toEqual(replayedAs(first, 'issueReceipt'));
    expect(await rows(ref)).toBe(1);
  });
});
