/**
 * Adversary 100 (graphql): own data of a resolver's object whose key is the schema name of a
 * renamed field (Nest reads that field from another property): the usual internal serial `id`
 * kept out of the schema, beside a public key exposed as `id`.
 *
 * User code:
 *   `@ObjectType() class Post { @HideField() id!: number; @Field(() => ID, { name: 'id' }) uuid!: string; }`
 *   and `@ResolveField() internalKey(@Parent() post: Post)` (or a comments loader) reading
 *   `post.id`, the serial, as Nest hands it the class instance.
 *
 * Code path: lib/graphql/field-places.ts `fieldPlaces` counts a renamed field's schema name
 * (`id`) as a field's place though Nest never reads the field there (it reads `uuid`), so
 * lib/graphql/wire-value.ts `walkValue` does not keep the own `id` under `__parent`; `fromWire`
 * then writes the stored field `id` (the uuid) at `id`, or, with `id` unselected, nothing.
 *
 * Docs quote (docs/guides/graphql.md): "Its own data that is not a field (a column kept out of
 * the schema) is kept too, under `__parent` ... A replay's resolvers get the same values as the
 * first call's, and the answer is the same bytes."
 *
 * Severity: high (a wrong answer replayed: the resolver reads another value under `id`; a
 * loader by `post.id` would find other rows or none, or throw on a uuid).
 *
 * Fails now: first `internalKey: 'number:2'`; replay with `id` selected `'string:post-2-uuid'`,
 * with `id` unselected `'undefined:undefined'`. The control (the same with the internal key
 * named `serial`) replays.
 *
 * Suggested fix: a place of a field is where Nest reads it: its property only (its schema name
 * only where it is not renamed); keep own data at a renamed field's schema name under
 * `__parent`, and on a replay write a renamed field only at its property (Nest's resolver reads
 * it there), leaving its schema name to such data.
 *
 * Fixed (session of 2026-12-06, sixth): a field's place is its class property only
 * (field-places.ts `fieldPlaces`), so own data under a renamed field's schema name is data
 * beside the fields, kept under `__parent` (never `__kept`, which holds a field's raw value by
 * its schema name: `besideFieldsMember`); `fromWire` writes each field at its property only
 * (never at its schema name when renamed), then the data beside the fields where no field's
 * property is. An answer stored before the fix never kept the hidden `id`: its replay's
 * `post.id` is undefined (it was the uuid), which no replay can make right.
 */
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  HideField,
  ID,
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

let pool: Pool;

@ObjectType()
class Post {
  /** The internal serial key, kept out of the schema. */
  @HideField()
  id!: number;

  /** The public key, in the schema as `id`. */
  @Field(() => ID, { name: 'id' })
  uuid!: string;
}

/** The same without the collision: the internal key named otherwise. */
@ObjectType()
class Note {
  serial!: number;

  @Field(() => ID, { name: 'id' })
  uuid!: string;
}

@Resolver(() => Post)
class PostsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Post)
  @Idempotent()
  async createPost(): Promise<Post> {
    const id = await insert();
    return Object.assign(new Post(), { id, uuid: `post-${id}-uuid` });
  }

  /** Reads the internal key, as a lookup of related rows would. */
  @ResolveField(() => String)
  internalKey(@Parent() post: Post): string {
    return `${typeof post.id}:${String(post.id)}`;
  }
}

@Resolver(() => Note)
class NotesResolver {
  @Mutation(() => Note)
  @Idempotent()
  async createNote(): Promise<Note> {
    const serial = await insert();
    return Object.assign(new Note(), { serial, uuid: `note-${serial}-uuid` });
  }

  @ResolveField(() => String)
  internalKey(@Parent() note: Note): string {
    return `${typeof note.serial}:${String(note.serial)}`;
  }
}

async function insert(): Promise<number> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO posts DEFAULT VALUES RETURNING id',
  );
  return rows[0].id;
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
  providers: [PostsResolver, NotesResolver],
})
class PostsModule {}

describe("adversary 100: own data named as a renamed field's schema name", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv100_gql_hidden_named_field', {
      module: PostsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE posts (id serial PRIMARY KEY)');
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

  const count = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM posts')).rows[0].n;

  const replays = async (key: string, query: string) => {
    const before = await count();
    const firstAnswer = await post(key, query);
    const again = await post(key, query);
    expect(await count()).toBe(before + 1);
    return { firstAnswer: firstAnswer.body as unknown, again: again.body as unknown };
  };

  it('control: an internal key named otherwise replays', async () => {
    const { firstAnswer, again } = await replays(
      'adv100-hidden-control',
      'mutation { createNote { id internalKey } }',
    );
    const answer = (firstAnswer as { data: { createNote: { id: string; internalKey: string } } })
      .data.createNote;
    expect(answer.internalKey).toMatch(/^number:\d+$/);
    expect((again as { data: unknown }).data).toEqual({ createNote: answer });
  });

  it('the @HideField() key `id` is read on a replay as first, `id` selected', async () => {
    const { firstAnswer, again } = await replays(
      'adv100-hidden-selected',
      'mutation { createPost { id internalKey } }',
    );
    const answer = (firstAnswer as { data: { createPost: { id: string; internalKey: string } } })
      .data.createPost;
    expect(answer.internalKey).toMatch(/^number:\d+$/);
    expect((again as { data: unknown }).data).toEqual({ createPost: answer });
  });

  it('the @HideField() key `id` is read on a replay as first, `id` not selected', async () => {
    const { firstAnswer, again } = await replays(
      'adv100-hidden-unselected',
      'mutation { createPost { internalKey } }',
    );
    const answer = (firstAnswer as { data: { createPost: { internalKey: string } } }).data
      .createPost;
    expect(answer.internalKey).toMatch(/^number:\d+$/);
    expect((again as { data: unknown }).data).toEqual({ createPost: answer });
  });
});
