import { type INestApplication, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';

export type AdapterName = 'express' | 'fastify';
export const ADAPTERS: AdapterName[] = ['express', 'fastify'];

/**
 * Creates and initializes a test app on either adapter, with the raw body kept (as the
 * README asks of users). Nest's logs are off unless TEST_LOGS is set.
 */
export async function bootstrapTestApp(
  module: Type<unknown>,
  adapter: AdapterName = 'express',
): Promise<INestApplication> {
  const http = adapter === 'fastify' ? new FastifyAdapter() : new ExpressAdapter();
  const app = await NestFactory.create(module, http, {
    rawBody: true,
    logger: process.env.TEST_LOGS ? undefined : false,
    abortOnError: false,
  });
  await app.init();
  if (adapter === 'fastify') {
    await (app.getHttpAdapter().getInstance() as { ready(): Promise<void> }).ready();
  }
  return app;
}
