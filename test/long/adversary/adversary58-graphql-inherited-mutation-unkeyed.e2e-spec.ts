import { jest } from '@jest/globals';
import { Module, type Type } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
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
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 58: `@Idempotent()` on a resolver class leaves the mutations it inherits
 * unkeyed, silently: Nest's own recipe for shared resolvers (docs.nestjs.com, GraphQL
 * "Resolvers", "Class inheritance": a `BaseResolver(classRef)` function returning an abstract
 * `@Resolver({ isAbstract: true })` class, extended by each concrete resolver) puts the
 * `create` mutation in the base; the app marks its concrete resolver `@Idempotent()`, as
 * graphql.md says to, and every retry of a lost answer creates the row again.
 *
 *   function CrudResolver<T>(classRef: Type<T>) {
 *     @Resolver({ isAbstract: true }) abstract class Host {
 *       @Mutation(() => classRef, { name: `create${classRef.name}` }) create(@Args('name') name) {...}
 *     }
 *     return Host;
 *   }
 *   @Resolver(() => Project) @Idempotent() class ProjectsResolver extends CrudResolver(Project) {}
 *
 * What happens: the class form of `@Idempotent()` (lib/idempotent.decorator.ts:189-207) walks
 * `Object.getOwnPropertyNames(prototype)` of the decorated class only: `create` is the base
 * class's, so no interceptor is put on it. Nest's resolver explorer finds it through the
 * prototype chain and serves `createProject`, which runs with the client's `Idempotency-Key`
 * ignored: nothing is claimed or stored, no replay marker, and the retry inserts a second
 * project. The start-up checks (lib/routes/idempotent-routes.check.ts) see only decorated
 * methods, so nothing says so, at start-up or at the call. (A controller extending a base
 * controller's `@Post()` routes is left the same way; options.md states that for controllers:
 * "its own methods, not inherited ones".)
 *
 * Expected: "On a resolver class, `@Idempotent()` covers each `@Mutation()` of the class"
 * (docs/guides/graphql.md, "On resolver classes"); "Where it cannot work, the app does not
 * start ... rather than leaving a method that reads as protected and is not"
 * (docs/reference/options.md). Either the inherited mutation is keyed (one row, the retry
 * replayed), or the start-up says it is not.
 *
 * Control: the same mutation declared in the concrete resolver itself: one row, the retry
 * replayed with the marker. Passes on both drivers.
 *
 * Severity: high (the client sends a key and its retry runs the mutation again: effects
 * twice, with nothing said anywhere).
 *
 * Fixed: the class form covers the methods the class inherits (`classMethodDescriptors`,
 * lib/idempotent.decorator.ts), each wrapped on the class itself, its base left as it was.
 */
let pool: Pool;

@ObjectType()
class Project {
  @Field(() => Int)
  id!: number;

  @Field()
  name!: string;
}

@ObjectType()
class Board {
  @Field(() => Int)
  id!: number;

  @Field()
  name!: string;
}

async function insert(name: string): Promise<{ id: number; name: string }> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO created (name) VALUES ($1) RETURNING id',
    [name],
  );
  return { id: rows[0].id, name };
}

/** Nest's class-inheritance recipe, with the shared mutation in the base. */
function CrudResolver<T>(classRef: Type<T>) {
  @Resolver({ isAbstract: true })
  abstract class CrudResolverHost {
    @Mutation(() => classRef, { name: `create${classRef.name}` })
    create(@Args('name') name: string): Promise<{ id: number; name: string }> {
      return insert(name);
    }
  }
  return CrudResolverHost;
}

@Resolver(() => Project)
@Idempotent()
class ProjectsResolver extends CrudResolver(Project) {
  @Query(() => Int)
  ping(): number {
    return 1;
  }
}

@Resolver(() => Board)
@Idempotent()
class BoardsResolver {
  @Mutation(() => Board)
  createBoard(@Args('name') name: string): Promise<{ id: number; name: string }> {
    return insert(name);
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

describe.each(GRAPHQL_DRIVERS)(
  'adversary 58: a mutation inherited by an @Idempotent() resolver class, on %s',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [ProjectsResolver, BoardsResolver],
      })
      class CrudModule {}
      fixture = await startPoolApp(`adv58_inherited_${driver}`, {
        module: CrudModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE created (id serial PRIMARY KEY, name text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(async () => {
      await fixture?.close();
    });

    const send = (key: string, query: string) =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', key)
        .timeout(5_000)
        .send({ query });
    const rows = async (name: string) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM created WHERE name = $1', [name])).rows[0]
          .count,
      );

    async function sentTwice(field: string, name: string) {
      const query = `mutation { ${field}(name: "${name}") { id name } }`;
      const first = await send(name, query);
      const replay = await send(name, query);
      return { first: first.body as object, replay: replay.body as object, rows: await rows(name) };
    }

    it('control: the mutation the class declares itself: once, its retry replayed', async () => {
      const { first, replay, rows } = await sentTwice('createBoard', `${driver}-board`);
      expect(replay).toEqual({
        ...first,
        extensions: { idempotency: { replayed: ['createBoard'] } },
      });
      expect(rows).toBe(1);
    });

    it('the mutation the class inherits: once, its retry replayed', async () => {
      const { first, replay, rows } = await sentTwice('createProject', `${driver}-project`);
      expect(replay).toEqual({
        ...first,
        extensions: { idempotency: { replayed: ['createProject'] } },
      });
      expect(rows).toBe(1);
    });
  },
);
