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
 * Adversary 79 (graphql): a non-null field behind field middleware whose middleware answers
 * null (its error nulls the mutation's answer, the field's parent) is replayed with another
 * error: "was not selected by the first call" (`field_not_stored`), although the first call
 * selected it, and the first answer's error ("Cannot return null for non-nullable field") is
 * gone.
 *
 * The app: `Transfer { id note: String! }`, `note` behind Nest's field middleware `redact`
 * (`const note = await next(); return note.includes('secret') ? null : note` — a masking
 * middleware returning null by mistake on a non-null field, as happens); the mutation
 * `createTransfer` nullable, `@Idempotent()`; Apollo on Express.
 *
 * Why: graphql-js answers `createTransfer: null` with the error at `["createTransfer",
 * "note"]`. `outputsIn` (lib/graphql/output-paths.ts) reads `dataAt(data, path)`: the parent
 * is null, so the output is undefined and left out (the comment: "a field the answer has no
 * value at, its parent null, is left out"), and its error with it (`keys.includes(key)`
 * fails). On a replay the stored mutation value is the resolver's object (not null), so
 * GraphQL resolves `note`, and the wrapper (`answerOutputsOf`, middleware-outputs.ts) finds no
 * output there (`outputAt` -> `unstored`) and throws `notStoredField`: the field "was not
 * selected by the first call".
 *
 * Docs (docs/guides/graphql.md, "Field middleware: its output, as the first answer gave it"):
 * "a field the first answer gave as null with its error ... answers that error again, in
 * graphql-js's words before your `formatError`"; `field_not_stored` is for "A field the first
 * call did not select"; and every retry gets the first answer.
 *
 * Controls (pass): the same mutation without `@Idempotent()` answers the null error; a note
 * without 'secret' is answered and replayed the same.
 *
 * Severity: medium (the replay's error says the client selected the wrong fields, and to use a
 * new key for a new operation: a client that follows it runs the transfer again).
 *
 * Fails now: the replay's error is "The field Transfer.note was not selected by the first
 * call with this idempotency key: ..." with `extensions.code: field_not_stored` (expected the
 * first answer's "Cannot return null for non-nullable field Transfer.note.").
 *
 * Suggested fix: `outputsIn` stores a middleware field whose path the answer's data does not
 * reach because an error at (or under) it nulled an ancestor: keep its error by its key (and
 * mark the output as an error), so that the replay's wrapper throws the same error (the same
 * null propagates to the same parent).
 *
 * Fixed: `outputsIn` (lib/graphql/output-paths.ts) stores a middleware field the answer does
 * not reach, its parent nulled by an error at or under it, as null with that error; the
 * replay's wrapper throws it again (`fieldErrorAgain`, lib/graphql/replayed-field-error.ts),
 * and graphql-js nulls the same parent.
 */
let pool: Pool;

/** Nest's field middleware: a note with a secret is hidden (null, on a non-null field). */
const redact: FieldMiddleware = async (_ctx, next) => {
  const note = (await next()) as string;
  return note.includes('secret') ? null : note;
};

@ObjectType()
class Transfer {
  @Field(() => Int)
  id!: number;

  @Field({ middleware: [redact] })
  note!: string;
}

async function createTransfer(note: string): Promise<Transfer> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO transfers DEFAULT VALUES RETURNING id',
  );
  return { id: rows[0].id, note };
}

@Resolver(() => Transfer)
class TransfersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Transfer, { nullable: true })
  @Idempotent()
  createTransfer(@Args('note') note: string): Promise<Transfer> {
    return createTransfer(note);
  }

  /** The control: the same mutation without the library. */
  @Mutation(() => Transfer, { nullable: true })
  createTransferPlain(@Args('note') note: string): Promise<Transfer> {
    return createTransfer(note);
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
  providers: [TransfersResolver],
})
class TransfersModule {}

describe('adversary 79: a non-null middleware field answered null nulls its parent', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv79_gql_mw_nonnull_parent', {
      module: TransfersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE transfers (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string | undefined, query: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json');
    if (key) call.set('Idempotency-Key', key);
    return call.timeout(20_000).send(JSON.stringify({ query }));
  };

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createTransfer'] } },
  });

  const NULL_NOTE = 'Cannot return null for non-nullable field Transfer.note.';

  it('control: without @Idempotent(), the transfer is null with the note’s error', async () => {
    const first = await post(
      undefined,
      'mutation { createTransferPlain(note: "a secret") { id note } }',
    );
    expect(first.body.data).toEqual({ createTransferPlain: null });
    expect(first.body.errors).toEqual([
      expect.objectContaining({ message: NULL_NOTE, path: ['createTransferPlain', 'note'] }),
    ]);
  });

  it('control: a plain note, answered and replayed', async () => {
    const query = 'mutation { createTransfer(note: "rent") { id note } }';
    const first = await post('adv79-mw-nonnull-ok', query);
    expect(first.body).toEqual({
      data: { createTransfer: { id: expect.any(Number), note: 'rent' } },
    });
    const again = await post('adv79-mw-nonnull-ok', query);
    expect(again.body).toEqual(replayOf(first));
  });

  it('a secret note: the null error answered, and replayed so', async () => {
    const query = 'mutation { createTransfer(note: "a secret") { id note } }';
    const first = await post('adv79-mw-nonnull-bad', query);
    expect(first.body.data).toEqual({ createTransfer: null });
    expect(first.body.errors).toEqual([
      expect.objectContaining({ message: NULL_NOTE, path: ['createTransfer', 'note'] }),
    ]);
    const again = await post('adv79-mw-nonnull-bad', query);
    // Fails: the replay's error is field_not_stored ("was not selected by the first call").
    expect(again.body).toEqual(replayOf(first));
  });
});
