import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile, appendFile, chmod } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../../sample-app/database/embedded-postgres.js';

const run = promisify(execFile);
const BIN = '/usr/lib/postgresql/15/bin';

/** A PostgreSQL cluster of the test's own that speaks TLS, with the certificates it made. */
export interface TlsPostgres {
  port: number;
  /** PEM file of the CA that signed the server's certificate (for `sslrootcert`). */
  caFile: string;
  /** PEM file of another CA, which signed nothing this server shows. */
  wrongCaFile: string;
  /** A role that must log in with a password, over TLS only (scram-sha-256). */
  passwordUser: { name: string; password: string };
  stop(): Promise<void>;
}

/** PostgreSQL refuses to run as root: as root, its commands run as the `postgres` user. */
const asRoot = process.getuid?.() === 0;
function asPostgres(command: string, args: string[]) {
  return asRoot
    ? run('runuser', ['-u', 'postgres', '--', join(BIN, command), ...args])
    : run(join(BIN, command), args);
}

async function openssl(cwd: string, args: string[]) {
  await run('openssl', args, { cwd });
}

/** A self-signed CA (EC keys: quick to make). */
async function makeCa(dir: string, name: string) {
  await openssl(dir, [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-days', '2', '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.crt`,
  ]); // prettier-ignore
}

/**
 * Starts a PostgreSQL 15 cluster with `initdb` and `pg_ctl` in a temporary folder, on a free
 * port, with `ssl = on` and a certificate for 127.0.0.1 and localhost signed by a CA made here.
 * Every role logs in without a password (trust, with or without TLS) except `passwordUser`.
 */
export async function startTlsPostgres(): Promise<TlsPostgres> {
  const dir = await mkdtemp(join(tmpdir(), 'idempotency-tls-'));
  await chmod(dir, 0o755);
  try {
    const certs = join(dir, 'certs');
    await run('mkdir', [certs]);
    await makeCa(certs, 'ca');
    await makeCa(certs, 'wrong-ca');
    await writeFile(join(certs, 'san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
    await openssl(certs, [
      'req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-subj', '/CN=127.0.0.1', '-keyout', 'server.key', '-out', 'server.csr',
    ]); // prettier-ignore
    await openssl(certs, [
      'x509', '-req', '-in', 'server.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key',
      '-CAcreateserial', '-days', '2', '-extfile', 'san.ext', '-out', 'server.crt',
    ]); // prettier-ignore
    await chmod(join(certs, 'server.key'), 0o600);
    if (asRoot) await run('chown', ['-R', 'postgres:postgres', dir]);

    const data = join(dir, 'data');
    await asPostgres('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync']);
    const port = await freePort();
    await appendFile(
      join(data, 'postgresql.conf'),
      [
        `port = ${port}`,
        `listen_addresses = '127.0.0.1'`,
        `unix_socket_directories = '${dir}'`,
        'ssl = on',
        `ssl_cert_file = '${join(certs, 'server.crt')}'`,
        `ssl_key_file = '${join(certs, 'server.key')}'`,
        'fsync = off',
        '',
      ].join('\n'),
    );
    const passwordUser = { name: 'pw_user', password: 'p@ss:w/o%r#d' };
    // The first matching line wins: the password role over TLS only, everyone else trusted.
    await writeFile(
      join(data, 'pg_hba.conf'),
      [
        `hostssl all ${passwordUser.name} 127.0.0.1/32 scram-sha-256`,
        `host all ${passwordUser.name} 127.0.0.1/32 reject`,
        'local all all trust',
        'host all all 127.0.0.1/32 trust',
        'hostssl all all 127.0.0.1/32 trust',
        '',
      ].join('\n'),
    );
    await asPostgres('pg_ctl', ['-D', data, '-l', join(dir, 'log'), '-w', '-t', '60', 'start']);
    const stop = async () => {
      await asPostgres('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']).catch(
        () => undefined,
      );
      await rm(dir, { recursive: true, force: true });
    };
    try {
      const quoted = passwordUser.password.replace(/'/g, "''");
      await asPostgres('psql', [
        '-h', dir, '-p', String(port), '-U', 'postgres', '-d', 'postgres', '-v', 'ON_ERROR_STOP=1',
        '-c', `CREATE ROLE ${passwordUser.name} LOGIN PASSWORD '${quoted}'`,
      ]); // prettier-ignore
    } catch (error) {
      await stop();
      throw error;
    }
    return {
      port,
      caFile: join(certs, 'ca.crt'),
      wrongCaFile: join(certs, 'wrong-ca.crt'),
      passwordUser,
      stop,
    };
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
}
