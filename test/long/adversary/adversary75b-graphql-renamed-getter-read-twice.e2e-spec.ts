import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  Field,
  type FieldMiddleware,
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
 * Adversary 75b: a getter field behind Nest field middleware whose `@Field({ name })` renames
 * it is read twice at the first call: once by the library (stored), once by Nest's read for
 * the client. A getter that signs a link afresh gives the client `?sig=2` and stores
 * `?sig=1`: every replay answers a link the client never got. Round 75 (fdb3ef6) made
 * middleware fields "read and stored like a plain field (getter read)", and so brought them
 * to this; a renamed getter WITHOUT middleware is read twice too (second test).
 *
 * The app: the mutation `issueReceipt(ref)` (`@Idempotent()`, `Idempotency-Key` header,
 * Apollo on Express) returns its code-first model, whose link is a getter that signs the
 * file's path, exposed under the API's name and logged by a field middleware:
 *
 *   @Field(() => String, { name: 'downloadUrl', middleware: [logAccess] })
 *   get signedUrl(): string { return sign(this.path); }
 *
 * Why: walkValue (lib/graphql/wire-value.ts) reads the field as Nest does, by its class
 * property (`nestField(...).property`: `signedUrl`), and puts what it read over the first
 * answer's value to be "never read again by GraphQL" (adversary 58): `replaced[name] = ...`,
 * keyed by the FIELD's name (`downloadUrl`), and `over()` answers a read of that key only.
 * Nest's resolver (`createFieldResolver`, object-type-definition.factory.js) reads
 * `root[field.name]`, the property `signedUrl`, which `over()` passes to the value's getter:
 * signed a second time. The same for a getter whose read failed (`FailedRead` under the field's
 * name): Nest's read signs again and the client gets a link while the key stores the error.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "The answers are the same
 * bytes when the operation is, but for the replay marker"; a middleware field "is stored as any
 * field is (a getter's value, ...)"; and a field is "read as Nest's code-first schema reads it:
 * by the class property its `@Field()` decorates (`@Field({ name: 'label' }) get display()` is
 * read as `display`)".
 *
 * Control: the same getter behind the same middleware, not renamed
 * (`@Field(() => String, { middleware: [logAccess] }) get downloadUrl()`): signed once, the
 * replay is the first answer; passes.
 *
 * Severity: medium (a replay differs from the first answer: a signed link the client never got,
 * or a stored field error for a first answer that had none; one row, effects once).
 *
 * Fails now: the first answer's `downloadUrl` is `...?sig=2`, the replay's `...?sig=1` (both
 * tests).
 *
 * Suggested fix: key `replaced` (and `over()`'s reads) by the property Nest reads
 * (`reading?.property ?? name`), as `kept[property]` already is in the middleware catch.
 *
 * Fixed: what the library read is put over the first answer under the property Nest reads
 * (`replaced[property]` in walkValue, lib/graphql/wire-value.ts; `over()` answers it), so a
 * renamed getter is read once.
 */
let pool: Pool;
let signed = 0;
/** The signing service: a fresh signature per call. */
function sign(path: string): string {
  signed += 1;
  return `https://files.example/${path}?sig=${signed}`;
}

/** Nest's field middleware: each read of the link logged. */
const reads: string[] = [];
const logAccess: FieldMiddleware = async (ctx, next) => {
  reads.push(String(ctx.info?.fieldName));
  return next();
};

@ObjectType()
class Receipt {
  @Field(() => Int)
  id!: number;

  path!: string;

  @Field(() => String, { name: 'downloadUrl', middleware: [logAccess] })
  get signedUrl(): string {
    return sign(this.path);
  }
}

@ObjectType()
class PlainReceipt {
  @Field(() => Int)
  id!: number;

  path!: string;

  @Field(() => String, { middleware: [logAccess] })
  get downloadUrl(): string {
    return sign(this.path);
  }
}

@ObjectType()
class BareReceipt {
  @Field(() => Int)
  id!: number;

  path!: string;

  @Field(() => String, { name: 'downloadUrl' })
  get signedUrl(): string {
    return sign(this.path);
  }
}

@Resolver()
class ReceiptsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  private async issue<T extends { id: number; path: string }>(ref: string, made: T): Promise<T> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO receipts (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    return Object.assign(made, { id: rows[0].id, path: `receipts/${ref}.pdf` });
  }

  @Mutation(() => Receipt)
  @Idempotent()
  issueReceipt(@Args('ref') ref: string): Promise<Receipt> {
    return this.issue(ref, new Receipt());
  }

  @Mutation(() => PlainReceipt)
  @Idempotent()
  issuePlainReceipt(@Args('ref') ref: string): Promise<PlainReceipt> {
    return this.issue(ref, new PlainReceipt());
  }

  @Mutation(() => BareReceipt)
  @Idempotent()
  issueBareReceipt(@Args('ref') ref: string): Promise<BareReceipt> {
    return this.issue(ref, new BareReceipt());
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
  providers: [ReceiptsResolver],
})
class ReceiptsModule {}

describe('adversary 75b: a renamed getter field (behind field middleware) read twice', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75b_gql_renamed_getter', {
      module: ReceiptsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE receipts (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send(JSON.stringify({ query }));

  const replayOf = (first: { body: Record<string, unknown> }, field: string) => ({
    ...first.body,
    extensions: { idempotency: { replayed: [field] } },
  });

  const firstAndReplay = async (field: string, ref: string) => {
    const query = `mutation { ${field}(ref: "${ref}") { id downloadUrl } }`;
    const first = await post(`adv75b-renamed-${ref}`, query);
    expect(first.body).toEqual({
      data: { [field]: { id: expect.any(Number), downloadUrl: expect.any(String) } },
    });
    const again = await post(`adv75b-renamed-${ref}`, query);
    return { first, again };
  };

  it('control: the getter not renamed, behind the middleware: signed once', async () => {
    const { first, again } = await firstAndReplay('issuePlainReceipt', 'c');
    expect(again.body).toEqual(replayOf(first, 'issuePlainReceipt'));
  });

  it('the getter renamed, behind the middleware: the replay is the first answer', async () => {
    const { first, again } = await firstAndReplay('issueReceipt', 'a');
    // Fails: the first answer has ?sig=N+1, the replay the stored ?sig=N.
    expect(again.body).toEqual(replayOf(first, 'issueReceipt'));
  });

  it('the getter renamed, no middleware: the replay is the first answer', async () => {
    const { first, again } = await firstAndReplay('issueBareReceipt', 'b');
    // Fails: the first answer has ?sig=N+1, the replay the stored ?sig=N.
    expect(again.body).toEqual(replayOf(first, 'issueBareReceipt'));
  });
});
