import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService } from '@nestjs/core';
import { type DataSource } from 'typeorm';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from './idempotency.module-definition.js';
import { type ResolvedIdempotencyOptions } from './shapes/idempotency-options.interface.js';
import { InvalidIdempotencyOptionsError } from './idempotency-options.js';
import { joinTransactionsOf } from './transaction/transaction-scope.js';

/**
 * The app's own TypeORM DataSource (the default one, or the one named in the options): the
 * library injects it and never creates one. It is looked up once every provider exists,
 * since its name is an option that `forRootAsync()` only knows at run time.
 */
@Injectable()
export class IdempotencyDataSource implements OnModuleInit {
  private resolved?: DataSource;

  constructor(
    private readonly discovery: DiscoveryService,
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
    const dataSource = this.find(name);
    if (!dataSource) {
      throw new InvalidIdempotencyOptionsError(
        `no TypeORM DataSource ${name ? `named "${name}"` : '(the default one)'} was found; ` +
          'import TypeOrmModule.forRoot() in the app module (or set the dataSource option to ' +
          'its name), or give the library the node-postgres Pool your data layer (Prisma, ' +
          'Drizzle, Kysely, pg) runs on with the pool option',
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

  /**
   * The provider `TypeOrmModule.forRoot()` registers for the DataSource, found by its token as
   * `getDataSourceToken()` makes it (TypeORM's `DataSource` class for the default one,
   * `<name>DataSource` for a named one) without importing `@nestjs/typeorm`: an app on another
   * data layer has neither it nor TypeORM.
   */
  private find(name: string | undefined): DataSource | undefined {
    const named = name !== undefined && name !== 'default';
    const wrapper = this.discovery
      .getProviders()
      .find(({ token, instance }) =>
        named
          ? token === `${name}DataSource`
          : typeof token === 'function' && token.name === 'DataSource' && instance,
      );
    return (wrapper?.instance ?? undefined) as DataSource | undefined;
  }
}
