import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  createUnionType,
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
 * Adversary, round 45b: a mutation that returns a result union (`Document | NotFound`, the
 * common "errors as data" result type) is refused as too large (`response_too_large`, its
 * effects rolled back, the error stored for ever under the key) because the member has a
 * large field the client did not select. Round 12's break, back for every union and
 * interface.
 *
 * The app (Apollo on Express, the pool seam, code first): `Document { id title body }`, `body`
 * a long text (1.2 MB: a contract, a manual). `RenameResult = createUnionType({ types: () =>
 * [Document, NotFound], resolveType: (v) => ('title' in v ? Document : NotFound) })`.
 * `renameDocument(id, title)` (`@Idempotent()`) updates the title and returns the row as
 * `UPDATE ... RETURNING id, title, body` gives it. The client selects `{ __typename ... on
 * Document { id title } }`: some 80 bytes.
 *
 * What happens: since round 44 (3), `outputWire` keeps the whole own data of a member of a
 * union or an interface, selected or not (lib/graphql/wire-value.ts:203-211, `ownData`,
 * wire-value.ts:344-356), under `__kept`, "since its resolveType() runs again on a replay".
 * `body`'s 1.2 MB go into the stored answer, whose size is checked against the route's
 * `maxResponseBytes` (1 MiB by default, lib/graphql/run-field.ts:130-138): the rename rolls
 * back and `response_too_large` (500) is the key's answer for ever. The guide says the
 * contrary: "an unselected large field does not count against `maxResponseBytes`"
 * (docs/guides/graphql.md, "What is stored, and replayed"). The same mutation typed
 * `Document` (not the union) answers and stores 80 bytes. Below the limit, every key of such a
 * mutation stores the whole row (a cyclic relation graph, a loaded list of children) that no
 * client asked for.
 *
 * Expected: the renamed document's id and title, stored and replayed, the title 'final'.
 *
 * Control: the same rename through a mutation typed `Document` (not a union): answered,
 * replayed, committed. Passes.
 *
 * Severity: medium (a legit idiom refused with a permanent 500; nothing double, nothing held).
 */
let pool: Pool;

@ObjectType()
class Document {
  @Field(() => Int)
  id!: number;

  @Field()
  title!: string;

  @Field()
  body!: string;
}

@ObjectType()
class NotFound {
  @Field()
  message!: string;
}

const RenameResult = createUnionType({
  name: 'RenameResult',
  types: () => [Document, NotFound] as const,
  resolveType: (value: object) => ('title' in value ? Document : NotFound),
});

async function rename(id: number, title: string): Promise<Document> {
  const { rows } = await pool.query<Document>(
    'UPDATE documents SET title = $2 WHERE id = $1 RETURNING id, title, body',
    [id, title],
  );
  return rows[0];
}

@Resolver()
class DocumentsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => RenameResult)
  @Idempotent()
  renameDocument(
    @Args('id', { type: () => Int }) id: number,
    @Args('title') title: string,
  ): Promise<typeof RenameResult> {
    return rename(id, title);
  }

  @Mutation(() => Document)
  @Idempotent()
  renameDocumentTyped(
    @Args('id', { type: () => Int }) id: number,
    @Args('title') title: string,
  ): Promise<Document> {
    return rename(id, title);
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
  providers: [DocumentsResolver],
})
class DocumentsModule {}

describe('adversary 45b: a union member whose unselected field is large', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv45b_union_large', {
      module: DocumentsModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE documents (id int PRIMARY KEY, title text, body text)');
        await admin.query(
          `INSERT INTO documents SELECT i, 'draft', repeat('lorem ipsum ', 100000)
           FROM generate_series(1, 2) AS i`,
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send({ query });
  const title = async (id: number) =>
    (
      await fixture.admin.query<{ title: string }>('SELECT title FROM documents WHERE id = $1', [
        id,
      ])
    ).rows[0].title;
  const replayedAs = (first: { body: object }, field: string) => ({
    ...first.body,
    extensions: { idempotency: { replayed: [field] } },
  });

  it('control: the mutation typed Document: answered, replayed, committed', async () => {
    const query = 'mutation { renameDocumentTyped(id: 1, title: "final") { id title } }';
    const first = await send('typed-1', query);
    const replay = await send('typed-1', query);
    expect(first.body).toEqual({ data: { renameDocumentTyped: { id: 1, title: 'final' } } });
    expect(replay.body).toEqual(replayedAs(first, 'renameDocumentTyped'));
    expect(await title(1)).toBe('final');
  });

  it('the union result, body not selected: answered, replayed, committed', async () => {
    const query =
      'mutation { renameDocument(id: 2, title: "final") { __typename ... on Document { id title } } }';
    const first = await send('union-2', query);
    const replay = await send('union-2', query);
    // Observed: data null, errors [{ extensions.code: 'response_too_large' }], title 'draft'.
    expect(first.body).toEqual({
      data: { renameDocument: { __typename: 'Document', id: 2, title: 'final' } },
    });
    expect(replay.body).toEqual(replayedAs(first, 'renameDocument'));
    expect(await title(2)).toBe('final');
  });
});
