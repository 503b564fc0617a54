import 'reflect-metadata';
import { MIGRATIONS } from './app.module.js';
import { createSampleApp } from './create-app.js';
import { migrate } from './database/migrate.js';
import { ConfigError, readConfig } from './config.js';
import { startEmbeddedPostgres } from './database/embedded-postgres.js';
import { startFakePsp } from './psp/fake-psp.js';

async function main(): Promise<void> {
  const config = readConfig(process.env);
  const stops: (() => Promise<void>)[] = [];

  let databaseUrl = config.databaseUrl;
  if (!databaseUrl) {
    const embedded = await startEmbeddedPostgres();
    stops.unshift(embedded.stop);
    databaseUrl = embedded.url;
    console.log('no DATABASE_URL: started an embedded PostgreSQL (data in a temporary folder)');
  }
  let pspUrl = config.pspUrl;
  if (!pspUrl) {
    const psp = await startFakePsp({ delayMs: config.pspDelayMs });
    stops.unshift(psp.close);
    pspUrl = psp.url;
    console.log(`no PSP_URL: started the fake PSP in this process at ${psp.url}`);
  }

  await migrate({ type: 'postgres', url: databaseUrl, migrations: MIGRATIONS });

  const app = await createSampleApp(
    {
      databaseUrl,
      pspUrl,
      pspTimeoutMs: config.pspTimeoutMs,
      leaseMs: config.leaseMs,
      heartbeat: config.heartbeat,
      retentionMs: config.retentionMs,
      purgeIntervalMs: config.purgeIntervalMs,
      transferDelayMs: config.transferDelayMs,
      requestTimeoutMs: config.requestTimeoutMs,
      pooler: config.pooler,
    },
    config.adapter,
  );

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    console.log(`${signal}: stopping`);
    await app.close(); // the HTTP server, then the database connections
    for (const stopOne of stops) await stopOne();
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop('SIGTERM'));
  process.once('SIGINT', () => void stop('SIGINT'));

  await app.listen(config.port, '0.0.0.0');
  console.log(`listening on ${config.port}`);
}

main().catch((error: unknown) => {
  console.error(error instanceof ConfigError ? `configuration: ${error.message}` : error);
  process.exit(1);
});
