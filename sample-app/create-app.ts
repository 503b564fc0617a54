import { type INestApplication, type LoggerService, type LogLevel } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter, type NestExpressApplication } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { AppModule, type AppSettings } from './app.module.js';

/** Bodies over 1 MiB are refused with 413 (the contract). */
export const BODY_LIMIT = 1024 * 1024;

/**
 * The sample app on either adapter, as `main.ts` serves it (the raw body kept, for exact
 * fingerprints; the 1 MiB body limit): also what the in-process tests build.
 */
export async function createSampleApp(
  settings: AppSettings,
  adapter: 'express' | 'fastify',
  logger?: LoggerService | LogLevel[] | false,
): Promise<INestApplication> {
  const module = AppModule.register(settings);
  if (adapter === 'fastify') {
    return NestFactory.create(module, new FastifyAdapter({ bodyLimit: BODY_LIMIT }), {
      rawBody: true,
      ...(logger === undefined ? {} : { logger }),
    });
  }
  const app = await NestFactory.create<NestExpressApplication>(module, new ExpressAdapter(), {
    rawBody: true,
    ...(logger === undefined ? {} : { logger }),
  });
  app.useBodyParser('json', { limit: BODY_LIMIT });
  return app;
}
