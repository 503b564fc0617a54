#!/usr/bin/env node
import { createInterface } from 'node:readline/promises';
import pg from 'pg';
import { LIBRARY_TYPES } from '../connection/library-types.js';
import { IDEMPOTENCY_MIGRATIONS } from '../migrations.js';
import { type Command, parseCommand, USAGE, UsageError } from './args.js';
import {
  listUnfinishedKeys,
  readDoctorFacts,
  readKey,
  readResponseBody,
  releaseKey,
  tenantsOfKey,
} from './database.js';
import { diagnose, formatFindings } from './doctor-checks.js';
import {
  formatKey,
  formatKeyList,
  keyStatus,
  noSuchKey,
  releasedMessage,
  releaseVerdict,
} from './key-views.js';

import { redactConnectionString } from './redact-url.js';

/** `npx nestjs-idempotency-pg`: the operator's command (see USAGE). */

const EXPECTED_MIGRATIONS = IDEMPOTENCY_MIGRATIONS.map((migration) => new migration().name!);

/** The URL without its password, in any of its forms, to print. */
const redact = redactConnectionString;

async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: url,
    connectionTimeoutMillis: 10_000,
    query_timeout: 30_000,
    application_name: 'nestjs-idempotency-pg',
    // The library's parsers, whatever a module loaded with the CLI set on `pg.types`.
    types: LIBRARY_TYPES,
  });
  try {
    await client.connect();
  } catch (error) {
    await client.end().catch(() => undefined);
    throw error;
  }
  return client;
}

async function withClient<T>(url: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = await connect(url);
  try {
    return await work(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function ask(question: string): Promise<string> {
  const readline = createInterface({ input: process.stdin, output: process.stdout });
  try {
    const answer = await readline.question(question);
    // Piped in, the answer is not echoed: end the prompt's line.
    if (!process.stdin.isTTY) process.stdout.write('\n');
    return answer;
  } finally {
    readline.close();
  }
}

async function run(command: Exclude<Command, { kind: 'help' }>): Promise<number> {
  const out = (text: string) => process.stdout.write(text);
  switch (command.kind) {
    case 'doctor': {
      const { settings } = command;
      let findings;
      try {
        const facts = await withClient(command.url, (client) =>
          readDoctorFacts(client, settings.migrationsTable, settings.stuckAfterMs),
        );
        findings = diagnose(facts, settings, EXPECTED_MIGRATIONS);
      } catch (error) {
        findings = [
          {
            level: 'fail' as const,
            topic: 'connection',
            message: `${redact(command.url)}: ${(error as Error).message}`,
          },
        ];
      }
      out(formatFindings(findings));
      return findings.some((f) => f.level === 'fail') ? 1 : 0;
    }
    case 'keys list': {
      const rows = await withClient(command.url, (client) =>
        listUnfinishedKeys(client, command.limit, command.tenant),
      );
      out(formatKeyList(rows, command.limit));
      return 0;
    }
    case 'keys show': {
      const { tenant, key } = command;
      return withClient(command.url, async (client) => {
        const row = await readKey(client, tenant, key);
        if (row === undefined) {
          const missing = noSuchKey(tenant, key, await tenantsOfKey(client, key, 5));
          out(`${missing[0].toUpperCase()}${missing.slice(1)}.\n`);
          return 1;
        }
        const body = command.body ? await readResponseBody(client, tenant, key) : undefined;
        out(formatKey(row, body));
        return 0;
      });
    }
    case 'keys release': {
      const { tenant, key } = command;
      const { row, elsewhere } = await withClient(command.url, async (client) => {
        const found = await readKey(client, tenant, key);
        return {
          row: found,
          elsewhere: found === undefined ? await tenantsOfKey(client, key, 5) : [],
        };
      });
      const verdict = releaseVerdict(row);
      if (row === undefined) {
        out(`Not released: ${noSuchKey(tenant, key, elsewhere)}.\n`);
        return 1;
      }
      if (!verdict.release) {
        out(`Not released: ${verdict.reason}.\n`);
        return 1;
      }
      out(formatKey(row));
      // No connection is held while a person decides: the fence is what keeps this safe.
      if (!command.yes && !/^y(es)?$/i.test((await ask('Release this key? [y/N] ')).trim())) {
        out('Not released.\n');
        return 1;
      }
      return withClient(command.url, async (client) => {
        if (await releaseKey(client, tenant, key, row.lockVersion, row.claimId)) {
          out(releasedMessage(row));
          return 0;
        }
        const now = await readKey(client, tenant, key);
        const moved =
          now === undefined
            ? 'it is gone'
            : `it is ${keyStatus(now)} now, lock version ${now.lockVersion}`;
        out(`Not released: the key moved since it was read (${moved}).\n`);
        return 1;
      });
    }
  }
}

async function main(): Promise<number> {
  let command: Command;
  try {
    command = parseCommand(process.argv.slice(2), process.env);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`${error.message}\n\n${USAGE}`);
    return 2;
  }
  if (command.kind === 'help') {
    process.stdout.write(USAGE);
    return 0;
  }
  try {
    return await run(command);
  } catch (error) {
    process.stderr.write(`${redact(command.url)}: ${(error as Error).message}\n`);
    return 1;
  }
}

process.exitCode = await main();
