import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import { Field, GraphQLModule, Int, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-07): lib/graphql/wire-value.ts `storeAliasReads` answers each later
 * alias the value the walk gives of its read (the list a generator gave, not the spent
 * generator), and `readObjectAhead` iterates a later alias's one-shot list at its own key's
 * turn (`materialized` keeps its items for the walk), as graphql-js completes it.
 *
 * Adversary 115 (graphql; read-through of adversary 112/114's per-alias reads, alias-reads.ts,
 * wire-value.ts `storeAliasReads`).
 *
 * A getter field of a list of scalars that gives a one-shot iterable, signing each URL as it
 * is read (a generator; an iterator helper's lazy `map()`), selected under two aliases (`{ a:
 * urls b: urls }`, a thumbnail and a download link). graphql-js reads the getter once per alias
 * and iterates each read: `a` n=1,2, `b` n=3,4. The library reads it once per alias too
 * (`readsPerAlias`: a getter's leaf field), walks `b`'s read (`storeAliasReads` ->
 * `walkValue` -> `materialized`, which iterates the generator to its end) and stores its wire
 * form (`ALIASED`, n=3,4), but answers the FIRST answer's `b` with the read itself (`item =
 * value`: the generator object, now used up), not the list it read: graphql-js iterates the
 * spent generator and the first answer's `b` is `[]`. The replay answers the stored `b`,
 * n=3,4. The first key's read is given as the list read (`a` is right).
 *
 * User code: `@ObjectType() class Gallery { @Field(() => Int) id; @Field(() => [String]) get
 * urls(): Iterable<string> { return signAll(this.paths) } }` with `function* signAll(paths) {
 * for (const p of paths) yield signer.sign(p) }` and one signer whose nonce counts up;
 * `@Mutation(() => Gallery) @Idempotent() makeGallery()`; the client selects `{ a: urls b:
 * urls }`; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `storeAliasReads` (`const { wire } = await
 * walkValue(walk, type, value, nodes)`, then `const item = isThenable(promised) ?
 * Promise.resolve(value) : value`: the one-shot iterable itself, never `walkValue`'s `value`,
 * the array read), answered by `answerAliasesAt` / placed-reads.ts to `b`.
 *
 * Docs quote (docs/guides/graphql.md): "a generator or a `Map`'s `values()` is read once, and
 * the first answer is given the list that was read and stored"; "So is such a getter's scalar
 * or enum field (or list of them) selected under several aliases at one place ...: it is read
 * once per alias, each at its own key's turn as GraphQL reads it, and each alias answers its
 * own read, at the first call and on a replay".
 *
 * Severity: high (the first answer of a committed mutation is not the app's, `b: []`, and the
 * replay answers otherwise, `b` with two URLs).
 *
 * Fails now (un-skipped): without the library `{"a":["/g/1.jpg?n=1","/g/2.jpg?n=2"],"b":
 * ["/g/1.jpg?n=3","/g/2.jpg?n=4"]}`; first call `{"data":{"makeGallery":{"a":["/g/1.jpg?n=1",
 * "/g/2.jpg?n=2"],"b":[]}}}`; replay `{"data":{"makeGallery":{"a":[...n=1,n=2],"b":
 * ["/g/1.jpg?n=3","/g/2.jpg?n=4"]}},...}`.
 *
 * Also seen (review's scratch run, the same gallery also at `primary` and `lines[0]`, `{
 * primary { a: urls b: urls } lines { x: urls } }`): `b`'s generator is iterated only when the
 * walk reaches it, after the lines' reads, so the stored `b` is n=7,8 where the app signs it
 * n=3,4 (first answer `b: []`, replay `b` n=7,8).
 *
 * Controls: the same signing getter giving an Array (`fixedUrls`) under two aliases answers as
 * without the library, each alias its own signatures, and replays the same bytes.
 *
 * Suggested fix: in `storeAliasReads`, answer each alias the value `walkValue` gives for its
 * read (the list read from a one-shot iterable, as the first key's field is given), not the
 * read itself; and read a later alias's one-shot list at its own key's turn in `readAhead`
 * (it is now iterated only when the walk reaches it, after the rest of the object's reads).
 */
let pool: Pool;

/** A CDN signer whose nonce counts up, one signer for the app. */
const signer = {
  nonce: 0,
  sign(path: string): string {
    this.nonce += 1;
    return `${path}?n=${this.nonce}`;
  },
};

/** Signs each path as it is read: a lazy sequence, as an iterator helper's `map()` gives. */
function* signAll(paths: readonly string[]): Generator<string> {
  for (const path of paths) yield signer.sign(path);
}

@ObjectType()
class Gallery {
  @Field(() => Int)
  id: number;

  constructor(id: number) {
    this.id = id;
  }

  @Field(() => [String])
  get urls(): Iterable<string> {
    return signAll([`/g/1.jpg`, `/g/2.jpg`]);
  }

  @Field(() => [String])
  get fixedUrls(): Iterable<string> {
    return [`/g/1.jpg`, `/g/2.jpg`].map((path) => signer.sign(path));
  }
}

const makeGallery = async (): Promise<Gallery> => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO galleries DEFAULT VALUES RETURNING id',
  );
  signer.nonce = 0;
  return new Gallery(rows[0].id);
};

@Resolver(() => Gallery)
class GalleryResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Gallery)
  @Idempotent()
  async makeGallery(): Promise<Gallery> {
    return makeGallery();
  }

  @Mutation(() => Gallery)
  async makeGalleryPlain(): Promise<Gallery> {
    return makeGallery();
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
  providers: [GalleryResolver],
})
class GalleryModule {}

describe("adversary 115: a getter's one-shot list under a second alias", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv115_gql_alias_generator', {
      module: GalleryModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE galleries (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (query: string, key?: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .timeout(60_000);
    if (key) call.set('Idempotency-Key', key);
    return call.send(JSON.stringify({ query }));
  };

  const three = async (sel: string, key: string) => {
    const plain = await post(`mutation { makeGalleryPlain ${sel} }`);
    const first = await post(`mutation { makeGallery ${sel} }`, key);
    const again = await post(`mutation { makeGallery ${sel} }`, key);
    // eslint-disable-next-line no-console
    console.log('ALIAS GENERATOR', sel, plain.text, first.text, again.text);
    return { plain, first, again };
  };

  it('control: an array-valued signing getter under two aliases answers as without the library, and replays', async () => {
    const { plain, first, again } = await three('{ a: fixedUrls b: fixedUrls }', 'adv115-gen-ctl');
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.makeGallery)).toBe(
      JSON.stringify(plain.body.data.makeGalleryPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['makeGallery']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('a generator-valued signing getter under two aliases answers each alias its own list', async () => {
    const { plain, first, again } = await three('{ a: urls b: urls }', 'adv115-gen');
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.makeGallery)).toBe(
      JSON.stringify(plain.body.data.makeGalleryPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['makeGallery']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
