/**
 * The claim store's steps on Redis, each one Lua script: Redis runs a script alone, so every
 * check and the write it guards are atomic, as the PostgreSQL statements are. Time is Redis's
 * (`TIME`), never a worker's clock, so that workers on several machines agree on when a lease
 * has expired. A record is one hash:
 *
 *   fp  fingerprint        cid  claim id          lv  lock version (fencing token, with cid)
 *   st  started | done     lu   lease end (ms), 0 once given back    ca  claimed at (ms)
 *   rc  status             rh   headers (JSON)    rb  body          fa  finished at (ms)
 *
 * An unfinished record lives `abandonedMs` past the end of its lease (so never expires while
 * a lease holds it, however long a heartbeat keeps one), counted again on takeover and
 * heartbeat; a finished one lives the retention window from its finish, and then Redis drops
 * it: there is no purge to run.
 *
 * A claim and a takeover carry a deadline on Redis's clock: the moment the caller gives up and
 * answers 503 ("nothing was executed"). A script that runs after it (it waited behind a paused
 * server, or in the client's offline queue while the server was down) does nothing, so that no
 * claim lands after its 503 and holds the key against the retry.
 */

const NOW = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;

/** Refuses a script that runs after its caller gave up: `ARGV[arg]` is the deadline. */
const inTime = (arg: number, late: string) =>
  `if now > tonumber(ARGV[${arg}]) then return ${late} end`;

/** The fence of every write after the claim: this claim, unfinished. */
const FENCED = `if redis.call('HGET', KEYS[1], 'st') ~= 'started'
  or redis.call('HGET', KEYS[1], 'lv') ~= ARGV[1]
  or redis.call('HGET', KEYS[1], 'cid') ~= ARGV[2] then
  return 0
end`;

/**
 * ARGV: fingerprint, lease ms, new claim id, abandoned ms, deadline ms. Replies {1, claim id,
 * '0', now} (claimed), {0, the record's fields..., now} (there), or {-1, now} (too late).
 */
export const CLAIM_SCRIPT = `${NOW}
${inTime(5, '{-1, tostring(now)}')}
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'cid', ARGV[3], 'lv', '0', 'st', 'started',
    'lu', now + tonumber(ARGV[2]), 'ca', now)
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + tonumber(ARGV[4]))
  return {1, ARGV[3], '0', tostring(now)}
end
local r = redis.call('HMGET', KEYS[1], 'cid', 'lv', 'fp', 'st', 'lu', 'rc', 'rh', 'rb', 'fa')
return {0, r[1], r[2], r[3], r[4], r[5] or '0', r[6] or '0', r[7] or '{}', r[8] or '', r[9] or '0', tostring(now)}`;

/** ARGV: lock version, claim id, lease ms, abandoned ms, deadline ms. -1: too late. */
export const TAKE_OVER_SCRIPT = `${NOW}
${inTime(5, '-1')}
${FENCED}
if tonumber(redis.call('HGET', KEYS[1], 'lu')) >= now then return 0 end
local lv = redis.call('HINCRBY', KEYS[1], 'lv', 1)
redis.call('HSET', KEYS[1], 'lu', now + tonumber(ARGV[3]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[4]))
return tostring(lv)`;

/** ARGV: lock version, claim id, status, headers JSON, body, retention ms. */
export const FINISH_SCRIPT = `${NOW}
${FENCED}
redis.call('HSET', KEYS[1], 'st', 'done', 'rc', ARGV[3], 'rh', ARGV[4], 'rb', ARGV[5],
  'fa', now, 'lu', '0')
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1`;

/**
 * ARGV: lock version, claim id, status, headers JSON, body. A finished key's response replaced
 * by the claim that finished it (see `completeAnswer`); its expiry and the rest kept.
 */
export const COMPLETE_ANSWER_SCRIPT = `if redis.call('HGET', KEYS[1], 'st') ~= 'done'
  or redis.call('HGET', KEYS[1], 'lv') ~= ARGV[1]
  or redis.call('HGET', KEYS[1], 'cid') ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'rc', ARGV[3], 'rh', ARGV[4], 'rb', ARGV[5])
return 1`;

/**
 * ARGV: lock version, claim id, forget ('1' or '0'). A first claim whose handler never ran is
 * deleted; otherwise only its lease ends, so that a retry resumes with its claim id.
 */
export const RELEASE_SCRIPT = `${NOW}
${FENCED}
if ARGV[3] == '1' and ARGV[1] == '0' then
  redis.call('DEL', KEYS[1])
else
  -- Ended, and marked as given back (0, before any now): its retry resumes it, rather than
  -- taking over from a worker that was lost.
  redis.call('HSET', KEYS[1], 'lu', '0')
end
return 1`;

/**
 * ARGV: lock version, claim id, lease ms, abandoned ms. Never shortens a lease, and never
 * leases again a key given back (0: see RELEASE_SCRIPT).
 */
export const EXTEND_SCRIPT = `${NOW}
${FENCED}
local held = tonumber(redis.call('HGET', KEYS[1], 'lu'))
if held == 0 then return 0 end
local lu = math.max(held, now + tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'lu', lu)
redis.call('PEXPIRE', KEYS[1], lu - now + tonumber(ARGV[4]))
return 1`;
