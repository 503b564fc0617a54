/**
 * `@nestjs/typeorm`, when the app has it. TypeORM is one data layer among others: an app on
 * Prisma, Drizzle or Kysely (`pool` in the options) installs neither it nor `typeorm`, and the
 * library must load without them. Loaded once, when the library is.
 */
export const nestTypeOrm: typeof import('@nestjs/typeorm') | undefined =
  await import('@nestjs/typeorm').catch(() => undefined);
