// src/main.ts
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';

if (!process.env.DATABASE_URL) {
  // Without it, pg would try localhost:5432 as the OS user: say what is missing instead.
  console.error('Set DATABASE_URL, e.g. postgres://user:password@localhost:5432/app');
  process.exit(1);
}

// rawBody: the fingerprint is then taken from the bytes received, exact for any JSON number.
const app = await NestFactory.create(AppModule, { rawBody: true });
app.enableShutdownHooks();
await app.listen(process.env.PORT ?? 3000);
console.log(`listening on ${await app.getUrl()}`);
