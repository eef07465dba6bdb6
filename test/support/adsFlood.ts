import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/**
 * A hostile xDS management server (adsFloodServer.mjs, a process of its own): every ADS stream
 * gets valid RateLimitConfig updates at `perSecond` once the flood is on, a new version each,
 * whatever the client answers.
 */
export interface AdsFlood {
  address: string;
  /** Versions the client ACKed and NACKed, in order, and each NACK's reason. */
  acks: string[];
  nacks: string[];
  nackMessages: string[];
  flood(on: boolean): void;
  /** Sends one update of 4 MB: a million nested empty lists in a descriptor's metadata. */
  bomb(): void;
  /** Updates written so far, the last version, and the limit it sets. */
  sent(): Promise<{ count: number; last: string; limit: number }>;
  close(): Promise<void>;
}

type FloodEvent =
  | { event: 'listening'; port: number }
  | { event: 'ack' | 'nack'; version: string; message?: string }
  | { event: 'sent'; count: number; last: string; limit: number };

const script = fileURLToPath(new URL('./adsFloodServer.mjs', import.meta.url));

export async function startAdsFlood(options: { perSecond: number }): Promise<AdsFlood> {
  const child = spawn(process.execPath, [script, String(options.perSecond)], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const acks: string[] = [];
  const nacks: string[] = [];
  const nackMessages: string[] = [];
  let onSent: ((event: Extract<FloodEvent, { event: 'sent' }>) => void) | undefined;
  const port = await new Promise<number>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the flood server exited (${code})`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const event = JSON.parse(line) as FloodEvent;
      if (event.event === 'listening') resolve(event.port);
      else if (event.event === 'ack') acks.push(event.version);
      else if (event.event === 'nack') {
        nacks.push(event.version);
        nackMessages.push(event.message ?? '');
      } else if (event.event === 'sent') onSent?.(event);
    });
  });
  return {
    address: `127.0.0.1:${port}`,
    acks,
    nacks,
    nackMessages,
    bomb: () => child.stdin!.write('bomb\n'),
    flood: (on) => child.stdin!.write(on ? 'flood on\n' : 'flood off\n'),
    sent: () =>
      new Promise((resolve) => {
        onSent = ({ count, last, limit }) => resolve({ count, last, limit });
        child.stdin!.write('sent\n');
      }),
    close: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.stdin!.end();
        setTimeout(() => child.kill('SIGKILL'), 2_000).unref();
      }),
  };
}
