import { subscribe, unsubscribe } from 'node:diagnostics_channel';

/**
 * The library's own listeners on its channels (metrics, the debug log), kept so that the app's
 * shutdown takes every one of them off again: a test suite that starts many apps in one
 * process would otherwise count each event once per app it ever started.
 */
export class ChannelSubscriptions {
  private readonly listeners: [string, (message: unknown) => void][] = [];

  on(channel: string, listener: (event: Record<string, unknown>) => void): void {
    const wrapped = (message: unknown) => listener(message as Record<string, unknown>);
    subscribe(channel, wrapped);
    this.listeners.push([channel, wrapped]);
  }

  close(): void {
    for (const [channel, listener] of this.listeners.splice(0)) unsubscribe(channel, listener);
  }
}
