import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { Args, GraphQLModule, Int, Mutation, Query, Resolver } from '@nestjs/graphql';
import { GraphQLScalarType, valueFromASTUntyped } from 'graphql';
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
 * Adversary, round 69: two DIFFERENT arguments, ONE fingerprint. A JSON scalar argument (the
 * `JSON` of graphql-type-json / graphql-scalars, as common as scalars get: metadata, prefs,
 * a payload) holding a member named `__proto__` fingerprints as if that member were not
 * there: `setPrefs(prefs: { __proto__: { role: "admin" } })` and `setPrefs(prefs: {})` are one
 * operation to the library, so the second under the first's key is REPLAYED the first's
 * answer (its effect never happens, the client is told it did), where it must be refused
 * with `key_mismatch` (422). The resolver, and what it writes (`JSON.stringify(prefs)` into a
 * jsonb column), see the member: `{"__proto__":{"role":"admin"}}` is not `{}`.
 *
 * Why: `argumentsWire` -> `inputWire` -> (leaf) `strictJson` (lib/graphql/wire-value.ts)
 * copies a plain object member by member with `copy[name] = ...` into an object literal;
 * for `name === '__proto__'` that assignment runs Object.prototype's `__proto__` SETTER (it
 * sets the copy's prototype) instead of making an own member, so the member is dropped from
 * the canonical JSON (which reads own keys). GraphQL's `valueFromASTUntyped` (a literal) and
 * `JSON.parse` (variables, on Express) both make `__proto__` an OWN member. Any member under
 * it is dropped too, whatever it holds.
 *
 * Expected (docs/guides/graphql.md, "One record per mutation field"): the fingerprint is the
 * field's name and its arguments "in canonical JSON"; a different call under the same key is
 * refused (422 `key_mismatch`).
 *
 * Control (passes): the same with a member of another name (`{ role: "admin" }` after `{}`)
 * is refused with key_mismatch.
 *
 * Severity: medium-low (needs a JSON-like scalar argument and a `__proto__` member; the
 * outcome is the wrong one for a key-reuse: a silent replay of another operation's answer
 * instead of the 422 the library promises).
 *
 * Fixed: `strictJson` (and kept data, and multipart fields) define members rather than assign them:
 * `__proto__` is data, in the fingerprint.
 */
let pool: Pool;

/** A JSON scalar, as graphql-type-json writes it: identity, literals by valueFromASTUntyped. */
const Json = new GraphQLScalarType({
  name: 'JSON',
  serialize: (value) => value,
  parseValue: (value) => value,
  parseLiteral: (ast, variables) => valueFromASTUntyped(ast, variables),
});

@Resolver()
class PrefsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => String)
  @Idempotent()
  async setPrefs(@Args('prefs', { type: () => Json }) prefs: unknown): Promise<string> {
    const { rows } = await pool.query<{ prefs: unknown }>(
      'INSERT INTO prefs (prefs) VALUES ($1) RETURNING prefs',
      [JSON.stringify(prefs)],
    );
    return JSON.stringify(rows[0].prefs);
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

describe.each(GRAPHQL_DRIVERS)('adversary 69: a JSON argument with __proto__, on %s', (driver) => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        graphqlModule(driver),
      ],
      providers: [PrefsResolver],
    })
    class PrefsModule {}
    fixture = await startPoolApp(`adv69_json_proto_${driver}`, {
      module: PrefsModule,
      adapter: driver === 'apollo' ? 'express' : 'fastify',
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE prefs (id serial PRIMARY KEY, prefs jsonb NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (key: string, literal: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .timeout(5_000)
      .send({ query: `mutation { setPrefs(prefs: ${literal}) }` });
  const rows = async () =>
    (await fixture.admin.query<{ prefs: unknown }>('SELECT prefs FROM prefs ORDER BY id')).rows.map(
      (row) => row.prefs,
    );

  it('control: another member under the same key is refused; the resolver sees a __proto__ member', async () => {
    const first = await send(`${driver}-control`, '{ note: "x" }');
    expect(first.body).toEqual({ data: { setPrefs: '{"note":"x"}' } });
    const other = await send(`${driver}-control`, '{ note: "x", role: "admin" }');
    expect(other.body.errors?.[0]?.extensions).toMatchObject({ code: 'key_mismatch', status: 422 });
    // Under a key of its own, the resolver sees (and writes) the member:
    const own = await request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', `${driver}-proto-2`)
      .send({ query: 'mutation { setPrefs(prefs: { note: "z", __proto__: { role: "admin" } }) }' });
    expect(own.body).toEqual({
      data: { setPrefs: '{"note":"z","__proto__":{"role":"admin"}}' },
    });
    expect(await rows()).toContainEqual({ note: 'z', ['__proto__']: { role: 'admin' } });
  });

  it('a __proto__ member under the same key is refused, not replayed', async () => {
    const first = await send(`${driver}-proto`, '{ note: "y" }');
    expect(first.body).toEqual({ data: { setPrefs: '{"note":"y"}' } });
    const other = await send(`${driver}-proto`, '{ note: "y", __proto__: { role: "admin" } }');
    // Observed: { data: { setPrefs: '{"note":"y"}' }, extensions: { idempotency: { replayed:
    // ['setPrefs'] } } }, the first call's answer replayed for another operation.
    expect(other.body.extensions).toBeUndefined();
    expect(other.body.errors?.[0]?.extensions).toMatchObject({ code: 'key_mismatch', status: 422 });
  });
});
