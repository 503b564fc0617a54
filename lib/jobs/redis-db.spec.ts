import { redisDbOf, urlDbOf } from './redis-db.js';

describe('redisDbOf', () => {
  it.each([
    ['options naming a database', { host: 'redis', db: 3 }, 3],
    ['options naming none', { host: 'redis' }, 0],
    ['database 0', { db: 0 }, 0],
    ['an ioredis client (its options)', { options: { db: 5 }, status: 'ready' }, 5],
    ['an ioredis client on database 0', { options: { host: 'redis' } }, 0],
    ['a cluster (no db)', { options: { redisOptions: {} } }, 0],
    ['no connection', undefined, 0],
    ['a URL string (no connection BullMQ takes)', 'redis://redis:6379/2', 0],
    ['a db as a string (an env variable), as ioredis parses it', { db: '2' }, 2],
    ['a db string ioredis parses by its digits', { db: '7 ' }, 7],
    ['a db string that is no number', { db: 'two' }, 0],
    ['a negative db', { db: -1 }, 0],
    ['a fractional db', { db: 1.5 }, 0],
    ['a url naming its database', { url: 'redis://redis:6379/8' }, 8],
    ['a TLS url', { url: 'rediss://user:pw@redis:6380/9' }, 9],
    ['a url naming none', { url: 'redis://redis:6379' }, 0],
    ['a url with ?db=', { url: 'redis://redis:6379?db=4' }, 4],
    ['a url whose path wins over ?db=, as ioredis reads it', { url: 'redis://redis/3?db=4' }, 3],
    ['a url taken before db, as ioredis takes it', { url: 'redis://redis/3', db: 5 }, 3],
    ['a url naming none, and db', { url: 'redis://redis:6379', db: 5 }, 5],
    ['node-redis options (database)', { socket: { host: 'redis' }, database: 6 }, 6],
    ['a client adapter of node-redis (its options)', { options: { database: 6 } }, 6],
  ])('%s', (_name, connection, db) => {
    expect(redisDbOf(connection)).toBe(db);
  });
});

describe('urlDbOf', () => {
  it.each([
    ['its path', 'redis://127.0.0.1:6379/8', 8],
    ['rediss', 'rediss://redis:6380/2', 2],
    ['protocol-relative', '//redis:6379/5', 5],
    ['no path', 'redis://redis:6379', undefined],
    ['a slash alone', 'redis://redis:6379/', undefined],
    ['?db=', 'redis://redis:6379/?db=3', 3],
    ['a Unix socket with ?db=', '/tmp/redis.sock?db=2', 2],
    ['a Unix socket (its path is no database)', '/tmp/redis.sock', undefined],
    ['host:port with no scheme (a path there is no database)', 'redis:6379/4', undefined],
    ['no URL', 'redis://[bad', undefined],
  ])('%s', (_name, url, db) => {
    expect(urlDbOf(url)).toBe(db);
  });
});
