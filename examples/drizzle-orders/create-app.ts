import { type DynamicModule, type INestApplication, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';

export type AdapterName = 'express' | 'fastify';

/**
 * The app on either HTTP adapter, with the raw body kept (the library fingerprints the bytes
 * the client sent). Nest's logs are off when `quiet`.
 */
export function createApp(
  module: DynamicModule | Type<unknown>,
  adapter: AdapterName,
  quiet = false,
): Promise<INestApplication> {
  return NestFactory.create(
    module,
    adapter === 'fastify' ? new FastifyAdapter() : new ExpressAdapter(),
    {
      rawBody: true,
      ...(quiet ? { logger: false } : {}),
    },
  );
}
