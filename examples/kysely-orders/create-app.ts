import { type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { AppModule, type OrdersSettings } from './app.module.js';

export type HttpAdapterName = 'express' | 'fastify';

/**
 * The orders app on either adapter, with the raw body kept (the library fingerprints the bytes
 * the client sent). `main.ts` serves it; tests build it in-process too.
 */
export async function createOrdersApp(
  settings: OrdersSettings,
  adapter: HttpAdapterName = 'express',
  logger: false | undefined = undefined,
): Promise<INestApplication> {
  const http = adapter === 'fastify' ? new FastifyAdapter() : new ExpressAdapter();
  return NestFactory.create(AppModule.register(settings), http, {
    rawBody: true,
    ...(logger === undefined ? {} : { logger }),
  });
}
