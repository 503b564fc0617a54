/**
 * The app the benchmark drives: one piece of work (insert a row, answer it as JSON) behind a
 * plain route and behind an idempotent one, so that the ratio between them is the library's
 * cost. Run as its own process so that the load generator does not share its event loop.
 */
import 'reflect-metadata';
import { Body, Controller, type DynamicModule, Module, Post, type Type } from '@nestjs/common';
import { createRequire } from 'node:module';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { InjectDataSource, InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import {
  Column,
  CreateDateColumn,
  type DataSource,
  Entity,
  PrimaryGeneratedColumn,
  type Repository,
} from 'typeorm';
import { Redis } from 'ioredis';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../lib/index.js';
import { RedisClaimStore } from '../lib/redis/index.js';
import { DesignFloorController } from './design-floor.js';

interface OrderBody {
  amount: number;
  customer: string;
}

@Entity({ name: 'bench_orders' })
class BenchOrder {
  @PrimaryGeneratedColumn({ type: 'bigint' })
  id!: string;

  @Column({ type: 'int' })
  amount!: number;

  @Column({ type: 'text' })
  customer!: string;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt!: Date;
}

/**
 * Two kinds of work: one raw INSERT (the cheapest a handler can do, so the library's share is
 * at its largest), and the same row saved through a TypeORM repository, as most Nest
 * handlers write.
 */
class BenchWork {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    @InjectRepository(BenchOrder) private readonly orders: Repository<BenchOrder>,
  ) {}

  protected async ormWork(body: OrderBody) {
    const order = await this.orders.save(
      this.orders.create({ amount: body.amount, customer: body.customer }),
    );
    return { id: order.id, amount: order.amount, customer: order.customer, status: 'created' };
  }

  protected async work(body: OrderBody) {
    const rows = (await this.dataSource.query(
      'INSERT INTO bench_orders (amount, customer) VALUES ($1, $2) RETURNING id, created_at',
      [body.amount, body.customer],
    )) as { id: number; created_at: Date }[];
    return { id: rows[0].id, amount: body.amount, customer: body.customer, status: 'created' };
  }
}

@Controller()
class BenchController extends BenchWork {
  @Post('plain-orm')
  plainOrm(@Body() body: OrderBody) {
    return this.ormWork(body);
  }

  @Post('idempotent-orm')
  @Idempotent()
  idempotentOrm(@Body() body: OrderBody) {
    return this.ormWork(body);
  }

  /** The claim committed with the handler's write and its stored response: one commit. */
  @Post('one-commit-orm')
  @Idempotent({ oneCommit: true })
  oneCommitOrm(@Body() body: OrderBody) {
    return this.ormWork(body);
  }

  /** The handler's write and its stored response in two commits (the pre-atomic path). */
  @Post('split-orm')
  @Idempotent({ atomic: false })
  splitOrm(@Body() body: OrderBody) {
    return this.ormWork(body);
  }

  @Post('plain')
  plain(@Body() body: OrderBody) {
    return this.work(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: OrderBody) {
    return this.work(body);
  }

  /** The claim committed with the handler's write and its stored response: one commit. */
  @Post('one-commit')
  @Idempotent({ oneCommit: true })
  oneCommit(@Body() body: OrderBody) {
    return this.work(body);
  }

  /** The handler's write and its stored response in two commits (the pre-atomic path). */
  @Post('split')
  @Idempotent({ atomic: false })
  split(@Body() body: OrderBody) {
    return this.work(body);
  }
}

const url = process.env.DATABASE_URL!;

/**
 * The competitor's routes, the same work behind `@node-idempotency/nestjs` on Redis, when
 * `COMPETITOR_REDIS_URL` is set. It is installed in `bench/competitor/` (its peer range stops
 * at Nest 10), so it is loaded from there; it runs on this project's Nest 12.
 */
function competitor(): { imports: DynamicModule[]; controllers: Type[] } {
  const redisUrl = process.env.COMPETITOR_REDIS_URL;
  if (!redisUrl) return { imports: [], controllers: [] };
  const load = createRequire(new URL('../../bench/competitor/package.json', import.meta.url));
  const { NodeIdempotencyModule, Idempotent: TheirIdempotent } = load(
    '@node-idempotency/nestjs',
  ) as {
    NodeIdempotencyModule: { forRootAsync(options: object): DynamicModule };
    Idempotent: (options?: object) => MethodDecorator;
  };

  @Controller()
  class CompetitorController {
    constructor(
      @InjectDataSource() private readonly dataSource: DataSource,
      @InjectRepository(BenchOrder) private readonly orders: Repository<BenchOrder>,
    ) {}

    @Post('competitor')
    @TheirIdempotent()
    async raw(@Body() body: OrderBody) {
      const rows = (await this.dataSource.query(
        'INSERT INTO bench_orders (amount, customer) VALUES ($1, $2) RETURNING id, created_at',
        [body.amount, body.customer],
      )) as { id: number }[];
      return { id: rows[0].id, amount: body.amount, customer: body.customer, status: 'created' };
    }

    @Post('competitor-orm')
    @TheirIdempotent()
    async orm(@Body() body: OrderBody) {
      const order = await this.orders.save(
        this.orders.create({ amount: body.amount, customer: body.customer }),
      );
      return { id: order.id, amount: order.amount, customer: order.customer, status: 'created' };
    }
  }
  return {
    imports: [
      NodeIdempotencyModule.forRootAsync({
        storage: { adapter: 'redis', options: { url: redisUrl } },
      }),
    ],
    controllers: [CompetitorController],
  };
}

/**
 * The same work with its keys in our Redis claim store (`atomic: false`, as that store
 * requires), on the Redis the competitor uses, when `COMPETITOR_REDIS_URL` is set.
 */
function onRedis(): { stores: Record<string, RedisClaimStore>; controllers: Type[] } {
  const redisUrl = process.env.COMPETITOR_REDIS_URL;
  if (!redisUrl) return { stores: {}, controllers: [] };

  @Controller()
  class RedisStoreController extends BenchWork {
    @Post('redis')
    @Idempotent({ claimStore: 'redis', atomic: false })
    redis(@Body() body: OrderBody) {
      return this.work(body);
    }

    @Post('redis-orm')
    @Idempotent({ claimStore: 'redis', atomic: false })
    redisOrm(@Body() body: OrderBody) {
      return this.ormWork(body);
    }
  }
  return {
    stores: { redis: new RedisClaimStore(new Redis(redisUrl), { prefix: 'bench:' }) },
    controllers: [RedisStoreController],
  };
}

const theirs = competitor();
const redis = onRedis();

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url,
      migrations: [...IDEMPOTENCY_MIGRATIONS],
      migrationsRun: true,
      entities: [BenchOrder],
      extra: { max: 20 },
    }),
    TypeOrmModule.forFeature([BenchOrder]),
    // REPLAY_CACHE_SIZE=0: every replay reads PostgreSQL, as a retry landing on another
    // instance does.
    IdempotencyModule.forRoot({
      globalKeys: true,
      replayCacheSize: Number(process.env.REPLAY_CACHE_SIZE ?? 10_000),
      claimStores: redis.stores,
    }),
    ...theirs.imports,
  ],
  controllers: [
    BenchController,
    DesignFloorController,
    ...theirs.controllers,
    ...redis.controllers,
  ],
})
class BenchModule {}

const adapter =
  process.env.HTTP_ADAPTER === 'fastify' ? new FastifyAdapter() : new ExpressAdapter();
const app = await NestFactory.create(BenchModule, adapter, { rawBody: true, logger: false });
await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
console.log(`listening on ${(app.getHttpServer().address() as { port: number }).port}`);
process.once('SIGTERM', () => void app.close().then(() => process.exit(0)));
