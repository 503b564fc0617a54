import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { type DataSource } from 'typeorm';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from '../idempotency.module-definition.js';
import { type ResolvedIdempotencyOptions } from '../idempotency-options.interface.js';
import { InvalidIdempotencyOptionsError } from '../idempotency-options.js';
import { joinTransactionsOf } from '../transaction/transaction-scope.js';
import { nestTypeOrm } from './typeorm-package.js';

/**
 * The app's own TypeORM DataSource (the default one, or the one named in the options): the
 * library injects it and never creates one. It is looked up once every provider exists,
 * since its name is an option that `forRootAsync()` only knows at run time.
 */
@Injectable()
export class IdempotencyDataSource implements OnModuleInit {
  private resolved?: DataSource;

  constructor(
    private readonly moduleRef: ModuleRef,
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) private readonly options: ResolvedIdempotencyOptions,
  ) {}

  onModuleInit(): void {
    // On a node-postgres pool (Prisma, Drizzle, Kysely) there is no DataSource to find.
    if (!this.options.pool) this.resolve();
  }

  get dataSource(): DataSource {
    return this.resolved ?? this.resolve();
  }

  private resolve(): DataSource {
    if (this.options.pool) {
      throw new Error(
        'IdempotentTransaction and ProcessedMessages.once() hand out TypeORM managers, and this ' +
          'app gives the library a node-postgres pool (the pool option), not a DataSource: ' +
          'write through your data layer on that pool, which joins the request’s transaction',
      );
    }
    const name = this.options.dataSource;
    if (!nestTypeOrm) {
      throw new InvalidIdempotencyOptionsError(
        '@nestjs/typeorm is not installed, and the library needs a data layer: give it the ' +
          'node-postgres Pool your data layer (Prisma, Drizzle, Kysely, pg) runs on with the ' +
          'pool option, or install typeorm and @nestjs/typeorm and import TypeOrmModule.forRoot()',
      );
    }
    let dataSource: DataSource | null | undefined;
    try {
      dataSource = this.moduleRef.get<DataSource>(nestTypeOrm.getDataSourceToken(name), {
        strict: false,
      });
    } catch {
      dataSource = undefined;
    }
    if (!dataSource) {
      throw new InvalidIdempotencyOptionsError(
        `no TypeORM DataSource ${name ? `named "${name}"` : '(the default one)'} was found; ` +
          'import TypeOrmModule.forRoot() in the app module, or set the dataSource option',
      );
    }
    if (dataSource.options.type !== 'postgres') {
      throw new InvalidIdempotencyOptionsError(
        `the DataSource is of type "${dataSource.options.type}"; the store needs PostgreSQL`,
      );
    }
    // Code in an idempotent request's scope (its handler, its phases) joins their transactions.
    joinTransactionsOf(dataSource);
    this.resolved = dataSource;
    return dataSource;
  }
}
