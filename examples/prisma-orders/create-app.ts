import { type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { OrdersAppModule, type OrdersSettings } from './app.module.js';

export type OrdersAdapter = 'express' | 'fastify';

/** The orders app on either adapter, the raw body kept (for exact fingerprints). */
export async function createOrdersApp(
  settings: OrdersSettings,
  adapter: OrdersAdapter = 'express',
  logs = true,
): Promise<INestApplication> {
  const http = adapter === 'fastify' ? new FastifyAdapter() : new ExpressAdapter();
  const app = await NestFactory.create(OrdersAppModule.register(settings), http, {
    rawBody: true,
    abortOnError: false,
    ...(logs ? {} : { logger: false as const }),
  });
  app.enableShutdownHooks();
  return app;
}
