import { PrismaPg } from '@prisma/adapter-pg';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { eq, type SQL, sql as dsql, TransactionRollbackError } from 'drizzle-orm';
import { integer, pgTable, text } from 'drizzle-orm/pg-core';
import { Kysely, PostgresDialect, type Transaction, sql as ksql } from 'kysely';
import pg, { type Pool, type PoolClient } from 'pg';
import Cursor from 'pg-cursor';
import { type DataSource, type EntityManager } from 'typeorm';
import { PrismaClient } from './generated/client.js';
import { type Isolation } from './handler-program.js';

/** The data layers a fuzz run may use: TypeORM (the library's own), and four on its pool seam. */
export type LayerName = 'typeorm' | 'pg' | 'prisma' | 'drizzle' | 'kysely';
export const LAYERS: LayerName[] = ['typeorm', 'pg', 'prisma', 'drizzle', 'kysely'];

/**
 * What a handler program needs of a data layer, at one level (the top, or inside one of its
 * transactions), each done the way the stack does it on its own: its insert and read APIs,
 * its transactions (nested ones as savepoints), its cursors, its array transactions.
 */
export interface Db {
  /** A statement as SQL text with `$n` values, through the layer's raw SQL. */
  rows<T>(text: string, values?: unknown[]): Promise<T[]>;
  /** An effect row inserted with the layer's insert API; the backend it ran on. */
  insertEffect(program: string, path: string): Promise<number>;
  /** The backend a read with the layer's read API ran on (Prisma: `findUnique`, batched). */
  whoami(): Promise<number>;
  /**
   * A transaction of the layer's (a savepoint when nested); `end` 'throw' ends it the layer's
   * way of giving up (Drizzle's and Kysely's `rollback()`, a thrown error elsewhere), which
   * throws out of it.
   */
  transaction(
    work: (db: Db) => Promise<void>,
    end: 'commit' | 'throw',
    isolation?: Isolation,
  ): Promise<void>;
  /** Writes all or none: Prisma's array `$transaction([...])`, a transaction elsewhere. */
  batch(program: string, paths: string[]): Promise<void>;
  /** The rows of `fuzz_two` through a cursor where the layer has one, `each` per row. */
  cursor(each: (n: number) => Promise<void>): Promise<void>;
}

/** The program's own error: what a transaction that gives up throws where the layer has no `rollback()`. */
export class ProgramError extends Error {}

/** Whether `error` is what a program's `tx … throw` throws (its own, or the layer's rollback). */
export function isProgramError(error: unknown): boolean {
  return (
    error instanceof ProgramError ||
    error instanceof TransactionRollbackError ||
    (error instanceof Error && error.message === 'the nested work failed')
  );
}

const INSERT_EFFECT = 'INSERT INTO fuzz_effects (program, path) VALUES ($1, $2) RETURNING pid';
const WHOAMI = 'SELECT pid FROM fuzz_whoami WHERE id = 1';

/** TypeORM: `dataSource.query()` at the top, `manager.transaction()` nested. */
export function typeormDb(dataSource: DataSource, manager?: EntityManager): Db {
  const rows = <T>(text: string, values?: unknown[]) =>
    (manager ? manager.query(text, values) : dataSource.query(text, values)) as Promise<T[]>;
  const db: Db = {
    rows,
    insertEffect: async (program, path) =>
      (await rows<{ pid: number }>(INSERT_EFFECT, [program, path]))[0].pid,
    whoami: async () => (await rows<{ pid: number }>(WHOAMI))[0].pid,
    transaction: async (work, end, isolation) => {
      const body = async (inner: EntityManager) => {
        await work(typeormDb(dataSource, inner));
        if (end === 'throw') throw new ProgramError('the nested work failed');
      };
      if (manager) return manager.transaction(body);
      return isolation ? dataSource.transaction(isolation, body) : dataSource.transaction(body);
    },
    batch: (program, paths) =>
      db.transaction(async (inner) => {
        for (const path of paths) await inner.insertEffect(program, path);
      }, 'commit'),
    cursor: async (each) => {
      // TypeORM streams through pg-query-stream on a query runner of its own.
      const runner = manager?.queryRunner ?? dataSource.createQueryRunner();
      const stream = await runner.stream('SELECT n FROM fuzz_two ORDER BY n');
      try {
        for await (const row of stream as AsyncIterable<{ n: number }>) await each(row.n);
      } finally {
        if (!manager) await runner.release();
      }
    },
  };
  return db;
}

/** node-postgres by hand: `pool.query()` at the top; a client's BEGIN/COMMIT, then SAVEPOINTs. */
export function pgDb(pool: Pool, client?: PoolClient, depth = 0): Db {
  const rows = async <T>(text: string, values?: unknown[]) =>
    (await (client ?? pool).query(text, values)).rows as T[];
  const db: Db = {
    rows,
    insertEffect: async (program, path) =>
      (await rows<{ pid: number }>(INSERT_EFFECT, [program, path]))[0].pid,
    whoami: async () => (await rows<{ pid: number }>(WHOAMI))[0].pid,
    transaction: async (work, end, isolation) => {
      const own = client ?? (await pool.connect());
      const savepoint = `fuzz_${depth}`;
      try {
        await own.query(
          client
            ? `SAVEPOINT ${savepoint}`
            : `BEGIN${isolation ? ` ISOLATION LEVEL ${isolation}` : ''}`,
        );
        try {
          await work(pgDb(pool, own, depth + 1));
          if (end === 'throw') throw new ProgramError('the nested work failed');
          await own.query(client ? `RELEASE SAVEPOINT ${savepoint}` : 'COMMIT');
        } catch (error) {
          await own.query(client ? `ROLLBACK TO SAVEPOINT ${savepoint}` : 'ROLLBACK');
          throw error;
        }
      } finally {
        if (!client) own.release();
      }
    },
    batch: (program, paths) =>
      db.transaction(async (inner) => {
        for (const path of paths) await inner.insertEffect(program, path);
      }, 'commit'),
    cursor: async (each) => {
      // A cursor on a client of its own, and each row's write through the pool, as an app does.
      const own = client ?? (await pool.connect());
      const cursor = own.query(new Cursor<{ n: number }>('SELECT n FROM fuzz_two ORDER BY n'));
      try {
        for (;;) {
          const batch = await cursor.read(1);
          if (!batch.length) break;
          await each(batch[0].n);
        }
      } finally {
        // pg-cursor (2.22) closes an errored cursor by waiting for the connection's next
        // readyForQuery: when the error was the connection's death, it never comes, and
        // close() hangs for ever (with or without the library; Kysely's stream() awaits it
        // the same way). An errored cursor is let go, as an app must.
        if ((cursor as unknown as { state?: string }).state === 'error') {
          void cursor.close().catch(() => undefined);
        } else {
          await cursor.close();
        }
        if (!client) own.release();
      }
    },
  };
  return db;
}

/** The Prisma client of the fuzzer's schema, on the app's pool (the one the library has). */
export function createPrisma(pool: Pool): PrismaClient {
  return new PrismaClient({ adapter: new PrismaPg(pool) });
}

type PrismaTx = Omit<
  PrismaClient,
  '$connect' | '$disconnect' | '$on' | '$transaction' | '$extends'
>;

const PRISMA_LEVEL: Record<Isolation, 'RepeatableRead' | 'Serializable'> = {
  'REPEATABLE READ': 'RepeatableRead',
  SERIALIZABLE: 'Serializable',
};

/**
 * Prisma: its model API (`create`, `findUnique`), `$queryRawUnsafe`; an interactive
 * `$transaction` with a timeout at the top, raw SAVEPOINTs inside it (Prisma's own nesting has
 * none), an array `$transaction` for a batch.
 */
export function prismaDb(prisma: PrismaClient, tx?: PrismaTx, depth = 0): Db {
  const client: PrismaTx = tx ?? prisma;
  const rows = <T>(text: string, values: unknown[] = []) =>
    client.$queryRawUnsafe<T[]>(text, ...values);
  const db: Db = {
    rows,
    insertEffect: async (program, path) =>
      (await client.fuzzEffect.create({ data: { program, path } })).pid,
    whoami: async () => (await client.fuzzWhoami.findUnique({ where: { id: 1 } }))!.pid,
    transaction: async (work, end, isolation) => {
      if (tx) {
        const savepoint = `fuzz_${depth}`;
        await tx.$executeRawUnsafe(`SAVEPOINT ${savepoint}`);
        try {
          await work(prismaDb(prisma, tx, depth + 1));
          if (end === 'throw') throw new ProgramError('the nested work failed');
          await tx.$executeRawUnsafe(`RELEASE SAVEPOINT ${savepoint}`);
        } catch (error) {
          await tx.$executeRawUnsafe(`ROLLBACK TO SAVEPOINT ${savepoint}`);
          throw error;
        }
        return;
      }
      await prisma.$transaction(
        async (inner) => {
          await work(prismaDb(prisma, inner, depth + 1));
          if (end === 'throw') throw new ProgramError('the nested work failed');
        },
        {
          timeout: 10_000,
          maxWait: 5_000,
          ...(isolation ? { isolationLevel: PRISMA_LEVEL[isolation] } : {}),
        },
      );
    },
    batch: async (program, paths) => {
      if (tx) {
        for (const path of paths) await tx.fuzzEffect.create({ data: { program, path } });
        return;
      }
      await prisma.$transaction(
        paths.map((path) => prisma.fuzzEffect.create({ data: { program, path } })),
      );
    },
    cursor: async (each) => {
      // Prisma has no cursor: the rows read whole, then a write per row.
      for (const row of await rows<{ n: number }>('SELECT n FROM fuzz_two ORDER BY n')) {
        await each(row.n);
      }
    },
  };
  return db;
}

export const fuzzEffects = pgTable('fuzz_effects', {
  program: text('program').notNull(),
  path: text('path').notNull(),
  pid: integer('pid'),
});
export const fuzzWhoami = pgTable('fuzz_whoami', {
  id: integer('id').notNull(),
  pid: integer('pid').notNull(),
});

type DrizzleDb = NodePgDatabase<Record<string, never>>;
type DrizzleTx = Parameters<Parameters<DrizzleDb['transaction']>[0]>[0];

/** SQL text with `$n` values as a Drizzle `sql` chunk. */
function drizzleSql(text: string, values: unknown[]): SQL {
  const parts = text.split(/\$\d+/);
  let query = dsql.raw(parts[0]);
  for (const [index, value] of values.entries()) {
    query = dsql`${query}${value}${dsql.raw(parts[index + 1] ?? '')}`;
  }
  return query;
}

/** Drizzle: its query builder, `db.transaction()` and `tx.transaction()` nested, `tx.rollback()`. */
export function drizzleDb(root: DrizzleDb, tx?: DrizzleTx): Db {
  const client = tx ?? root;
  const rows = async <T>(text: string, values: unknown[] = []) =>
    (await client.execute(drizzleSql(text, values))).rows as T[];
  const db: Db = {
    rows,
    insertEffect: async (program, path) =>
      (await client.insert(fuzzEffects).values({ program, path }).returning())[0].pid!,
    whoami: async () => (await client.select().from(fuzzWhoami).where(eq(fuzzWhoami.id, 1)))[0].pid,
    transaction: async (work, end, isolation) => {
      const body = async (inner: DrizzleTx) => {
        await work(drizzleDb(root, inner));
        if (end === 'throw') inner.rollback();
      };
      if (tx) return tx.transaction(body);
      return root.transaction(
        body,
        isolation
          ? { isolationLevel: isolation === 'SERIALIZABLE' ? 'serializable' : 'repeatable read' }
          : undefined,
      );
    },
    batch: (program, paths) =>
      db.transaction(async (inner) => {
        for (const path of paths) await inner.insertEffect(program, path);
      }, 'commit'),
    cursor: async (each) => {
      // Drizzle has no cursor on node-postgres: the rows read whole, then a write per row.
      for (const row of await rows<{ n: number }>('SELECT n FROM fuzz_two ORDER BY n')) {
        await each(row.n);
      }
    },
  };
  return db;
}

export function createDrizzle(pool: Pool): DrizzleDb {
  return drizzle({ client: pool });
}

interface FuzzDatabase {
  fuzz_effects: { program: string; path: string; pid: number | null };
  fuzz_whoami: { id: number; pid: number };
  fuzz_two: { n: number };
}

/** Kysely on the app's pool, with pg-cursor for `stream()`. */
export function createKysely(pool: Pool): Kysely<FuzzDatabase> {
  return new Kysely<FuzzDatabase>({ dialect: new PostgresDialect({ pool, cursor: Cursor }) });
}

/**
 * Kysely: its query builder; a controlled transaction (`startTransaction()`, `commit()`,
 * `rollback()`) at the top, `savepoint()` / `rollbackToSavepoint()` nested, `stream()`.
 */
export function kyselyDb(
  root: Kysely<FuzzDatabase>,
  trx?: Transaction<FuzzDatabase>,
  depth = 0,
): Db {
  const client = trx ?? root;
  const rows = async <T>(text: string, values: unknown[] = []) => {
    const parts = text.split(/\$\d+/);
    const chunks = parts.flatMap((part, index) =>
      index < values.length ? [ksql.raw(part), ksql.val(values[index])] : [ksql.raw(part)],
    );
    return (await ksql.join(chunks, ksql.raw('')).execute(client)).rows as T[];
  };
  const db: Db = {
    rows,
    insertEffect: async (program, path) =>
      (
        await client
          .insertInto('fuzz_effects')
          .values({ program, path })
          .returning('pid')
          .executeTakeFirstOrThrow()
      ).pid!,
    whoami: async () =>
      (
        await client
          .selectFrom('fuzz_whoami')
          .select('pid')
          .where('id', '=', 1)
          .executeTakeFirstOrThrow()
      ).pid,
    transaction: async (work, end, isolation) => {
      if (trx) {
        const controlled = trx as unknown as ControlledLike;
        const name = `fuzz_${depth}`;
        await controlled.savepoint(name).execute();
        try {
          await work(kyselyDb(root, trx, depth + 1));
          if (end === 'throw') throw new ProgramError('the nested work failed');
          await controlled.releaseSavepoint(name).execute();
        } catch (error) {
          await controlled.rollbackToSavepoint(name).execute();
          throw error;
        }
        return;
      }
      let builder = root.startTransaction();
      if (isolation)
        builder = builder.setIsolationLevel(
          isolation === 'SERIALIZABLE' ? 'serializable' : 'repeatable read',
        );
      const controlled = await builder.execute();
      // Kysely's own recipe: commit in the try, rollback() in the catch.
      try {
        await work(kyselyDb(root, controlled, depth + 1));
        if (end === 'throw') throw new ProgramError('the nested work failed');
        await controlled.commit().execute();
      } catch (error) {
        await controlled.rollback().execute();
        throw error;
      }
    },
    batch: (program, paths) =>
      db.transaction(async (inner) => {
        for (const path of paths) await inner.insertEffect(program, path);
      }, 'commit'),
    cursor: async (each) => {
      const stream = client.selectFrom('fuzz_two').select('n').orderBy('n').stream(1);
      if (!trx) {
        for await (const row of stream) await each(row.n);
        return;
      }
      // Inside a Kysely transaction, a query on it waits until its open stream ends (Kysely
      // runs one at a time on a transaction's connection): a write per streamed row hangs
      // forever, with or without the library (docs/guides/kysely.md). The rows first, as
      // Kysely wants them read there.
      const rows: number[] = [];
      for await (const row of stream) rows.push(row.n);
      for (const n of rows) await each(n);
    },
  };
  return db;
}

/** The savepoint methods of Kysely's controlled transaction, by name (its types track names). */
interface ControlledLike {
  savepoint(name: string): { execute(): Promise<unknown> };
  releaseSavepoint(name: string): { execute(): Promise<unknown> };
  rollbackToSavepoint(name: string): { execute(): Promise<unknown> };
}

export { pg };
