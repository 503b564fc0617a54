import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { request as httpRequest } from 'node:http';
import { type Pool, type PoolClient } from 'pg';
import { type DataSource } from 'typeorm';
import {
  IdempotencyModule,
  type IdempotencyModuleBaseOptions,
  Idempotent,
} from '../../lib/index.js';
import { type AdapterName, bootstrapTestApp } from './bootstrap.js';

/** The handler's side effect, and a row a test locks to make the handler wait. */
export const TIMEOUTS_DDL = `
  CREATE TABLE IF NOT EXISTS work (id serial PRIMARY KEY, tag text NOT NULL);
  CREATE TABLE IF NOT EXISTS locks (id int PRIMARY KEY);
  INSERT INTO locks (id) VALUES (1) ON CONFLICT DO NOTHING;`;

/**
 * What the handler meets on its first attempt of a tag (its retries run plainly):
 * - `statement_timeout`, `lock_timeout`: set for its transaction, then a slow statement or a
 *   row another connection holds locked (row 1 of `locks`);
 * - `query_timeout`: a statement slower than the pool's `query_timeout`;
 * - `idle_in_transaction`: idle in its transaction longer than the session allows, so that
 *   PostgreSQL closes the connection before the commit;
 * - `starved_pool`: every connection of the app's pool taken when it writes;
 * - `pause`: idle for `pauseMs` after its write, for the test to act on its connection;
 * - `slow_statement`: a 2 s statement after its write, for the test to act on its connection.
 */
export type Meet =
  | 'statement_timeout'
  | 'lock_timeout'
  | 'query_timeout'
  | 'idle_in_transaction'
  | 'starved_pool'
  | 'pause'
  | 'slow_statement';

export interface WorkBody {
  tag: string;
  meet?: Meet;
  pauseMs?: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const attempted = new Set<string>();
/** Calls the downstream route made, by tag: a replay must not call again. */
export const downstreamCalls = new Map<string, number>();

@Controller()
class TimeoutsController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('work')
  @Idempotent()
  async work(@Body() body: WorkBody) {
    const first = !attempted.has(body.tag);
    attempted.add(body.tag);
    const meet = first ? body.meet : undefined;
    if (meet === 'starved_pool') await this.withPoolTaken(() => this.write(body.tag));
    else await this.write(body.tag);
    switch (meet) {
      case 'statement_timeout':
        await this.dataSource.query('SET LOCAL statement_timeout = 100');
        await this.dataSource.query('SELECT pg_sleep(5)');
        break;
      case 'lock_timeout':
        await this.dataSource.query('SET LOCAL lock_timeout = 100');
        await this.dataSource.query('SELECT id FROM locks WHERE id = 1 FOR UPDATE');
        break;
      case 'query_timeout':
        await this.dataSource.query('SELECT pg_sleep(3)');
        break;
      case 'idle_in_transaction':
        await this.dataSource.query('SET LOCAL idle_in_transaction_session_timeout = 200');
        await sleep(700);
        break;
      case 'pause':
        await sleep(body.pauseMs ?? 1000);
        break;
      case 'slow_statement':
        await this.dataSource.query('SELECT pg_sleep(2)');
        break;
    }
    return { tag: body.tag };
  }

  /** Writes, then calls another system over HTTP, letting its failure through. */
  @Post('downstream')
  @Idempotent()
  async downstream(@Body() body: { tag: string; url: string }) {
    await this.write(body.tag);
    downstreamCalls.set(body.tag, (downstreamCalls.get(body.tag) ?? 0) + 1);
    await post(body.url);
    return { tag: body.tag };
  }

  private async write(tag: string): Promise<void> {
    await this.dataSource.query('INSERT INTO work (tag) VALUES ($1)', [tag]);
  }

  /** Runs `work` while every connection of the app's pool is checked out (by other work). */
  private async withPoolTaken(work: () => Promise<void>): Promise<void> {
    const pool = (this.dataSource.driver as unknown as { master: Pool }).master;
    const taken: PoolClient[] = [];
    try {
      for (let i = 0; i < (pool.options.max ?? 10); i++) taken.push(await pool.connect());
      await work();
    } finally {
      for (const client of taken) client.release();
    }
  }
}

/** A POST with node's HTTP client (as axios does in node): its errors carry `code`. */
function post(url: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'POST' }, (res) => {
      res.resume();
      res.on('end', () => resolve());
    });
    req.on('error', reject);
    req.end('{}');
  });
}

/**
 * The app of the timeout tests: the module on a DataSource whose pool takes `pool`'s options
 * (`query_timeout`, `connectionTimeoutMillis`, `max`). Its migrations were run beforehand, on
 * a connection of their own, so that a short `query_timeout` bounds only the requests.
 */
export async function createTimeoutsApp(options: {
  databaseUrl: string;
  adapter: AdapterName;
  pool?: { query_timeout?: number; connectionTimeoutMillis?: number; max?: number };
  idempotency?: IdempotencyModuleBaseOptions;
}): Promise<INestApplication> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: options.databaseUrl,
        extra: { max: 4, ...options.pool },
        logging: false,
      }),
      IdempotencyModule.forRoot({ tenant: () => 1, ...options.idempotency }),
    ],
    controllers: [TimeoutsController],
  })
  class TimeoutsAppModule {}
  return bootstrapTestApp(TimeoutsAppModule, options.adapter);
}
