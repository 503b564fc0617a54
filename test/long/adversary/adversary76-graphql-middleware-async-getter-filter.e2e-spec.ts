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
 * Adversary 76: a moderation filter in field middleware that awaits an async computed field of
 * each comment (`@Field() get hidden(): Promise<boolean>`, read from the moderation table)
 * hides the flagged comment at the first call, and shows it on every replay: the library
 * leaves the Promise getter out of the stored input, silently, so the replay's filter reads
 * `await undefined` and lets everything through.
 *
 * The user code (Apollo on Express):
 *
 *   @ObjectType() class Comment {
 *     @Field(() => Int) id!: number;
 *     @Field() body!: string;
 *     @Field() get hidden(): Promise<boolean> { return isFlagged(this.id); } // a SELECT
 *   }
 *   const visibleOnly: FieldMiddleware = async (_ctx, next) => {
 *     const shown = [];
 *     for (const comment of (await next()) as Comment[]) if (!(await comment.hidden)) shown.push(comment);
 *     return shown;
 *   };
 *   @ObjectType() class Thread { @Field(() => Int) id; @Field(() => [Comment], { middleware: [visibleOnly] }) comments; }
 *   @Mutation(() => Thread) @Idempotent() postComment(...) { insert; return thread with its Comment instances; }
 *
 * and the client selects `{ id comments { id body } }` (not `hidden`).
 *
 * Why: `walkValue` (lib/graphql/wire-value.ts) keeps a middleware input's unselected fields
 * through `getterFields` (lib/graphql/middleware-extras.ts), which skips a getter that gives a
 * Promise ("a middleware awaiting one reads nothing the walk could store as it was"), though
 * the walk awaits a selected field's Promise the same way; no loss is put in the log for it.
 * The replay's stored comments have no `hidden`: the filter passes the flagged one.
 *
 * What the docs promise (docs/guides/graphql.md): the field is stored as its middleware's
 * input, with "the fields its class computes (a `@Field() get deleted()`, read once: a filter
 * by a comment's `deleted` filters again ...)"; "on a replay it runs again on that stored
 * input"; "what still cannot be kept as it was ... is stored as it can be and named in the
 * replay's losses, for the app's log". (The same paragraph says a getter that gives a Promise
 * "is left out": the consequence, a filter that no longer filters, is neither said nor logged.)
 *
 * Control: the same app with a synchronous `get hidden(): boolean` (the flag loaded with the
 * comment): hidden on the first answer and on the replay; the comment row committed once.
 *
 * Severity: medium (every replay shows a comment the moderation filter hid from the first
 * answer: data the app hides, shown; not logged).
 *
 * Fails now: the replay's `comments` hold the flagged comment `"spam"` that the first answer
 * left out.
 *
 * Suggested fix: await an unselected getter field's Promise under a middleware input (as a
 * selected one's is awaited), except a TypeORM lazy relation (told by its metadata) which may
 * stay unloaded; or, where it is left out, name it in the losses and refuse to replay a
 * middleware whose input lost it.
 *
 * Fixed (round 78): the library no longer reads nor stores a field middleware's input, and
 * never runs the middleware on a replay. The answer commits with the resolver's effects as
 * before (lib/graphql/run-field.ts `settle`), its middleware outputs pending; the operation's
 * answer hook (lib/graphql/replay-marker.ts: Apollo `willSendResponse`, Mercurius
 * `onResolution`) takes each middleware field's output from the answer's data, as the client
 * got it (masked by an outer serializer), and completes the stored answer with one fenced
 * UPDATE (`ClaimStore.completeAnswer`, lib/graphql/output-paths.ts `storeOutputsOf`). On a
 * replay a wrapper on each middleware field of the schema (lib/graphql/middleware-outputs.ts
 * `answerOutputsOf`) answers the stored output for its path, its scalars through
 * `parseValue()`; a replay meeting the outputs pending waits for them, bounded, then answers
 * `field_output_pending`. middleware-input.ts and middleware-extras.ts are gone.
 */
let pool: Pool;

async function isFlagged(id: number): Promise<boolean> {
  const { rows } = await pool.query<{ id: number }>('SELECT id FROM flagged WHERE id = $1', [id]);
  return rows.length > 0;
}

@ObjectType()
class Comment {
  constructor(id: number, body: string, flagged?: boolean) {
    this.id = id;
    this.body = body;
    this.flagged = flagged;
  }

  @Field(() => Int)
  id: number;

  @Field()
  body: string;

  /** Loaded with the comment (the control), or not. */
  private readonly flagged?: boolean;

  @Field(() => Boolean)
  get hidden(): boolean | Promise<boolean> {
    return this.flagged ?? isFlagged(this.id);
  }
}

/** Nest's field middleware: the comments moderation has not hidden. */
const visibleOnly: FieldMiddleware = async (_ctx, next) => {
  const shown: Comment[] = [];
  for (const comment of (await next()) as Comment[]) {
    if (!(await comment.hidden)) shown.push(comment);
  }
  return shown;
};

@ObjectType()
class Thread {
  @Field(() => Int)
  id!: number;

  @Field(() => [Comment], { middleware: [visibleOnly] })
  comments!: Comment[];
}

@Resolver(() => Thread)
class ThreadsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Thread)
  @Idempotent()
  async postComment(
    @Args('body') body: string,
    @Args('loaded', { type: () => Boolean, defaultValue: false }) loaded: boolean,
  ): Promise<Thread> {
    await pool.query('INSERT INTO comments (id, body) VALUES (DEFAULT, $1)', [body]);
    const { rows } = await pool.query<{ id: number; body: string; flagged: boolean }>(
      'SELECT c.id, c.body, f.id IS NOT NULL AS flagged FROM comments c LEFT JOIN flagged f USING (id) ORDER BY c.id',
    );
    const comments = rows.map(
      (row) => new Comment(row.id, row.body, loaded ? row.flagged : undefined),
    );
    return { id: 1, comments };
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
  providers: [ThreadsResolver],
})
class ThreadsModule {}

describe('adversary 76: a middleware filter awaiting an async getter field', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_mw_async_getter', {
      module: ThreadsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE comments (id serial PRIMARY KEY, body text NOT NULL)');
        await admin.query('CREATE TABLE flagged (id int PRIMARY KEY)');
        // A comment moderation flagged, in the thread before the calls.
        await admin.query(`INSERT INTO comments (body) VALUES ('spam')`);
        await admin.query('INSERT INTO flagged VALUES (1)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['postComment'] } },
  });

  const count = async (body: string) =>
    Number(
      (
        await fixture.admin.query<{ n: string }>(
          'SELECT count(*) AS n FROM comments WHERE body = $1',
          [body],
        )
      ).rows[0].n,
    );

  const bodies = (answer: {
    body: { data?: { postComment?: { comments: { body: string }[] } } };
  }) => answer.body.data?.postComment?.comments.map((comment) => comment.body);

  it('control: the flag loaded with the comment, hidden at first and on the replay', async () => {
    const query =
      'mutation { postComment(body: "first!", loaded: true) { id comments { id body } } }';
    const first = await post('adv76-mw-async-getter-c', query);
    expect(bodies(first)).toEqual(['first!']);
    const again = await post('adv76-mw-async-getter-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count('first!')).toBe(1);
  });

  it('the flag read by an async getter: hidden at first and on the replay', async () => {
    const query = 'mutation { postComment(body: "second!") { id comments { id body } } }';
    const first = await post('adv76-mw-async-getter-a', query);
    expect(bodies(first)).toEqual(['first!', 'second!']);
    const again = await post('adv76-mw-async-getter-a', query);
    expect(await count('second!')).toBe(1);
    // Fails: the replay shows the flagged "spam".
    expect(bodies(again)).toEqual(['first!', 'second!']);
    expect(again.body).toEqual(replayOf(first));
  });
});
