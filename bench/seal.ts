/**
 * `npm run bench:seal`: what encryption at rest costs a replay (opening the stored response)
 * and a new key (sealing it), per response size, in one process, best of 5 rounds.
 */
import { randomBytes } from 'node:crypto';
import { ResponseSealer } from '../lib/answer/response-sealer.js';

const sealer = new ResponseSealer([{ id: 'bench', key: randomBytes(32) }]);
const scope = { tenantId: '1', key: 'bench-key' };

function microseconds(run: () => void, times: number): number {
  let best = Number.POSITIVE_INFINITY;
  for (let round = 0; round < 5; round++) {
    const started = process.hrtime.bigint();
    for (let i = 0; i < times; i++) run();
    best = Math.min(best, Number(process.hrtime.bigint() - started) / 1000 / times);
  }
  return best;
}

console.log('| response body | seal (new key) µs | open (replay) µs |\n| --- | --- | --- |');
for (const size of [200, 1024, 100 * 1024, 1024 * 1024]) {
  const response = {
    status: 201,
    headers: { 'content-type': 'application/json; charset=utf-8' },
    body: randomBytes(size),
  };
  const sealed = sealer.seal(scope, response);
  const times = Math.max(20, Math.floor(2_000_000 / (size + 500)));
  const seal = microseconds(() => sealer.seal(scope, response), times);
  const open = microseconds(() => sealer.open(scope, sealed), times);
  console.log(`| ${size} B | ${seal.toFixed(1)} | ${open.toFixed(1)} |`);
}
