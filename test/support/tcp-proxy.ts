import { connect, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy in front of PostgreSQL that a test can cut: `refuse()` closes every connection
 * and the port (the database is down), `blackhole()` keeps connections open but forwards
 * nothing (the database hangs), `restore()` forwards again.
 */
export class TcpProxy {
  private server?: Server;
  private sockets = new Set<Socket>();
  private mode: 'forward' | 'blackhole' = 'forward';
  port = 0;

  constructor(
    private readonly targetHost: string,
    private targetPort: number,
  ) {}

  /** New connections go to `port` from now on (a balancer's other instance, say). */
  forwardTo(port: number): void {
    this.targetPort = port;
  }

  async start(port = 0): Promise<void> {
    this.server = createServer((client) => {
      this.track(client);
      if (this.mode === 'blackhole') return;
      const upstream = connect(this.targetPort, this.targetHost);
      this.track(upstream);
      client.pipe(upstream).pipe(client);
      client.on('error', () => upstream.destroy());
      upstream.on('error', () => client.destroy());
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve) => this.server!.listen(port, '127.0.0.1', resolve));
    const address = this.server.address();
    this.port = typeof address === 'object' && address ? address.port : port;
  }

  async refuse(): Promise<void> {
    this.dropAll();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
    this.server = undefined;
  }

  blackhole(): void {
    this.mode = 'blackhole';
    for (const socket of this.sockets) {
      socket.unpipe();
      socket.pause();
    }
  }

  async restore(): Promise<void> {
    this.dropAll();
    this.mode = 'forward';
    if (!this.server) await this.start(this.port);
  }

  async stop(): Promise<void> {
    await this.refuse();
  }

  private track(socket: Socket) {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
  }

  private dropAll() {
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
  }
}
