import { readFileSync } from 'node:fs';
import {
  type DynamicModule,
  type INestApplication,
  Module,
  type Provider,
  type Type,
} from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  type IdempotencyModuleOptions,
} from '../../lib/index.js';
import { type AdapterName, bootstrapTestApp } from './bootstrap.js';
import { createTestDatabase, type TestDatabase } from './database.js';

/** An app on TypeORM's seam (the DataSource), on a database of its own with the library's schema. */
export interface TypeormApp {
  database: TestDatabase;
  /** A client of the database's owner, for set-up and for reading what was kept. */
  admin: Client;
  app: INestApplication;
  /** Closes the app (and so the DataSource) and the client, and drops the database. */
  close(): Promise<void>;
}

export interface TypeormAppOptions {
  controllers?: Type[];
  providers?: Provider[];
  /** The DataSource's entities and subscribers: a save's listeners are what most suites test. */
  entities?: Type[];
  subscribers?: Type[];
  /** Modules beside TypeORM's and the library's (GraphQL, TypeOrmModule.forFeature…). */
  imports?: (Type | DynamicModule)[];
  /** Run after the schema, before the app starts, with the owner's client: the test's tables. */
  setup?: (admin: Client, database: TestDatabase) => Promise<void>;
  /** The DataSource's pool size: room for a nested transaction's connection beside the request's. */
  max?: number;
  /** IdempotencyModule.forRoot's options; `{ globalKeys: true }` unless given. */
  idempotency?: IdempotencyModuleOptions;
  adapter?: AdapterName;
}

/** Creates the database, runs `migrations/schema.sql` and `setup`, starts a module on TypeORM. */
export async function startTypeormApp(
  name: string,
  options: TypeormAppOptions,
): Promise<TypeormApp> {
  const database = await createTestDatabase(name);
  const admin = new Client({ connectionString: database.url });
  let app: INestApplication | undefined;
  const close = async () => {
    await app?.close();
    await admin.end().catch(() => undefined);
    await database.drop();
  };
  try {
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await options.setup?.(admin, database);

    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
          entities: options.entities,
          subscribers: options.subscribers,
          // The schema is made above (schema.sql), as the app's own migrations would leave it:
          // the library's are listed the way the docs say, and not run.
          migrations: [...IDEMPOTENCY_MIGRATIONS],
          migrationsRun: false,
          extra: { max: options.max ?? 4 },
        }),
        IdempotencyModule.forRoot(options.idempotency ?? { globalKeys: true }),
        ...(options.imports ?? []),
      ],
      controllers: options.controllers,
      providers: options.providers,
    })
    class TypeormTestModule {}

    app = await bootstrapTestApp(TypeormTestModule, options.adapter ?? 'express');
    return { database, admin, app, close };
  } catch (error) {
    await close();
    throw error;
  }
}
