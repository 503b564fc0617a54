/**
 * A GraphQL app (Apollo on Express) whose `@Idempotent()` mutation answers a field behind
 * field middleware, as a process of its own: a test kills it between the answer's commit and
 * its completion with the middleware's output (middleware-outputs.ts). DATABASE_URL: the
 * database (with the library's schema and a `memberships` table); SLOW_MS: how long the
 * middleware takes; LEASE_MS: the routes' lease (a replay waits a third of it for pending
 * outputs). Prints `listening on <port>`.
 */
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import pg from 'pg';
import { IdempotencyModule, Idempotent } from '../../lib/index.js';
import { bootstrapTestApp } from './bootstrap.js';

const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is required');
const slowMs = Number(process.env.SLOW_MS ?? 0);
const leaseMs = Number(process.env.LEASE_MS ?? 30_000);
const pool = new pg.Pool({ connectionString: url, max: 4 });
pool.on('error', () => undefined);

@ObjectType()
class Member {
  @Field()
  name!: string;
}

/** Nest's field middleware: the members by name, slowly (a call to another service). */
const byName: FieldMiddleware = async (_ctx, next) => {
  const members = (await next()) as Member[];
  await new Promise((resolve) => setTimeout(resolve, slowMs));
  return [...members].sort((a, b) => a.name.localeCompare(b.name));
};

@ObjectType()
class Team {
  @Field(() => Int)
  id!: number;

  @Field(() => [Member], { middleware: [byName], nullable: true })
  members!: Member[];
}

@Resolver(() => Team)
class TeamsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Team)
  @Idempotent()
  async joinTeam(): Promise<Team> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO memberships DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, members: [{ name: 'Cy' }, { name: 'Ada' }, { name: 'Bo' }] };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool, leaseMs }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [TeamsResolver],
})
class TeamsModule {}

const app = await bootstrapTestApp(TeamsModule, 'express');
await app.listen(0, '127.0.0.1');
const address = app.getHttpServer().address() as { port: number };
console.log(`listening on ${address.port}`);
