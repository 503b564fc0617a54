// src/main.ts on Fastify: the quick start's, with Fastify's adapter
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { AppModule } from './app.module.js';

if (!process.env.DATABASE_URL) {
  // Without it, pg would try localhost:5432 as the OS user: say what is missing instead.
  console.error('Set DATABASE_URL, e.g. postgres://user:password@localhost:5432/app');
  process.exit(1);
}

// rawBody: on Fastify too, the fingerprint is then taken from the bytes received.
const app = await NestFactory.create<NestFastifyApplication>(AppModule, new FastifyAdapter(), {
  rawBody: true,
});
app.enableShutdownHooks();
// Fastify listens on 127.0.0.1 unless told otherwise: '0.0.0.0' for a container.
await app.listen(process.env.PORT ?? 3000, '0.0.0.0');
console.log(`listening on ${await app.getUrl()}`);
