import { Command, type Cluster, type Redis } from 'ioredis';
import type { ScriptArgs } from './scriptCall.js';

/**
 * One FCALL of a function, as `client.call('FCALL', name, ...args)` sends it, at less cost per
 * call: ioredis's generic path copies the arguments twice, converts each number in place and
 * looks the command's name up in its tables before it writes. Here the constant part of the
 * command (FCALL and the function's name) is encoded once per function, and each call encodes
 * only its own arguments, in the same RESP form, byte for byte. The command is still ioredis's:
 * it is queued, matched to its reply, routed to its key's slot on a cluster, resent after a
 * reconnection or a MOVED, and its reply decoded as `call` decodes it.
 */
export type FcallSender = (args: ScriptArgs) => Promise<unknown>;

export function fcallSender(client: Redis | Cluster, name: string): FcallSender {
  const head = `\r\n${bulk('FCALL')}${bulk(name)}`;
  return (args) => client.sendCommand(new FcallCommand(head, name, args)) as Promise<unknown>;
}

/** A RESP bulk string. */
function bulk(text: string): string {
  return `$${Buffer.byteLength(text)}\r\n${text}\r\n`;
}

/** As `call` decodes replies; one object for every call, since a command only reads it. */
const OPTIONS = { replyEncoding: 'utf8' } as const;

class FcallCommand extends Command {
  private readonly head: string;

  constructor(head: string, name: string, args: ScriptArgs) {
    // The arguments are set after, as ioredis would keep them (the function's name first, then
    // numkeys, so that a cluster finds the keys' slot).
    super('FCALL', [], OPTIONS);
    this.head = head;
    this.args = [name, ...args];
  }

  override toWritable(): string {
    const args = this.args;
    let wire = `*${args.length + 1}${this.head}`;
    for (let i = 1; i < args.length; i++) {
      const arg = args[i];
      if (typeof arg === 'string') {
        wire += `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`;
      } else {
        // A number's text is ASCII: its length is its byte length.
        const text = String(arg);
        wire += `$${text.length}\r\n${text}\r\n`;
      }
    }
    return wire;
  }
}
