import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
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
 * Adversary, round 43b: a GraphQL field renamed with `@Field({ name })` on a getter answers
 * its value at the first call and null (a non-null error) on every replay.
 *
 * The app (Apollo on Express, the pool seam): an object type `Voucher` whose GraphQL field
 * `label` is the class's getter `display` (`@Field({ name: 'label' }) get display()`), the
 * code-first way to expose a computed value under the schema's name. Nest's resolver of the
 * field reads the parent's *property* `display` (@nestjs/graphql
 * object-type-definition.factory.js, `createFieldResolver`: `root[field.name]`), not `label`.
 * `issueVoucher(amount)` inserts a row and returns `new Voucher(row)` (`@Idempotent()`).
 *
 * What happens: `outputWire` reads each selected field by its schema name
 * (lib/graphql/wire-value.ts:219-227): the value has no `label`, so it is stored as
 * null; the getter `display` is a member of the class, which a replay does not have (only
 * said in the log as a replay loss). The first answer is `"label":"V-7"`; a replay's
 * value is a plain object with `label: null` and no `display`, and Nest's resolver answers
 * `undefined` -> null: `Cannot return null for non-nullable field Voucher.label`, `data: null`.
 * The docs promise a getter field is read "as GraphQL's default resolver reads it (a class's
 * getters included)": here the field's resolver is Nest's, which reads another name.
 *
 * Expected: the replay is the first answer (but for the replay marker), one row.
 *
 * Control: the same renamed field on a plain property (`@Field({ name: 'code' }) ref`): the
 * property is the value's own data, kept beside the fields, and Nest's resolver finds it on a
 * replay. Passes.
 *
 * Severity: critical (a wrong answer stored: every retry of a done mutation answers an error).
 */
let pool: Pool;

@ObjectType()
class Voucher {
  @Field(() => Int)
  id!: number;

  @Field({ name: 'code' })
  ref!: string;

  @Field({ name: 'label' })
  get display(): string {
    return `V-${this.id}`;
  }

  constructor(row: { id: number; ref: string }) {
    this.id = row.id;
    this.ref = row.ref;
  }
}

@Resolver(() => Voucher)
class VouchersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Voucher)
  @Idempotent()
  async issueVoucher(@Args('amount', { type: () => Int }) amount: number): Promise<Voucher> {
    const { rows } = await pool.query<{ id: number; ref: string }>(
      "INSERT INTO vouchers (amount) VALUES ($1) RETURNING id, 'R' || id AS ref",
      [amount],
    );
    return new Voucher(rows[0]);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [VouchersResolver],
})
class VouchersModule {}

describe('adversary 43b: a field renamed on a getter, replayed', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv43b_renamed_getter', {
      module: VouchersModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE vouchers (id serial PRIMARY KEY, amount int NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const rows = async (amount: number) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM vouchers WHERE amount = $1', [amount]))
        .rows[0].count,
    );

  it.each([
    ['control: renamed on a plain property', 'code', 71],
    ['renamed on a getter', 'label', 72],
  ] as const)('%s: the replay is the first answer', async (_name, field, amount) => {
    const send = () =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', `adv43b-renamed-${amount}`)
        .timeout(5_000)
        .send({ query: `mutation { issueVoucher(amount: ${amount}) { id ${field} } }` });
    const first = await send();
    const replay = await send();
    expect(first.body).toEqual({
      data: { issueVoucher: { id: expect.any(Number), [field]: expect.any(String) } },
    });
    // Received (label): { data: null, errors: [Cannot return null for non-nullable field
    // Voucher.label], extensions: { idempotency: { replayed: ['issueVoucher'] } } }.
    expect(replay.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['issueVoucher'] } },
    });
    expect(await rows(amount)).toBe(1);
  });
});
