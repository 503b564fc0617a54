import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  createUnionType,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { getNamedType, type GraphQLResolveInfo, responsePathAsArray } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-07): the library calls `resolveType()` ahead (`memberAhead`, and
 * `memberType`) with the info graphql-js gives the union's own field (its `fieldName`,
 * `fieldNodes`, `returnType`, `parentType` and `path`, list indexes in the paths of the fields
 * under an item; the operation's schema, fragments, root value, operation and variables),
 * carried down the walk and the read-ahead as a `FieldAt` (lib/graphql/member-info.ts,
 * lib/graphql/wire-value.ts).
 *
 * Adversary 116 (graphql; the member a union's `resolveType()` tells AHEAD, with the mutation's
 * `info`, is the member the library stores: lib/graphql/wire-value.ts `readAhead` ->
 * `memberAhead` (`resolve(value, call.context, call.info, type)`), `walkValue` (`told ?
 * told.member : ...`), commit 1e7fd3bf).
 *
 * User code: one `resolveType()` shared by the app's unions, which looks up the union it is
 * asked about in `info.returnType` and falls back to a default member: `const tellers = { Pet:
 * (v) => ('meow' in v ? 'Cat' : 'Dog') }; createUnionType({ name: 'Pet', types: () => [Cat,
 * Dog], resolveType: (value, _ctx, info) => tellers[getNamedType(info.returnType).name]?.(value)
 * ?? 'Dog' })`, on `@ObjectType() class Owner { @Field(() => Pet) pet }`; `@Mutation(() =>
 * Owner) @Idempotent() addOwner()`; the client selects `{ id pet { __typename ... on Cat { id
 * meow } ... on Dog { bark } } }`.
 *
 * Code path: `memberAhead` calls `resolveType()` with `call.info`, the MUTATION's info
 * (`returnType: Owner!`, `fieldName: 'addOwner'`), not the `pet` field's; the member it tells
 * (`Dog`) is kept (`told.member`) and `walkValue` stores the value as that member, while
 * graphql-js' own call (the `pet` field's info) tells `Cat` and the first call answers `Cat`.
 * The replay answers the stored `Dog`.
 *
 * Docs quote (docs/guides/graphql.md): "A union's or an interface's member is read at its
 * field's turn too, told by its `resolveType()` (or each member's `isTypeOf()`), which the
 * library calls there as graphql-js does"; the promise: a replay answers exactly what the
 * first call answered.
 *
 * Severity: high (the replay of a committed mutation answers `data: null` with "Cannot return
 * null for non-nullable field Dog.bark." where the first call answered the owner and its Cat).
 *
 * Fails now (un-skipped): first call `{"data":{"addOwner":{"id":2,"pet":{"__typename":"Cat",
 * "id":1,"meow":"meow"}}}}`; replay `{"errors":[{"message":"Cannot return null for non-nullable
 * field Dog.bark.",...,"path":["addOwner","pet","bark"]...}],"data":null,"extensions":
 * {"idempotency":{"replayed":["addOwner"]}}}`.
 *
 * Controls: the same union returned by the mutation itself (`@Mutation(() => Pet) addPet()`,
 * where the mutation's info IS the union field's) answers the Cat and replays it byte for byte.
 *
 * Suggested fix: call `resolveType()` ahead with an `info` built for the union's own field
 * (`fieldName`, `fieldNodes`, `returnType`, `parentType`, `path` of that field), or store the
 * member graphql-js told (the completed answer's `__typename` / the member its own call
 * returned) rather than the member told ahead; at least check that both agree and store
 * graphql-js' member.
 */
let pool: Pool;
const calls: string[] = [];

@ObjectType()
class Cat {
  @Field(() => Int)
  id!: number;
  @Field()
  meow!: string;
}

@ObjectType()
class Dog {
  @Field(() => Int)
  id!: number;
  @Field()
  bark!: string;
}

const tellers: Record<string, (value: object) => string> = {
  Pet: (value) => ('meow' in value ? 'Cat' : 'Dog'),
};

const Pet = createUnionType({
  name: 'Pet',
  types: () => [Cat, Dog] as const,
  resolveType(value: object, _ctx: unknown, info: GraphQLResolveInfo) {
    calls.push(`${info.fieldName}@${responsePathAsArray(info.path).join('.')}`);
    // One resolver for every union of the app: the union's own teller, else its default member.
    return tellers[getNamedType(info.returnType).name]?.(value) ?? 'Dog';
  },
});

@ObjectType()
class Owner {
  @Field(() => Int)
  id!: number;
  @Field(() => Pet)
  pet!: Cat | Dog;
}

const make = async (): Promise<Owner> => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO owners DEFAULT VALUES RETURNING id',
  );
  const cat = Object.assign(new Cat(), { id: 1, meow: 'meow' });
  return Object.assign(new Owner(), { id: rows[0].id, pet: cat });
};

@Resolver(() => Owner)
class OwnerResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }
  @Mutation(() => Owner)
  @Idempotent()
  async addOwner(): Promise<Owner> {
    return make();
  }
  @Mutation(() => Owner)
  async addOwnerPlain(): Promise<Owner> {
    return make();
  }
  @Mutation(() => Pet)
  @Idempotent()
  async addPet(): Promise<Cat | Dog> {
    return (await make()).pet;
  }
  @Mutation(() => Pet)
  async addPetPlain(): Promise<Cat | Dog> {
    return (await make()).pet;
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
  providers: [OwnerResolver],
})
class OwnerModule {}

describe("adversary 116: the member a union's resolveType() tells ahead is stored", () => {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp('adv116_gql_resolvetype_ahead_member', {
      module: OwnerModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE owners (id serial PRIMARY KEY)');
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
  const member = '{ __typename ... on Cat { id meow } ... on Dog { bark } }';
  const twice = async (query: string, key: string) => {
    const first = await post(query, key);
    const again = await post(query, key);
    // eslint-disable-next-line no-console
    console.log('AHEAD MEMBER', query, first.text, again.text);
    expect(first.body.errors).toBeUndefined();
    expect(again.body.extensions?.idempotency?.replayed).toHaveLength(1);
    expect(again.body.errors).toBeUndefined();
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
    return first;
  };

  it('control: the union returned by the mutation itself replays the member it answered', async () => {
    const first = await twice(`mutation { addPet ${member} }`, 'adv116-ahead-ctl');
    expect(first.body.data.addPet.__typename).toBe('Cat');
  });

  it("a union under the mutation's object replays the member the first call answered", async () => {
    const first = await twice(`mutation { addOwner { id pet ${member} } }`, 'adv116-ahead');
    expect(first.body.data.addOwner.pet.__typename).toBe('Cat');
  });
});
