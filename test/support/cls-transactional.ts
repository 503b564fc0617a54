/**
 * nestjs-cls as the test workers mount it. Loaded only by worker processes: these packages are
 * CommonJS that require Nest's ES modules, which jest's module runtime cannot load (see
 * cls-worker.ts).
 */
import { type DynamicModule } from '@nestjs/common';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { ClsPluginTransactional } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { ClsModule } from 'nestjs-cls';

/**
 * `ClsModule` mounted as its interceptor, with `@nestjs-cls/transactional` on the app's
 * default TypeORM DataSource: the setup its docs give, which the library must work beside.
 */
export function clsTransactionalModule(): DynamicModule {
  return ClsModule.forRoot({
    global: true,
    interceptor: { mount: true },
    plugins: [
      new ClsPluginTransactional({
        imports: [TypeOrmModule],
        adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: getDataSourceToken() }),
      }),
    ],
  });
}
