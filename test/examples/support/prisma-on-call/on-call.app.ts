import {
  Body,
  Controller,
  type DynamicModule,
  Global,
  Inject,
  Injectable,
  type INestApplication,
  Module,
  type OnApplicationShutdown,
  type OnModuleDestroy,
  Post,
  type Provider,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { PrismaPg } from '@prisma/adapter-pg';
import { readFileSync } from 'node:fs';
import { type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Pool } from 'pg';
import { Idempotent, IdempotencyModule } from '../../../../lib/index.js';
import { PrismaClient } from './generated/client.js';

/**
 * An on-call roster on Prisma 7 with `@prisma/adapter-pg`, built as the Prisma guide says (one
 * pg.Pool for the library and for Prisma): the app of prisma-batched-reads.e2e-spec.ts, whose
 * requests read with the calls Prisma batches (`findUnique`, `findUniqueOrThrow`, the array
 * `$transaction`) at the same moment, so that Prisma may put their reads in one batch.
 */
const PG_POOL = 'ON_CALL_PG_POOL';

@Injectable()
class OnCallPrisma extends PrismaClient implements OnModuleDestroy {
  constructor(@Inject(PG_POOL) pool: Pool) {
    super({ adapter: new PrismaPg(pool) });
  }

  async onModuleDestroy(): Promise<void> {
    await this.$disconnect();
  }
}

@Injectable()
class PoolShutdown implements OnApplicationShutdown {
  constructor(@Inject(PG_POOL) private readonly pool: Pool) {}

  async onApplicationShutdown(): Promise<void> {
    await this.pool.end();
  }
}

/** A wait that keeps no process alive (the suite ends while a request's bound is pending). */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms).unref());

/**
 * The first `count` requests of `group` wait here for each other, then go on together: their
 * next Prisma call is made in one tick, as the handlers of one claim batch make theirs.
 * Bounded, so that a request whose partners never came fails its test rather than hangs.
 */
const groups = new Map<string, { arrived: number; met: Promise<void>; meet: () => void }>();
function together(group: string, count: number): Promise<void> {
  let entry = groups.get(group);
  if (!entry) {
    let meet = () => {};
    const met = new Promise<void>((resolve) => (meet = resolve));
    entry = { arrived: 0, met, meet };
    groups.set(group, entry);
  }
  if (++entry.arrived >= count) entry.meet();
  return Promise.race([entry.met, sleep(5000)]).then(() => undefined);
}

/** How a request reads a doctor: the forms Prisma batches, and `findFirst`, which it does not. */
export type ReadForm = 'findUnique' | 'findUniqueOrThrow' | 'array' | 'interactive' | 'findFirst';

export interface LeaveBody {
  shift: string;
  /** The doctor who leaves. */
  doctorId: number;
  /** The other doctor of the shift, who must stay on call. */
  otherId: number;
  read: ReadForm;
}

export interface OwnReadBody {
  group: string;
  /** How many requests of the group read together. */
  of: number;
  name: string;
  read: ReadForm;
}

@Controller('on-call')
class OnCallController {
  constructor(private readonly prisma: OnCallPrisma) {}

  /** Reads a doctor by id in one of the forms. */
  private read(form: ReadForm, id: number) {
    const doctor = this.prisma.doctor;
    switch (form) {
      case 'findUnique':
        return doctor.findUnique({ where: { id } });
      case 'findUniqueOrThrow':
        return doctor.findUniqueOrThrow({ where: { id } });
      case 'array':
        return this.prisma
          .$transaction([doctor.findUnique({ where: { id } })])
          .then(([row]) => row);
      case 'interactive':
        return this.prisma.$transaction((tx) => tx.doctor.findUnique({ where: { id } }));
      case 'findFirst':
        return doctor.findFirst({ where: { id } });
    }
  }

  /**
   * A doctor leaves the shift if the other one is on call: "at least one doctor on call", kept
   * by SERIALIZABLE. Two doctors leaving at once read each other and write themselves: a
   * write skew, which SERIALIZABLE refuses (one of the two fails with 40001).
   */
  @Post('leave')
  @Idempotent({ isolationLevel: 'SERIALIZABLE' })
  async leave(@Body() body: LeaveBody) {
    await together(body.shift, 2);
    const other = await this.read(body.read, body.otherId);
    // Both have read before either writes: the two transactions overlap, whatever the timing.
    await together(`${body.shift}/read`, 2);
    if (!other?.onCall) return { left: false };
    await this.prisma.doctor.update({ where: { id: body.doctorId }, data: { onCall: false } });
    return { left: true };
  }

  /**
   * Writes a doctor, then reads it back with the others of its group: the row is the request's
   * own until it commits, so only a read in the request's own transaction finds it.
   */
  @Post('own-read')
  @Idempotent()
  async ownRead(@Body() body: OwnReadBody) {
    const { id } = await this.prisma.doctor.create({
      data: { shift: body.group, name: body.name, onCall: true },
    });
    await together(body.group, body.of);
    try {
      const row = await this.read(body.read, id);
      return { found: row?.id === id };
    } catch (error) {
      return { found: false, error: (error as Error).name };
    }
  }
}

@Global()
@Module({})
class OnCallDatabaseModule {
  static register(databaseUrl: string): DynamicModule {
    return {
      module: OnCallDatabaseModule,
      providers: [
        { provide: PG_POOL, useFactory: () => new Pool({ connectionString: databaseUrl }) },
        OnCallPrisma,
        PoolShutdown,
      ],
      exports: [PG_POOL, OnCallPrisma],
    };
  }
}

@Module({})
class OnCallAppModule {
  static register(databaseUrl: string, providers: Provider[]): DynamicModule {
    return {
      module: OnCallAppModule,
      providers,
      imports: [
        OnCallDatabaseModule.register(databaseUrl),
        IdempotencyModule.forRootAsync({
          inject: [PG_POOL],
          useFactory: (pool: Pool) => ({ globalKeys: true, pool }),
        }),
      ],
      controllers: [OnCallController],
    };
  }
}

/** Creates the library's tables and the roster's on an empty database. */
export async function migrateOnCall(databaseUrl: string): Promise<void> {
  const pool = new Pool({ connectionString: databaseUrl, max: 1 });
  try {
    await pool.query(readFileSync(join(process.cwd(), 'migrations/schema.sql'), 'utf8'));
    await pool.query(`CREATE TABLE doctors (
      id serial PRIMARY KEY, shift text NOT NULL, name text NOT NULL, on_call boolean NOT NULL)`);
  } finally {
    await pool.end();
  }
}

/** The roster app on Express, listening on a port of its own; `providers`: a test's own. */
export async function startOnCallApp(
  databaseUrl: string,
  logs: boolean,
  providers: Provider[] = [],
): Promise<{ app: INestApplication; base: string }> {
  const app = await NestFactory.create(OnCallAppModule.register(databaseUrl, providers), {
    abortOnError: false,
    ...(logs ? {} : { logger: false as const }),
  });
  try {
    await app.listen(0, '127.0.0.1');
  } catch (error) {
    await app.close();
    throw error;
  }
  const { port } = app.getHttpServer().address() as AddressInfo;
  return { app, base: `http://127.0.0.1:${port}` };
}
