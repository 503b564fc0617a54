// @nestjs-cls/transactional with its Drizzle adapter, on the Drizzle instance of the shared pool
import { Global, Module } from '@nestjs/common';
import { ClsPluginTransactional } from '@nestjs-cls/transactional';
import { TransactionalAdapterDrizzleOrm } from '@nestjs-cls/transactional-adapter-drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { IdempotencyModule } from 'nestjs-idempotency-pg';
import { ClsModule } from 'nestjs-cls';
import { Pool } from 'pg';
import { type Database, DRIZZLE } from './database.js';
import * as schema from './schema.js';

const pool = new Pool({ connectionString: process.env.DATABASE_URL });

@Global()
@Module({
  providers: [{ provide: DRIZZLE, useValue: drizzle({ client: pool, schema }) }],
  exports: [DRIZZLE],
})
class DatabaseModule {}

@Module({
  imports: [
    DatabaseModule,
    IdempotencyModule.forRoot({ globalKeys: true, pool }),
    ClsModule.forRoot({
      global: true,
      middleware: { mount: true },
      plugins: [
        new ClsPluginTransactional({
          imports: [DatabaseModule],
          adapter: new TransactionalAdapterDrizzleOrm<Database>({ drizzleInstanceToken: DRIZZLE }),
        }),
      ],
    }),
  ],
})
export class AppModule {}
