import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-06, seventh): own enumerable symbol-keyed members of the value go into
 * its parent data; the typed graph keeps a registered symbol (`Symbol.for`) by its key and a
 * replay defines it again; an unregistered one is left out and named unfaithful (the app's log
 * says so), as docs/guides/graphql.md now states.
 *
 * Adversary 103 (graphql): an own symbol-keyed member of a mutation's value (data an app
 * tags a row with, out of JSON's and GraphQL's sight: `row[AUDIT] = { by: 'ada' }`, a
 * `Symbol.for('tenant')`) is gone on a replay: the `@ResolveField()` that reads it answers
 * the first call's value once, then another value on every replay. Nothing says so: the log
 * is silent (the member is never looked at), and the docs promise "any own key comes back an
 * own key".
 *
 * User code: `const AUDIT = Symbol.for('audit')`; `@ObjectType() class Note { @Field(() => Int)
 * id }`; `@Mutation(() => Note) @Idempotent() createNote()` inserting a row and returning
 * `Object.assign(row, { [AUDIT]: 'ada' })`; `@ResolveField(() => String) createdBy(@Parent() n)
 * { return n[AUDIT] ?? 'unknown' }`; Apollo.
 *
 * Code path: lib/graphql/kept-data.ts `keepData` (`Object.entries(data)`: string keys only;
 * `plainCopy`, `escapedCopy` likewise) and lib/graphql/wire-value.ts `walkValue`'s own data
 * beside the fields (`__parent`); the `unfaithful` check walks the same string keys, so the
 * loss is never named.
 *
 * Docs (docs/guides/graphql.md, "What the resolvers under it read, as they first read it"):
 * "Its own data that is not a field ... is kept too, under `__parent` ... and any own key comes
 * back an own key, in its order"; "A replay's resolvers get the same values as the first
 * call's".
 *
 * Severity: low (takes symbol-keyed data read by a field resolver; the replay answers another
 * value at that field, silently; the mutation's effect is not repeated).
 *
 * Fails now (unskip the it.skip): first `{"data":{"createNote":{"id":2,"createdBy":"ada"}}}`;
 * replay `{"data":{"createNote":{"id":2,"createdBy":"unknown"}},"extensions":{"idempotency":
 * {"replayed":["createNote"]}}}`.
 * Control (passes): the same tag under a string key replays `"ada"`.
 *
 * Suggested fix: keep a registered symbol's (`Symbol.for`) members by their key
 * (`Symbol.keyFor`), and name any other symbol-keyed member as unfaithful (so the app's log
 * says so); or state in the docs that symbol-keyed members are not kept.
 */
let pool: Pool;

const AUDIT = Symbol.for('audit');

@ObjectType()
class Note {
  @Field(() => Int)
  id!: number;
}

type NoteRow = Note & { [AUDIT]?: string; audit?: string };

@Resolver(() => Note)
class NotesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Note)
  @Idempotent()
  async createNote(): Promise<NoteRow> {
    return Object.assign(await this.insert(), { [AUDIT]: 'ada' });
  }

  @Mutation(() => Note)
  @Idempotent()
  async createPlainNote(): Promise<NoteRow> {
    return Object.assign(await this.insert(), { audit: 'ada' });
  }

  @ResolveField(() => String)
  createdBy(@Parent() note: NoteRow): string {
    return note[AUDIT] ?? note.audit ?? 'unknown';
  }

  private async insert(): Promise<Note> {
    const { rows } = await pool.query<Note>('INSERT INTO notes DEFAULT VALUES RETURNING id');
    return rows[0];
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
  providers: [NotesResolver],
})
class NotesModule {}

describe('adversary 103: a symbol-keyed member of a parent', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv103_gql_symbol_key', {
      module: NotesModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE notes (id serial PRIMARY KEY)');
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

  it('control: the tag under a string key replays the same answer', async () => {
    const query = 'mutation { createPlainNote { id createdBy } }';
    const firstAnswer = await post('adv103-symbol-plain', query);
    const again = await post('adv103-symbol-plain', query);
    expect(firstAnswer.body.data.createPlainNote.createdBy).toBe('ada');
    expect(again.body.data).toEqual(firstAnswer.body.data);
  });

  it('the replay reads the symbol-keyed tag', async () => {
    const query = 'mutation { createNote { id createdBy } }';
    const firstAnswer = await post('adv103-symbol', query);
    const again = await post('adv103-symbol', query);
    // eslint-disable-next-line no-console
    console.log('SYMBOL', firstAnswer.text, again.text);
    expect(firstAnswer.body.data.createNote.createdBy).toBe('ada');
    expect(again.body.data).toEqual(firstAnswer.body.data);
  });
});
