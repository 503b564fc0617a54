import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A proxy that, once a connection sends the takeover statement, holds back what the server
 * answers on that connection by `delayMs`: the statement has run and committed at once, its
 * answer is slow on the network (or the server's send buffer). The cancel request finds
 * nothing to cancel.
 */
export class SlowAnswerProxy {
  private server?: Server;
  private readonly sockets = new Set<Socket>();
  port = 0;

  constructor(
    private readonly targetPort: number,
    private readonly delayMs: number,
    public trigger: RegExp,
    public held: RegExp = /(?!)/,
  ) {}

  async start(): Promise<void> {
    this.server = createServer((client) => {
      const upstream = connect(this.targetPort, '127.0.0.1');
      this.sockets.add(client).add(upstream);
      // The answer to a chunk that carried the trigger is held back; order is kept.
      let slow = false;
      let releaseAt = 0;
      let sendAt = 0;
      client.on('data', (chunk: Buffer) => {
        const text = chunk.toString('latin1');
        slow = this.trigger.test(text);
        // A statement held on its way to the server (a give-back slow to reach it).
        sendAt = Math.max(sendAt, Date.now() + (this.held.test(text) ? this.delayMs : 0));
        setTimeout(() => upstream.writable && upstream.write(chunk), sendAt - Date.now());
      });
      upstream.on('data', (chunk: Buffer) => {
        releaseAt = Math.max(releaseAt, Date.now() + (slow ? this.delayMs : 0));
        setTimeout(() => client.writable && client.write(chunk), releaseAt - Date.now());
      });
      client.on('error', () => upstream.destroy());
      upstream.on('error', () => client.destroy());
      client.on('close', () => upstream.destroy());
      upstream.on('close', () =>
        setTimeout(() => client.destroy(), Math.max(0, releaseAt - Date.now()) + 10),
      );
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    const address = this.server.address();
    this.port = typeof address === 'object' && address ? address.port : 0;
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }
}
