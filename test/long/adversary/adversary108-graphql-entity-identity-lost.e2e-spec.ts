import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
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
import { Exclude } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 108 (graphql): the round-107 identity fix (a replay's parent moved onto its own
 * node of the shared graph, `{ p, s }`) is made for parents whose own data is under
 * `__parent` only. A line that is an instance of an entity class class-transformer knows
 * (one `@Exclude()` column is enough) keeps all its data under `__kept` (written into the same
 * shared graph as a `{ p }` ref, round 107), and a `__kept` ref never names its own object's
 * node (`s`), so no replay adopts it: `line.order.lines[i]` is the graph's copy of the line,
 * never the replay's parent. Ordinary ORM code finding a line among its order's lines by
 * identity answers otherwise on the replay, exactly the round-107 break, for entities.
 *
 * User code: round 107's app (`Order { id; lines: [Line] }`, `Line { id }`, the line's
 * `order` back-reference no field, `position(@Parent() line) { return
 * line.order.lines.indexOf(line) + 1 }`, `siblings` by `!==`), the lines returned as
 * instances of `Line` (`Object.assign(new Line(), row)`, as TypeORM gives entities) whose
 * class has one `@Exclude() note` column; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (`byClass`: all its data in `kept`) ->
 * `writeKept` (`keptData`, source its wire) -> `writeParents` (`wire[KEPT] =
 * parentRef(root)`, no `s` for a `KEPT` holder) -> replay: `fromWire` end adopts only
 * `parentRefSource(stored[PARENT])`.
 *
 * Docs quote (docs/guides/graphql.md): "a replay's resolvers get one object there again
 * (`line.order === otherLine.order`, as at the first call, objects of class-transformer
 * classes too ...). Where the parent itself is reached back through its own data
 * (`line.order.lines[i]`, ...), a replay's parent is that very object, as at the first call
 * (`line.order.lines.indexOf(line)` answers the same)."
 *
 * Severity: high (a wrong answer replayed: positions 1, 2, 3 become 0, 0, 0; siblings 2
 * become 3).
 *
 * Fails now (un-skipped): first answer positions 1, 2, 3 and siblings 2; the replay answers
 * positions 0, 0, 0 and siblings 3.
 *
 * Controls: the same app, the lines plain rows (no class): the replay answers 1, 2, 3 and 2,
 * the same bytes.
 *
 * Suggested fix: give a `KEPT` holder's ref its object's node too (`parentRef(root,
 * typed.nodes.get(source))` with the resolver's object as `source`, not its wire) and adopt
 * it in `fromWire` as a `PARENT`'s is (a node named by its class keeps that naming).
 *
 * Fixed (session of 2026-12-07): wire-value.ts `writeKept` notes the resolver's object (not
 * its wire) as the `KEPT` data's source, so `writeParents` gives a `KEPT` ref its object's
 * node too (`{ p, s }`), and `fromWire` adopts `s` from `PARENT` or else `KEPT`
 * (parent-identity.ts, the node's class naming kept beside the built members).
 */
let pool: Pool;

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;

  // An entity's column no client sees (class-transformer leaves it out of every answer).
  @Exclude()
  note?: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line])
  lines!: Line[];
}

type LineRow = Line & { qty: number; unitPrice: number; order: OrderRow };
type OrderRow = Order & { lines: LineRow[] };

@Resolver(() => Line)
class LinesResolver {
  @ResolveField(() => Int)
  subtotal(@Parent() line: LineRow): number {
    return line.qty * line.unitPrice;
  }

  @ResolveField(() => Int)
  lineCount(@Parent() line: LineRow): number {
    return line.order.lines.length;
  }

  @ResolveField(() => Int)
  position(@Parent() line: LineRow): number {
    return line.order.lines.indexOf(line) + 1;
  }

  @ResolveField(() => Int)
  siblings(@Parent() line: LineRow): number {
    return line.order.lines.filter((other) => other !== line).length;
  }
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async importOrder(
    @Args('n', { type: () => Int }) n: number,
    @Args('entity', { type: () => Boolean }) entity: boolean,
  ): Promise<OrderRow> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const order = { id: rows[0].id, lines: [] } as unknown as OrderRow;
    for (let i = 1; i <= n; i += 1) {
      const row = { id: i, qty: 2, unitPrice: i, order };
      // An ORM's entity (an instance of the class), or a plain row.
      order.lines.push(entity ? (Object.assign(new Line(), row) as LineRow) : row);
    }
    return order;
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
  providers: [OrdersResolver, LinesResolver],
})
class OrdersModule {}

describe('adversary 108: a class-transformer entity found by identity in its back-reference', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv108_gql_entity_identity', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(60_000)
      .send(JSON.stringify({ query }));

  const twice = async (key: string, entity: boolean) => {
    const query = `mutation { importOrder(n: 3, entity: ${entity}) { id lines { id position siblings } } }`;
    const first = await post(key, query);
    const again = await post(key, query);
    // eslint-disable-next-line no-console
    console.log('ENTITY IDENTITY', first.text, again.text);
    return { first, again };
  };

  it('control: plain rows found by identity replay the same data', async () => {
    const { first, again } = await twice('adv108-entity-identity-control', false);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.importOrder.lines.map((l: { position: number }) => l.position)).toEqual([
      1, 2, 3,
    ]);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('entities found by identity replay the same positions', async () => {
    const { first, again } = await twice('adv108-entity-identity', true);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.importOrder.lines.map((l: { position: number }) => l.position)).toEqual([
      1, 2, 3,
    ]);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['importOrder']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
