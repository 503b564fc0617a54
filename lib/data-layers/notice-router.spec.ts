import { EventEmitter } from 'node:events';
import { NoticeRouter, noticesTo } from './notice-router.js';

const heardOn = (emitter: EventEmitter) => {
  const heard: unknown[] = [];
  emitter.on('notice', (notice) => heard.push(notice));
  return heard;
};

const settles = () => new Promise((resolve) => setImmediate(resolve));

describe('NoticeRouter', () => {
  it('tells a notice to the first statement handed over and not answered yet, in turn', async () => {
    const connection = new EventEmitter();
    const router = new NoticeRouter();
    const [a, b] = [new EventEmitter(), new EventEmitter()];
    const [heardA, heardB] = [heardOn(a), heardOn(b)];
    let answerA = (): void => undefined;
    const first = router.during(connection, a, new Promise<void>((r) => (answerA = r)));
    const second = router.during(connection, b, new Promise<void>(() => undefined));
    connection.emit('notice', 'a1');
    answerA();
    await first;
    await settles();
    connection.emit('notice', 'b1');
    expect([heardA, heardB]).toEqual([['a1'], ['b1']]);
    void second;
  });

  it("a statement of nobody's (pool.query) keeps its turn: its notices go nowhere", async () => {
    const connection = new EventEmitter();
    const router = new NoticeRouter();
    const view = new EventEmitter();
    const heard = heardOn(view);
    let answer = (): void => undefined;
    void router.during(connection, null, new Promise<void>((r) => (answer = r)));
    void router.during(connection, view, new Promise<void>(() => undefined));
    connection.emit('notice', 'pool');
    answer();
    await settles();
    connection.emit('notice', 'view');
    expect(heard).toEqual(['view']);
  });

  it('listens on the connection only while a statement is on it (a failure ends it too)', async () => {
    const connection = new EventEmitter();
    const router = new NoticeRouter();
    const failing = Promise.reject(new Error('23505'));
    await expect(router.during(connection, new EventEmitter(), failing)).rejects.toThrow('23505');
    await settles();
    expect(connection.listenerCount('notice')).toBe(0);
  });
});

describe('noticesTo', () => {
  it('tells a read apart its notices until stopped; nobody: nothing listens', () => {
    const connection = new EventEmitter();
    const view = new EventEmitter();
    const heard = heardOn(view);
    const stop = noticesTo(connection, view);
    connection.emit('notice', 'w');
    stop();
    connection.emit('notice', 'late');
    expect(heard).toEqual(['w']);
    noticesTo(connection, null);
    expect(connection.listenerCount('notice')).toBe(0);
  });
});
